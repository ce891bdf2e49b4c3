#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "base/check.h"
#include "base/logging.h"
#include "comm/host_reduce.h"
#include "comm/host_staging.h"
#include "comm/mpi_util.h"
#include "comm/view_util.h"

namespace moe::comm {
namespace {

using detail::mpi_alive;

constexpr int kDiagTag = 7919;  // timeout diagnosis messages (their own communicator)

// bf16 has no MPI type: it travels as MPI_UINT16_T with these user-defined operators (bf16
// sums, like every floating-point sum, go through Impl::rank_order_sum instead).
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_pair(in, inout, static_cast<size_t>(*len), DType::kBF16, ReduceOp::kMax);
}
void bf16_min(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_pair(in, inout, static_cast<size_t>(*len), DType::kBF16, ReduceOp::kMin);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kBF16:
      return MPI_UINT16_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kU8:
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

const char* op_text(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

// (datatype, count) describing `bytes` contiguous bytes with count <= max_count. Above it, one
// element of a derived type: q blocks of max_count bytes, then the remainder (BigMPI's trick).
// Frees the derived type when it goes out of scope (MPI keeps it alive for pending operations).
class ByteType {
 public:
  ByteType() = default;
  ByteType(const ByteType&) = delete;
  ByteType& operator=(const ByteType&) = delete;
  ~ByteType() {
    if (owned_ && mpi_alive()) MPI_Type_free(&type_);
  }

  Status build(size_t bytes, int64_t max_count) {
    const auto limit = static_cast<size_t>(max_count);
    if (bytes <= limit) {
      type_ = MPI_BYTE;
      count_ = static_cast<int>(bytes);
      return Status::OK();
    }
    const size_t blocks = bytes / limit;
    const size_t rest = bytes % limit;
    if (blocks > limit) {
      return invalid_argument_error(bytes, " bytes are too many for one MPI message");
    }
    MPI_Datatype block = MPI_DATATYPE_NULL, body = MPI_DATATYPE_NULL;
    MOE_MPI_RETURN_IF_ERROR(MPI_Type_contiguous(static_cast<int>(limit), MPI_BYTE, &block));
    MOE_MPI_RETURN_IF_ERROR(MPI_Type_contiguous(static_cast<int>(blocks), block, &body));
    MPI_Type_free(&block);
    if (rest == 0) {
      type_ = body;
    } else {
      int lengths[2] = {1, static_cast<int>(rest)};
      MPI_Aint displacements[2] = {0, static_cast<MPI_Aint>(blocks * limit)};
      MPI_Datatype types[2] = {body, MPI_BYTE};
      MOE_MPI_RETURN_IF_ERROR(MPI_Type_create_struct(2, lengths, displacements, types, &type_));
      MPI_Type_free(&body);
    }
    MOE_MPI_RETURN_IF_ERROR(MPI_Type_commit(&type_));
    owned_ = true;
    count_ = 1;
    return Status::OK();
  }

  // One element of exactly `bytes` bytes (rows of all_to_all_v).
  Status build_row(size_t bytes, int64_t max_count) {
    if (bytes > static_cast<size_t>(max_count)) return build(bytes, max_count);
    MOE_MPI_RETURN_IF_ERROR(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &type_));
    MOE_MPI_RETURN_IF_ERROR(MPI_Type_commit(&type_));
    owned_ = true;
    count_ = 1;
    return Status::OK();
  }

  MPI_Datatype type() const { return type_; }
  int count() const { return count_; }

 private:
  MPI_Datatype type_ = MPI_BYTE;
  int count_ = 0;
  bool owned_ = false;
};

// `bytes` contiguous bytes as one element whose extent is `stride`: with count 1 per rank, an
// all-to-all sends the same stretch of every rank's chunk (chunks `stride` apart). Freed when it
// goes out of scope (MPI keeps it alive for pending operations).
class StridedBlock {
 public:
  StridedBlock() = default;
  StridedBlock(const StridedBlock&) = delete;
  StridedBlock& operator=(const StridedBlock&) = delete;
  ~StridedBlock() {
    if (type_ != MPI_DATATYPE_NULL && mpi_alive()) MPI_Type_free(&type_);
  }

  Status build(size_t bytes, size_t stride) {
    MPI_Datatype block = MPI_DATATYPE_NULL;
    MOE_MPI_RETURN_IF_ERROR(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &block));
    const Status resized =
        MOE_MPI_STATUS(MPI_Type_create_resized(block, 0, static_cast<MPI_Aint>(stride), &type_));
    MPI_Type_free(&block);
    MOE_RETURN_IF_ERROR(resized);
    MOE_MPI_RETURN_IF_ERROR(MPI_Type_commit(&type_));
    return Status::OK();
  }
  MPI_Datatype type() const { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

// The most reduce_chunks receives per round, over all ranks.
constexpr size_t kScratchBytes = size_t{32} << 20;

}  // namespace

// ---------------------------------------------------------------------------------------------
// MpiCommunicator

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  int world_rank = 0;
  MpiOptions opts;
  MPI_Op bf16_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // by ReduceOp: -, max, min
  std::string broken;              // why the communicator is unusable (after a timeout)
  std::vector<MPI_Request> stuck;  // requests a timeout left pending
  // Timeout diagnosis (see diagnose()): its own communicator, the wait counter, and every rank's
  // rank in MPI_COMM_WORLD (for messages).
  MPI_Comm diag = MPI_COMM_NULL;
  int64_t waits = 0;
  std::vector<int> world_of;
  std::vector<int64_t> diag_out;                // this rank's note, kept alive for the sends
  std::vector<std::array<int64_t, 2>> diag_in;  // the peers' notes
  std::vector<unsigned char> scratch;           // reduce_chunks' receive buffer (kScratchBytes)

  ~Impl() {
    if (!mpi_alive()) return;
    for (MPI_Request& r : stuck) {
      int done = 0;
      if (r != MPI_REQUEST_NULL) MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    }
    for (MPI_Op& op : bf16_ops) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
    if (diag != MPI_COMM_NULL && broken.empty()) MPI_Comm_free(&diag);
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }

  // Takes ownership of `c`: error handler, rank, size, bf16 operators.
  Status adopt(MPI_Comm c, const MpiOptions& options) {
    comm = c;
    opts = options;
    MOE_MPI_RETURN_IF_ERROR(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    MOE_MPI_RETURN_IF_ERROR(MPI_Comm_rank(comm, &rank));
    MOE_MPI_RETURN_IF_ERROR(MPI_Comm_size(comm, &size));
    MOE_MPI_RETURN_IF_ERROR(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
    MOE_MPI_RETURN_IF_ERROR(MPI_Op_create(&bf16_max, 1, &bf16_ops[1]));
    MOE_MPI_RETURN_IF_ERROR(MPI_Op_create(&bf16_min, 1, &bf16_ops[2]));
    MOE_MPI_RETURN_IF_ERROR(MPI_Comm_dup(comm, &diag));
    MOE_MPI_RETURN_IF_ERROR(MPI_Comm_set_errhandler(diag, MPI_ERRORS_RETURN));
    MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    MOE_MPI_RETURN_IF_ERROR(MPI_Comm_group(comm, &mine));
    MOE_MPI_RETURN_IF_ERROR(MPI_Comm_group(MPI_COMM_WORLD, &world));
    std::vector<int> ranks(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) ranks[r] = r;
    world_of.assign(static_cast<size_t>(size), 0);
    MOE_MPI_RETURN_IF_ERROR(
        MPI_Group_translate_ranks(mine, size, ranks.data(), world, world_of.data()));
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    return Status::OK();
  }

  std::string world_rank_list(const std::vector<int>& ranks) const {
    std::string out;
    for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(world_of[r]);
    return out;
  }

  // After a timeout in wait #`wait_id` (`what`): every rank that times out tells every peer which
  // wait it is stuck in, over the diagnosis communicator, and listens for `grace` seconds. A peer
  // that says nothing did not arrive (dead, hung, or busy elsewhere); one that names another wait
  // called the collectives in another order. Rank numbers are MPI_COMM_WORLD's.
  std::string diagnose(int64_t wait_id, const char* what, double grace) {
    const int64_t code = static_cast<int64_t>(std::hash<std::string>{}(what)&0x7fffffff);
    diag_out = {wait_id, code};
    diag_in.assign(static_cast<size_t>(size), {-1, -1});
    std::vector<MPI_Request> recvs(static_cast<size_t>(size), MPI_REQUEST_NULL);
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      MPI_Request send = MPI_REQUEST_NULL;
      if (MPI_Isend(diag_out.data(), 2, MPI_INT64_T, r, kDiagTag, diag, &send) == MPI_SUCCESS) {
        stuck.push_back(send);
      }
      if (MPI_Irecv(diag_in[r].data(), 2, MPI_INT64_T, r, kDiagTag, diag, &recvs[r]) !=
          MPI_SUCCESS) {
        recvs[r] = MPI_REQUEST_NULL;
      }
    }
    std::vector<bool> heard(static_cast<size_t>(size), false);
    heard[rank] = true;
    using Clock = std::chrono::steady_clock;
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(grace));
    for (;;) {
      bool all = true;
      for (int r = 0; r < size; ++r) {
        if (heard[r] || recvs[r] == MPI_REQUEST_NULL) continue;
        int done = 0;
        if (MPI_Test(&recvs[r], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) heard[r] = true;
        all = all && heard[r];
      }
      if (all || Clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (MPI_Request& r : recvs) {
      if (r != MPI_REQUEST_NULL) stuck.push_back(r);
    }
    std::vector<int> missing, waiting, elsewhere;
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      if (!heard[r]) {
        missing.push_back(r);
      } else if (diag_in[r][0] == wait_id && diag_in[r][1] == code) {
        waiting.push_back(r);
      } else {
        elsewhere.push_back(r);
      }
    }
    std::string out;
    if (!missing.empty()) {
      out = str_cat("rank(s) ", world_rank_list(missing), " did not arrive");
    } else {
      out = "every peer arrived late or waits too";
    }
    if (!elsewhere.empty()) {
      out += str_cat("; rank(s) ", world_rank_list(elsewhere),
                     " wait in another collective (a call-order mismatch)");
    }
    if (!waiting.empty()) out += str_cat("; rank(s) ", world_rank_list(waiting), " waited too");
    return out;
  }

  std::string who() const {
    return rank == world_rank ? str_cat("rank ", rank)
                              : str_cat("rank ", rank, " (world rank ", world_rank, ")");
  }

  Status usable(const char* what) const {
    if (!mpi_alive()) return failed_precondition_error(what, ": MPI is not initialised");
    if (!broken.empty()) {
      return unavailable_error(what, " on ", who(), ": communicator unusable after an earlier ",
                               "timeout: ", broken);
    }
    return Status::OK();
  }

  // Polls `reqs` until all complete, MPI reports an error, or the timeout passes; then names
  // the ranks that did not arrive (diagnose()).
  Status wait(std::vector<MPI_Request>& reqs, const char* what) {
    const int64_t wait_id = ++waits;
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(opts.timeout_seconds));
    const auto backoff = Clock::now() + std::chrono::seconds(1);
    for (;;) {
      int done = 0;
      const int rc =
          MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        return internal_error("mpi: ", what, " on ", who(), ": ",
                              ::moe::detail::mpi_error_string(rc));
      }
      if (done) return Status::OK();
      if (Clock::now() >= deadline) {
        stuck.insert(stuck.end(), reqs.begin(), reqs.end());
        const std::string why = diagnose(wait_id, what, std::min(10.0, opts.timeout_seconds));
        broken = str_cat(who(), ": ", what, " (collective #", wait_id, ") timed out after ",
                         opts.timeout_seconds, " s: ", why);
        return unavailable_error(broken);
      }
      // Poll continuously (yielding, as MPI's own blocking calls do when oversubscribed): a
      // nonblocking collective advances only inside MPI calls, and a large exchange without a
      // single-copy transport takes hundreds of fragment steps, so sleeping between polls
      // stretches it several-fold. After a second without completion a peer is busy elsewhere:
      // back off so that oversubscribed ranks can run.
      if (Clock::now() < backoff) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  Status wait_one(MPI_Request req, const char* what) {
    std::vector<MPI_Request> reqs{req};
    return wait(reqs, what);
  }

  // The host backends' reduction order (comm/host_reduce.h) over equal chunks: chunk r of `send`
  // (size chunks of `count` elements of dtype, contiguous) from every rank is combined in rank
  // order into `mine` (count elements) on rank r. Segment by segment, through `scratch` (kept
  // between calls: a fresh receive buffer as large as the data costs more in page faults than
  // the exchange itself). mine may alias send's chunk `rank`: a segment is written once every
  // rank has received it.
  Status reduce_chunks(const void* send, size_t count, DType dtype, ReduceOp op, void* mine,
                       const char* what) {
    const size_t esize = dtype_size(dtype);
    const size_t per_rank = std::min<size_t>(kScratchBytes / static_cast<size_t>(size),
                                             static_cast<size_t>(opts.max_count));
    const size_t segment = std::max<size_t>(1, per_rank / esize);  // elements per rank and round
    scratch.resize(std::min(segment, count) * esize * static_cast<size_t>(size));
    std::vector<const void*> srcs(static_cast<size_t>(size));
    for (size_t begin = 0; begin < count; begin += segment) {
      const size_t len = std::min(segment, count - begin);
      // One element per destination: the segment's bytes of its chunk, chunks `count` apart.
      StridedBlock block;
      MOE_RETURN_IF_ERROR(block.build(len * esize, count * esize));
      MPI_Request req = MPI_REQUEST_NULL;
      MOE_MPI_RETURN_IF_ERROR(MPI_Ialltoall(static_cast<const char*>(send) + begin * esize, 1,
                                            block.type(), scratch.data(),
                                            static_cast<int>(len * esize), MPI_BYTE, comm, &req));
      MOE_RETURN_IF_ERROR(wait_one(req, what));
      for (int r = 0; r < size; ++r) srcs[r] = scratch.data() + r * len * esize;
      reduce_in_rank_order(srcs, dtype, len, op, static_cast<char*>(mine) + begin * esize);
    }
    return Status::OK();
  }

  // all_reduce's floating-point sum in rank order (communicator.h), as the Local backend sums:
  // reduce_chunks over the first size x floor(n / size) elements into this rank's chunk of dst,
  // an in-place all-gather of the chunks, and the last n mod size elements gathered whole and
  // reduced on every rank. dst may alias src.
  Status rank_order_sum(const void* src, void* dst, size_t n, DType dtype) {
    const size_t esize = dtype_size(dtype);
    const size_t k = n / static_cast<size_t>(size), whole = k * static_cast<size_t>(size);
    char* out = static_cast<char*>(dst);
    MPI_Request req = MPI_REQUEST_NULL;
    if (k > 0) {
      MOE_RETURN_IF_ERROR(
          reduce_chunks(src, k, dtype, ReduceOp::kSum, out + rank * k * esize, "all_reduce(sum)"));
      ByteType bt;
      MOE_RETURN_IF_ERROR(bt.build(k * esize, opts.max_count));
      MOE_MPI_RETURN_IF_ERROR(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, bt.count(),
                                             bt.type(), comm, &req));
      MOE_RETURN_IF_ERROR(wait_one(req, "all_reduce(sum)"));
    }
    if (whole == n) return Status::OK();
    const size_t tail = (n - whole) * esize;  // < size elements
    std::vector<unsigned char> tails(tail * static_cast<size_t>(size));
    MOE_MPI_RETURN_IF_ERROR(MPI_Iallgather(static_cast<const char*>(src) + whole * esize,
                                           static_cast<int>(tail), MPI_BYTE, tails.data(),
                                           static_cast<int>(tail), MPI_BYTE, comm, &req));
    MOE_RETURN_IF_ERROR(wait_one(req, "all_reduce(sum)"));
    std::vector<const void*> srcs;
    for (int r = 0; r < size; ++r) srcs.push_back(tails.data() + r * tail);
    reduce_in_rank_order(srcs, dtype, n - whole, ReduceOp::kSum, out + whole * esize);
    return Status::OK();
  }

  Status check_root(int root, const char* what) const {
    if (root < 0 || root >= size) {
      return invalid_argument_error(what, ": root ", root, " is not a rank of a world of ", size);
    }
    return Status::OK();
  }
};

MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MpiCommunicator::~MpiCommunicator() = default;

int MpiCommunicator::rank() const { return impl_->rank; }
int MpiCommunicator::world_size() const { return impl_->size; }

StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::create_world(MpiOptions opts) {
  if (!mpi_alive()) {
    return failed_precondition_error("MPI is not initialised (create an MpiRuntime first)");
  }
  if (opts.max_count < 1 || opts.max_count > INT_MAX || !(opts.timeout_seconds > 0)) {
    return invalid_argument_error("MpiOptions: max_count ", opts.max_count, " must be in [1, ",
                                  INT_MAX, "] and timeout_seconds ", opts.timeout_seconds, " > 0");
  }
  MPI_Comm dup = MPI_COMM_NULL;
  MOE_MPI_RETURN_IF_ERROR(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  auto impl = std::make_unique<Impl>();
  MOE_RETURN_IF_ERROR(impl->adopt(dup, opts));
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(impl)));
}

Status MpiCommunicator::all_reduce(const TensorView& in, const TensorView& out, ReduceOp op,
                                   Stream stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  MOE_RETURN_IF_ERROR(impl_->usable("all_reduce"));
  if (in.dtype() != out.dtype() || in.numel() != out.numel() || !in.defined() || !out.defined()) {
    return invalid_argument_error("all_reduce: in ", in.to_string(), " and out ", out.to_string(),
                                  " differ in dtype or element count");
  }
  const bool in_place = in.raw() == out.raw();
  if (!in_place && overlaps(in.raw(), in.nbytes(), out.raw(), out.nbytes())) {
    return invalid_argument_error("all_reduce: in and out overlap without being the same buffer");
  }
  MOE_ASSIGN_OR_RETURN(HostStage dst, HostStage::output(out, stream));
  HostStage src;
  if (!in_place) {
    MOE_ASSIGN_OR_RETURN(src, HostStage::input(in, stream));
  }
  const size_t esize = dtype_size(in.dtype());
  const auto n = static_cast<size_t>(in.numel());
  if (n == 0) return Status::OK();
  // Floating-point sums in rank order; integer sums, max and min are exact in any order.
  if (op == ReduceOp::kSum && dtype_is_floating(in.dtype())) {
    MOE_RETURN_IF_ERROR(
        impl_->rank_order_sum(in_place ? dst.data() : src.data(), dst.data(), n, in.dtype()));
    return dst.finish();
  }
  const MPI_Datatype type = mpi_type(in.dtype());
  MPI_Op mpi_op = MPI_SUM;
  if (in.dtype() == DType::kBF16) {
    mpi_op = impl_->bf16_ops[static_cast<int>(op)];
  } else if (op == ReduceOp::kMax) {
    mpi_op = MPI_MAX;
  } else if (op == ReduceOp::kMin) {
    mpi_op = MPI_MIN;
  }
  const auto chunk = static_cast<size_t>(impl_->opts.max_count);
  std::vector<MPI_Request> reqs;
  for (size_t begin = 0; begin < n; begin += chunk) {
    const int count = static_cast<int>(std::min(chunk, n - begin));
    char* recv = static_cast<char*>(dst.data()) + begin * esize;
    const void* send = in_place ? MPI_IN_PLACE : static_cast<char*>(src.data()) + begin * esize;
    reqs.emplace_back();
    MOE_MPI_RETURN_IF_ERROR(
        MPI_Iallreduce(send, recv, count, type, mpi_op, impl_->comm, &reqs.back()));
  }
  MOE_RETURN_IF_ERROR(impl_->wait(reqs, str_cat("all_reduce(", op_text(op), ")").c_str()));
  return dst.finish();
}

Status MpiCommunicator::all_gather(const TensorView& in, const TensorView& out, Stream stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  MOE_RETURN_IF_ERROR(impl_->usable("all_gather"));
  const std::string bad = chunked_args_error(in, "in", out, "out", impl_->size, impl_->rank);
  if (!bad.empty()) return invalid_argument_error("all_gather: ", bad);
  const bool in_place = is_own_chunk(in.raw(), in.nbytes(), out.raw(), impl_->rank);
  HostStage src;
  if (!in_place) {
    MOE_ASSIGN_OR_RETURN(src, HostStage::input(in, stream));
  }
  MOE_ASSIGN_OR_RETURN(HostStage dst, HostStage::output(out, stream));
  ByteType bt;
  MOE_RETURN_IF_ERROR(bt.build(in.nbytes(), impl_->opts.max_count));
  MPI_Request req = MPI_REQUEST_NULL;
  MOE_MPI_RETURN_IF_ERROR(MPI_Iallgather(in_place ? MPI_IN_PLACE : src.data(), bt.count(),
                                         bt.type(), dst.data(), bt.count(), bt.type(), impl_->comm,
                                         &req));
  MOE_RETURN_IF_ERROR(impl_->wait_one(req, "all_gather"));
  return dst.finish();
}

Status MpiCommunicator::reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                                       Stream stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  MOE_RETURN_IF_ERROR(impl_->usable("reduce_scatter"));
  const std::string bad = chunked_args_error(out, "out", in, "in", impl_->size, impl_->rank);
  if (!bad.empty()) return invalid_argument_error("reduce_scatter: ", bad);
  MOE_ASSIGN_OR_RETURN(HostStage src, HostStage::input(in, stream));
  MOE_ASSIGN_OR_RETURN(HostStage dst, HostStage::output(out, stream));
  const std::string what = str_cat("reduce_scatter(", op_text(op), ")");
  MOE_RETURN_IF_ERROR(impl_->reduce_chunks(src.data(), static_cast<size_t>(out.numel()), in.dtype(),
                                           op, dst.data(), what.c_str()));
  return dst.finish();
}

