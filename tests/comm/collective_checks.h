// Backend-independent conformance checks of the Communicator contract. Each check is run by
// every rank of a communicator (threads of the Local backend, processes under mpirun, GPUs with
// NCCL) and returns OK or an error naming the rank and the first wrong value.
//
// Payloads are rank-stamped (e.g. value = src*1000 + dst*10 + index), so each rank recomputes
// what it must receive from formulas, without communicating and without the code under test.
// Buffers are allocated on `device` (host for Local/MPI, the rank's GPU for NCCL) and read back
// through host copies.
#pragma once

#include "comm/communicator.h"

namespace moe::comm::testing {

// all_reduce sum/max/min over every dtype, in place and out of place; exact integer-valued data.
Status check_all_reduce(Communicator& comm, Device device);
// all_gather of i64 and u8 views, and in place (in is out's own chunk).
Status check_all_gather(Communicator& comm, Device device);
// reduce_scatter sum/max/min over every dtype, out of place and in place (out is in's own
// chunk, the rest of in untouched); exact integer-valued data.
Status check_reduce_scatter(Communicator& comm, Device device);
// f32 sums whose value depends on the order (1 and halves of its ulp): on a host backend
// all_reduce and reduce_scatter both give the rank-order sum bit for bit; on any backend up to 2
// ranks (a + b = b + a) reduce_scatter gives all_reduce's chunk bit for bit (communicator.h).
Status check_reduction_order(Communicator& comm, Device device);
// broadcast from every root.
Status check_broadcast(Communicator& comm, Device device);
// Equal-chunk all_to_all with two rows per peer.
Status check_all_to_all(Communicator& comm, Device device);
// all_to_all_v with counts(src, dst) = (src + 2*dst + 1) % 4 (zeros included), every received
// row's stamp checked; then the transposed plan sends everything back (round trip), for f64 and
// bf16 rows.
Status check_all_to_all_v(Communicator& comm, Device device);
Status check_barrier(Communicator& comm);
// gather_bytes to every root: strings of different lengths (one empty, some with '\0').
Status check_gather_bytes(Communicator& comm);
// broadcast_bytes from every root.
Status check_broadcast_bytes(Communicator& comm);
// split(rank % 2, -rank): groups by parity, ordered by descending world rank; then the last
// rank passes color -1 and gets no communicator.
Status check_split(Communicator& comm, Device device);
// make_process_groups for every ep_size dividing the world: sizes, ranks, membership (all_gather
// of world ranks in each group) and a DP all_reduce.
Status check_process_groups(Communicator& comm, Device device);
// Bad arguments passed identically on every rank give kInvalidArgument on every rank.
Status check_argument_errors(Communicator& comm, Device device);

// Every check above, in order (all ranks must run the same sequence).
Status check_all(Communicator& comm, Device device);

}  // namespace moe::comm::testing
