// The hierarchical all-to-all against the flat one, run by every rank of a communicator (threads
// of the Local backend, processes under mpirun) and returning OK or an error naming the rank, the
// exchange and the first row that differs.
//
// Plans are random but agree across ranks: one seeded count matrix counts[src][dst] for the whole
// group per round (0..5 rows, a third of the pairs empty), each rank's plan its row and column.
// Rows are pseudo-random bytes (every bit pattern of every dtype, NaNs included), and both
// exchanges write over the same sentinel bytes, so the comparison covers the rows a plan leaves
// alone too: the two outputs must be equal byte for byte.
#pragma once

#include <cstdint>

#include "comm/communicator.h"

namespace moe::comm::testing {

// `flat` and `hierarchical` span the same ranks with the same rank numbers. For `rounds` random
// plans, each in f32 [rows, 3], f64 [rows, 1], bf16 [rows, 5], i32 [rows, 2] and u8 [rows, 7]:
// all_to_all_v of the plan, of the plan without(rank) (my own rows left alone) and of the
// transposed plan; then an all-empty plan and all_to_all (equal chunks, 2 rows per peer, f32 and
// bf16). Buffers live on `device`.
Status check_hierarchical_matches_flat(Communicator& flat, Communicator& hierarchical,
                                       Device device, uint64_t seed, int rounds);

}  // namespace moe::comm::testing