Status MpiCommunicator::broadcast(const TensorView& buf, int root, Stream stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  MOE_RETURN_IF_ERROR(impl_->usable("broadcast"));
  MOE_RETURN_IF_ERROR(impl_->check_root(root, "broadcast"));
  if (!buf.defined()) return invalid_argument_error("broadcast: buf has no data");
  MOE_ASSIGN_OR_RETURN(HostStage stage, HostStage::output(buf, stream));
  ByteType bt;
  MOE_RETURN_IF_ERROR(bt.build(buf.nbytes(), impl_->opts.max_count));
  MPI_Request req = MPI_REQUEST_NULL;
  MOE_MPI_RETURN_IF_ERROR(MPI_Ibcast(stage.data(), bt.count(), bt.type(), root, impl_->comm, &req));
  MOE_RETURN_IF_ERROR(impl_->wait_one(req, "broadcast"));
  return impl_->rank == root ? Status::OK() : stage.finish();
}

Status MpiCommunicator::all_to_all(const TensorView& in, const TensorView& out, Stream stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  MOE_RETURN_IF_ERROR(impl_->usable("all_to_all"));
  const int n = impl_->size;
  if (in.ndim() < 1 || out.ndim() < 1 || in.dim(0) % n != 0 || in.dtype() != out.dtype() ||
      in.numel() != out.numel() || !in.defined() || !out.defined()) {
    return invalid_argument_error("all_to_all: in ", in.to_string(), " and out ", out.to_string(),
                                  " must be equal [world_size ", n,
                                  " * k, ...] views of one dtype");
  }
  if (overlaps(in.raw(), in.nbytes(), out.raw(), out.nbytes())) {
    return invalid_argument_error("all_to_all: in and out overlap");
  }
  MOE_ASSIGN_OR_RETURN(HostStage src, HostStage::input(in, stream));
  MOE_ASSIGN_OR_RETURN(HostStage dst, HostStage::output(out, stream));
  ByteType bt;
  MOE_RETURN_IF_ERROR(bt.build(in.nbytes() / n, impl_->opts.max_count));
  MPI_Request req = MPI_REQUEST_NULL;
  MOE_MPI_RETURN_IF_ERROR(MPI_Ialltoall(src.data(), bt.count(), bt.type(), dst.data(), bt.count(),
                                        bt.type(), impl_->comm, &req));
  MOE_RETURN_IF_ERROR(impl_->wait_one(req, "all_to_all"));
  return dst.finish();
}

Status MpiCommunicator::all_to_all_v(const TensorView& in, const AllToAllPlan& plan,
                                     const TensorView& out, Stream stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  MOE_RETURN_IF_ERROR(impl_->usable("all_to_all_v"));
  const int n = impl_->size;
  if (plan.world_size() != n) {
    return invalid_argument_error("all_to_all_v: plan has ", plan.world_size(),
                                  " ranks, the communicator ", n);
  }
  if (in.ndim() < 1 || out.ndim() < 1 || in.dim(0) != plan.send_total ||
      out.dim(0) != plan.recv_total || in.dtype() != out.dtype() ||
      row_bytes_of(in) != row_bytes_of(out) || !in.defined() || !out.defined()) {
    return invalid_argument_error("all_to_all_v: in ", in.to_string(), " and out ", out.to_string(),
                                  " must be [send_total ", plan.send_total,
                                  ", ...] and [recv_total ", plan.recv_total,
                                  ", ...] with one row size and dtype");
  }
  if (overlaps(in.raw(), in.nbytes(), out.raw(), out.nbytes())) {
    return invalid_argument_error("all_to_all_v: in and out overlap");
  }
  const int64_t limit = impl_->opts.max_count;
  std::vector<int> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  for (int r = 0; r < n; ++r) {
    const int64_t values[4] = {plan.send_counts[r], plan.send_offsets[r], plan.recv_counts[r],
                               plan.recv_offsets[r]};
    for (int64_t v : values) {
      if (v > limit) {
        return invalid_argument_error("all_to_all_v: ", v, " rows exceed MPI's count limit ", limit,
                                      " (", plan.to_string(), ")");
      }
    }
    send_counts[r] = static_cast<int>(values[0]);
    send_displs[r] = static_cast<int>(values[1]);
    recv_counts[r] = static_cast<int>(values[2]);
    recv_displs[r] = static_cast<int>(values[3]);
  }
  MOE_ASSIGN_OR_RETURN(HostStage src, HostStage::input(in, stream));
  MOE_ASSIGN_OR_RETURN(HostStage dst, HostStage::output(out, stream));
  ByteType row;
  MOE_RETURN_IF_ERROR(row.build_row(row_bytes_of(in), limit));
  MPI_Request req = MPI_REQUEST_NULL;
  MOE_MPI_RETURN_IF_ERROR(MPI_Ialltoallv(src.data(), send_counts.data(), send_displs.data(),
                                         row.type(), dst.data(), recv_counts.data(),
                                         recv_displs.data(), row.type(), impl_->comm, &req));
  MOE_RETURN_IF_ERROR(impl_->wait_one(req, "all_to_all_v"));
  return dst.finish();
}

Status MpiCommunicator::barrier() {
  MOE_RETURN_IF_ERROR(impl_->usable("barrier"));
  MPI_Request req = MPI_REQUEST_NULL;
  MOE_MPI_RETURN_IF_ERROR(MPI_Ibarrier(impl_->comm, &req));
  return impl_->wait_one(req, "barrier");
}

StatusOr<std::vector<std::string>> MpiCommunicator::gather_bytes(const std::string& mine,
                                                                 int root) {
  MOE_RETURN_IF_ERROR(impl_->usable("gather_bytes"));
  MOE_RETURN_IF_ERROR(impl_->check_root(root, "gather_bytes"));
  const int n = impl_->size;
  // Every rank learns every length, so every rank reaches the same verdict on the limit.
  int64_t my_length = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lengths(n);
  MPI_Request req = MPI_REQUEST_NULL;
  MOE_MPI_RETURN_IF_ERROR(MPI_Iallgather(&my_length, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T,
                                         impl_->comm, &req));
  MOE_RETURN_IF_ERROR(impl_->wait_one(req, "gather_bytes (lengths)"));
  int64_t total = 0, longest = 0;
  for (int64_t length : lengths) {
    total += length;
    longest = std::max(longest, length);
  }
  std::vector<std::string> result;
  if (total <= impl_->opts.max_count) {
    // Common case: MPI_Igatherv of the exact bytes.
    std::vector<int> counts(n), displs(n);
    for (int r = 0, offset = 0; r < n; offset += counts[r], ++r) {
      counts[r] = static_cast<int>(lengths[r]);
      displs[r] = offset;
    }
    std::string all(impl_->rank == root ? static_cast<size_t>(total) : 0, '\0');
    MOE_MPI_RETURN_IF_ERROR(MPI_Igatherv(mine.data(), static_cast<int>(my_length), MPI_BYTE,
                                         all.data(), counts.data(), displs.data(), MPI_BYTE, root,
                                         impl_->comm, &req));
    MOE_RETURN_IF_ERROR(impl_->wait_one(req, "gather_bytes"));
    if (impl_->rank == root) {
      for (int r = 0; r < n; ++r) result.push_back(all.substr(displs[r], counts[r]));
    }
    return result;
  }
  // Too large for int displacements: pad every string to the longest and gather blocks of one
  // derived type (every rank knows every length, so every rank takes this branch).
  std::string padded = mine;
  padded.resize(static_cast<size_t>(longest), '\0');
  std::string all(impl_->rank == root ? static_cast<size_t>(longest) * n : 0, '\0');
  ByteType bt;
  MOE_RETURN_IF_ERROR(bt.build(static_cast<size_t>(longest), impl_->opts.max_count));
  MOE_MPI_RETURN_IF_ERROR(MPI_Igather(padded.data(), bt.count(), bt.type(), all.data(), bt.count(),
                                      bt.type(), root, impl_->comm, &req));
  MOE_RETURN_IF_ERROR(impl_->wait_one(req, "gather_bytes"));
  if (impl_->rank == root) {
    for (int r = 0; r < n; ++r)
      result.push_back(all.substr(static_cast<size_t>(longest) * r, lengths[r]));
  }
  return result;
}

StatusOr<std::string> MpiCommunicator::broadcast_bytes(const std::string& value, int root) {
  MOE_RETURN_IF_ERROR(impl_->usable("broadcast_bytes"));
  MOE_RETURN_IF_ERROR(impl_->check_root(root, "broadcast_bytes"));
  int64_t length = static_cast<int64_t>(value.size());
  MPI_Request req = MPI_REQUEST_NULL;
  MOE_MPI_RETURN_IF_ERROR(MPI_Ibcast(&length, 1, MPI_INT64_T, root, impl_->comm, &req));
  MOE_RETURN_IF_ERROR(impl_->wait_one(req, "broadcast_bytes (length)"));
  std::string result = impl_->rank == root ? value : std::string(static_cast<size_t>(length), '\0');
  ByteType bt;
  MOE_RETURN_IF_ERROR(bt.build(static_cast<size_t>(length), impl_->opts.max_count));
  MOE_MPI_RETURN_IF_ERROR(
      MPI_Ibcast(result.data(), bt.count(), bt.type(), root, impl_->comm, &req));
  MOE_RETURN_IF_ERROR(impl_->wait_one(req, "broadcast_bytes"));
  return result;
}

StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::split(int color, int key) {
  MOE_RETURN_IF_ERROR(impl_->usable("split"));
  // MPI_Comm_split blocks without bound; a bounded barrier first makes sure every peer is here.
  MPI_Request req = MPI_REQUEST_NULL;
  MOE_MPI_RETURN_IF_ERROR(MPI_Ibarrier(impl_->comm, &req));
  MOE_RETURN_IF_ERROR(impl_->wait_one(req, "split"));
  MPI_Comm sub = MPI_COMM_NULL;
  MOE_MPI_RETURN_IF_ERROR(
      MPI_Comm_split(impl_->comm, color < 0 ? MPI_UNDEFINED : color, key, &sub));
  if (sub == MPI_COMM_NULL) return std::unique_ptr<Communicator>();
  auto impl = std::make_unique<Impl>();
  MOE_RETURN_IF_ERROR(impl->adopt(sub, impl_->opts));
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(impl)));
}

void MpiCommunicator::set_timeout(double seconds) { impl_->opts.timeout_seconds = seconds; }

Status MpiCommunicator::poll_async_error() {
  if (!impl_->broken.empty()) return unavailable_error(impl_->broken);
  return Status::OK();
}

Status MpiCommunicator::abort(const std::string& reason) {
  log_error("rank ", impl_->world_rank, " aborting the MPI job: ", reason);
  if (mpi_alive()) {
    MPI_Abort(impl_->comm != MPI_COMM_NULL ? impl_->comm : MPI_COMM_WORLD, 1);
  }
  return aborted_error("aborted by world rank ", impl_->world_rank, ": ", reason);
}

}  // namespace moe::comm
