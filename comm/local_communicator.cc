#include "comm/local_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "base/check.h"
#include "comm/host_reduce.h"
#include "comm/local_group.h"
#include "comm/view_util.h"

namespace moe::comm {
namespace {
using detail::LocalGroup;
using detail::LocalOp;
using detail::LocalPost;
using detail::LocalUniverse;
using detail::op_name;

std::string describe_rank(const LocalGroup& g, int q) {
  if (g.world_ranks[q] == q) return str_cat("rank ", q);
  return str_cat("rank ", q, " (world rank ", g.world_ranks[q], ")");
}

// Checks shared by every view argument of the Local backend.
std::string host_view_error(const char* what, const TensorView& v) {
  if (!v.is_host())
    return str_cat(what, " is ", v.to_string(), " but the local backend needs host memory");
  if (!v.defined()) return str_cat(what, " has no data");
  return {};
}

void copy_bytes(void* dst, const void* src, size_t n) {
  if (n != 0 && dst != src) std::memcpy(dst, src, n);
}

}  // namespace

LocalCommunicator::LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank, int world_rank)
    : group_(std::move(group)), rank_(rank), world_rank_(world_rank) {}

LocalCommunicator::~LocalCommunicator() = default;

int LocalCommunicator::world_size() const { return group_->size(); }

std::vector<std::unique_ptr<Communicator>> LocalCommunicator::create_world(int world_size,
                                                                           LocalOptions opts) {
  MOE_CHECK(world_size >= 1, "local world size ", world_size, " must be >= 1");
  auto universe = std::make_shared<LocalUniverse>();
  universe->timeout_seconds = opts.timeout_seconds;
  std::vector<int> ranks(world_size);
  for (int r = 0; r < world_size; ++r) ranks[r] = r;
  auto group = std::make_shared<LocalGroup>(universe, ranks);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < world_size; ++r) {
    comms.emplace_back(new LocalCommunicator(group, r, r));
  }
  return comms;
}

Status LocalCommunicator::collective(
    LocalPost post, const std::function<Status(const std::vector<LocalPost>&)>& body,
    const std::function<void()>& after) {
  LocalGroup& g = *group_;
  LocalUniverse& u = *g.universe;
  const LocalOp op = post.op;
  std::unique_lock<std::mutex> lock(u.mu);
  if (u.aborted) return aborted_error(u.abort_message);
  if (!g.broken.empty()) {
    return unavailable_error(op_name(op), " on ", describe_rank(g, rank_),
                             ": communicator unusable after an earlier timeout: ", g.broken);
  }
  const int64_t seq = ++sequence_;

  // Waits until every rank's counter reaches seq, bounded by the timeout. An `interruptible`
  // wait also ends on abort or a broken group. The second wait is not interruptible: once every
  // rank has arrived, each finishes its copies in bounded time, and returning early would let
  // the caller free a buffer that a peer is still reading.
  auto wait_all = [&](std::vector<int64_t>& counter, const char* phase,
                      bool interruptible) -> Status {
    counter[rank_] = seq;
    u.cv.notify_all();
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(u.timeout_seconds));
    while (true) {
      bool all = true;
      for (int q = 0; q < g.size(); ++q) all = all && counter[q] >= seq;
      if (all) return Status::OK();
      if (interruptible && u.aborted) return aborted_error(u.abort_message);
      if (interruptible && !g.broken.empty()) return unavailable_error(g.broken);
      if (u.cv.wait_until(lock, deadline) == std::cv_status::timeout &&
          std::chrono::steady_clock::now() >= deadline) {
        bool done = true;
        std::string missing;
        for (int q = 0; q < g.size(); ++q) {
          if (counter[q] >= seq) continue;
          done = false;
          missing += (missing.empty() ? "" : ", ") + describe_rank(g, q);
        }
        if (done || (interruptible && (u.aborted || !g.broken.empty()))) continue;
        g.broken = str_cat(op_name(op), " #", seq, " on ", describe_rank(g, rank_), " of ",
                           g.size(), ": timed out after ", u.timeout_seconds, " s waiting for ",
                           missing, " to ", phase);
        u.cv.notify_all();
        return unavailable_error(g.broken);
      }
    }
  };

  g.posts[rank_] = std::move(post);
  MOE_RETURN_IF_ERROR(wait_all(g.arrived, "arrive", /*interruptible=*/true));
  lock.unlock();

  // Every rank sees the same posts, so every rank reaches the same verdict on them.
  const std::vector<LocalPost>& posts = g.posts;
  Status status;
  for (int q = 0; q < g.size() && status.ok(); ++q) {
    if (posts[q].op != op) {
      status = invalid_argument_error("collective mismatch: ", describe_rank(g, rank_), " called ",
                                      op_name(op), " but ", describe_rank(g, q), " called ",
                                      op_name(posts[q].op));
    }
  }
  if (status.ok() && !posts[rank_].arg_error.empty()) {
    status = invalid_argument_error(op_name(op), ": ", posts[rank_].arg_error);
  }
  for (int q = 0; q < g.size() && status.ok(); ++q) {
    if (!posts[q].arg_error.empty()) {
      status = invalid_argument_error(op_name(op), ": ", describe_rank(g, q),
                                      " passed invalid arguments: ", posts[q].arg_error);
    }
  }
  if (status.ok()) status = body(posts);

  lock.lock();
  MOE_RETURN_IF_ERROR(wait_all(g.finished, "finish", /*interruptible=*/false));
  lock.unlock();
  if (status.ok() && after) after();
  return status;
}

Status LocalCommunicator::all_reduce(const TensorView& in, const TensorView& out, ReduceOp op,
                                     Stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  LocalPost post;
  post.op = LocalOp::kAllReduce;
  post.in = in.raw();
  post.in_bytes = in.nbytes();
  post.dtype = in.dtype();
  post.reduce = op;
  post.arg_error = host_view_error("in", in);
  if (post.arg_error.empty()) post.arg_error = host_view_error("out", out);
  if (post.arg_error.empty() && (in.dtype() != out.dtype() || in.numel() != out.numel())) {
    post.arg_error = str_cat("in ", in.to_string(), " and out ", out.to_string(),
                             " differ in dtype or element count");
  }
  if (post.arg_error.empty() && in.raw() != out.raw() &&
      overlaps(in.raw(), in.nbytes(), out.raw(), out.nbytes())) {
    post.arg_error = "in and out overlap without being the same buffer";
  }
  std::vector<unsigned char> result;  // this rank's reduced bytes, copied to out at the end
  auto body = [&](const std::vector<LocalPost>& posts) -> Status {
    std::vector<const void*> srcs;
    for (int q = 0; q < world_size(); ++q) {
      if (posts[q].dtype != posts[rank_].dtype || posts[q].in_bytes != posts[rank_].in_bytes ||
          posts[q].reduce != op) {
        return invalid_argument_error("all_reduce: ", describe_rank(*group_, q), " passed ",
                                      dtype_name(posts[q].dtype), " x ", posts[q].in_bytes,
                                      " bytes (or another op) but ", describe_rank(*group_, rank_),
                                      " passed ", dtype_name(in.dtype()), " x ", in.nbytes());
      }
      srcs.push_back(posts[q].in);
    }
    result.resize(in.nbytes());
    reduce_in_rank_order(srcs, in.dtype(), static_cast<size_t>(in.numel()), op, result.data());
    return Status::OK();
  };
  return collective(std::move(post), body,
                    [&] { copy_bytes(out.raw(), result.data(), result.size()); });
}

Status LocalCommunicator::all_gather(const TensorView& in, const TensorView& out, Stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  LocalPost post;
  post.op = LocalOp::kAllGather;
  post.in = in.raw();
  post.in_bytes = in.nbytes();
  post.dtype = in.dtype();
  post.arg_error = host_view_error("in", in);
  if (post.arg_error.empty()) post.arg_error = host_view_error("out", out);
  if (post.arg_error.empty()) {
    post.arg_error = chunked_args_error(in, "in", out, "out", world_size(), rank_);
  }
  auto body = [&](const std::vector<LocalPost>& posts) -> Status {
    for (int q = 0; q < world_size(); ++q) {
      if (posts[q].in_bytes != in.nbytes() || posts[q].dtype != in.dtype()) {
        return invalid_argument_error("all_gather: ", describe_rank(*group_, q), " sends ",
                                      posts[q].in_bytes, " bytes of ", dtype_name(posts[q].dtype),
                                      ", ", describe_rank(*group_, rank_), " ", in.nbytes(),
                                      " bytes of ", dtype_name(in.dtype()));
      }
    }
    for (int q = 0; q < world_size(); ++q) {
      copy_bytes(static_cast<char*>(out.raw()) + q * in.nbytes(), posts[q].in, in.nbytes());
    }
    return Status::OK();
  };
  return collective(std::move(post), body);
}

Status LocalCommunicator::reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                                         Stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  LocalPost post;
  post.op = LocalOp::kReduceScatter;
  post.in = in.raw();
  post.in_bytes = in.nbytes();
  post.dtype = in.dtype();
  post.reduce = op;
  post.arg_error = host_view_error("in", in);
  if (post.arg_error.empty()) post.arg_error = host_view_error("out", out);
  if (post.arg_error.empty()) {
    post.arg_error = chunked_args_error(out, "out", in, "in", world_size(), rank_);
  }
  std::vector<unsigned char> result;  // this rank's reduced chunk, copied to out at the end
  auto body = [&](const std::vector<LocalPost>& posts) -> Status {
    std::vector<const void*> srcs;
    for (int q = 0; q < world_size(); ++q) {
      if (posts[q].dtype != in.dtype() || posts[q].in_bytes != in.nbytes() ||
          posts[q].reduce != op) {
        return invalid_argument_error("reduce_scatter: ", describe_rank(*group_, q), " passed ",
                                      dtype_name(posts[q].dtype), " x ", posts[q].in_bytes,
                                      " bytes (or another op) but ", describe_rank(*group_, rank_),
                                      " passed ", dtype_name(in.dtype()), " x ", in.nbytes());
      }
      srcs.push_back(static_cast<const char*>(posts[q].in) + rank_ * out.nbytes());
    }
    result.resize(out.nbytes());
    reduce_in_rank_order(srcs, in.dtype(), static_cast<size_t>(out.numel()), op, result.data());
    return Status::OK();
  };
  return collective(std::move(post), body,
                    [&] { copy_bytes(out.raw(), result.data(), result.size()); });
}

Status LocalCommunicator::broadcast(const TensorView& buf, int root, Stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  LocalPost post;
  post.op = LocalOp::kBroadcast;
  post.in = buf.raw();
  post.in_bytes = buf.nbytes();
  post.dtype = buf.dtype();
  post.root = root;
  post.arg_error = host_view_error("buf", buf);
  if (post.arg_error.empty() && (root < 0 || root >= world_size())) {
    post.arg_error = str_cat("root ", root, " is not a rank of a world of ", world_size());
  }
  auto body = [&](const std::vector<LocalPost>& posts) -> Status {
    for (int q = 0; q < world_size(); ++q) {
      if (posts[q].root != root || posts[q].in_bytes != buf.nbytes()) {
        return invalid_argument_error("broadcast: ", describe_rank(*group_, q), " passed root ",
                                      posts[q].root, " and ", posts[q].in_bytes, " bytes, ",
                                      describe_rank(*group_, rank_), " root ", root, " and ",
                                      buf.nbytes(), " bytes");
      }
    }
    if (rank_ != root) copy_bytes(buf.raw(), posts[root].in, buf.nbytes());
    return Status::OK();
  };
  return collective(std::move(post), body);
}

Status LocalCommunicator::all_to_all(const TensorView& in, const TensorView& out, Stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  const int n = world_size();
  LocalPost post;
  post.op = LocalOp::kAllToAll;
  post.in = in.raw();
  post.in_bytes = in.nbytes();
  post.dtype = in.dtype();
  post.arg_error = host_view_error("in", in);
  if (post.arg_error.empty()) post.arg_error = host_view_error("out", out);
  if (post.arg_error.empty() && (in.ndim() < 1 || out.ndim() < 1 || in.dim(0) % n != 0 ||
                                 in.dtype() != out.dtype() || in.numel() != out.numel())) {
    post.arg_error = str_cat("in ", in.to_string(), " and out ", out.to_string(),
                             " must be equal [world_size ", n, " * k, ...] views of one dtype");
  }
  if (post.arg_error.empty() && overlaps(in.raw(), in.nbytes(), out.raw(), out.nbytes())) {
    post.arg_error = "in and out overlap";
  }
  auto body = [&](const std::vector<LocalPost>& posts) -> Status {
    const size_t chunk = in.nbytes() / n;
    for (int q = 0; q < n; ++q) {
      if (posts[q].in_bytes != in.nbytes() || posts[q].dtype != in.dtype()) {
        return invalid_argument_error("all_to_all: ", describe_rank(*group_, q), " exchanges ",
                                      posts[q].in_bytes, " bytes, ", describe_rank(*group_, rank_),
                                      " ", in.nbytes());
      }
    }
    for (int q = 0; q < n; ++q) {
      copy_bytes(static_cast<char*>(out.raw()) + q * chunk,
                 static_cast<const char*>(posts[q].in) + rank_ * chunk, chunk);
    }
    return Status::OK();
  };
  return collective(std::move(post), body);
}

Status LocalCommunicator::all_to_all_v(const TensorView& in, const AllToAllPlan& plan,
                                       const TensorView& out, Stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  const int n = world_size();
  LocalPost post;
  post.op = LocalOp::kAllToAllV;
  post.in = in.raw();
  post.dtype = in.dtype();
  post.plan = &plan;
  post.arg_error = host_view_error("in", in);
  if (post.arg_error.empty()) post.arg_error = host_view_error("out", out);
  if (post.arg_error.empty() && plan.world_size() != n) {
    post.arg_error = str_cat("plan has ", plan.world_size(), " ranks, the communicator ", n);
  }
  if (post.arg_error.empty() && (in.ndim() < 1 || out.ndim() < 1 || in.dim(0) != plan.send_total ||
                                 out.dim(0) != plan.recv_total || in.dtype() != out.dtype() ||
                                 row_bytes_of(in) != row_bytes_of(out))) {
    post.arg_error = str_cat("in ", in.to_string(), " and out ", out.to_string(),
                             " must be [send_total ", plan.send_total, ", ...] and [recv_total ",
                             plan.recv_total, ", ...] with one row size and dtype");
  }
  if (post.arg_error.empty() && overlaps(in.raw(), in.nbytes(), out.raw(), out.nbytes())) {
    post.arg_error = "in and out overlap";
  }
  if (post.arg_error.empty()) post.row_bytes = row_bytes_of(in);
  auto body = [&](const std::vector<LocalPost>& posts) -> Status {
    const size_t rb = posts[rank_].row_bytes;
    for (int s = 0; s < n; ++s) {
      if (posts[s].row_bytes != rb || posts[s].dtype != in.dtype()) {
        return invalid_argument_error("all_to_all_v: ", describe_rank(*group_, s), " has rows of ",
                                      posts[s].row_bytes, " bytes of ", dtype_name(posts[s].dtype),
                                      ", ", describe_rank(*group_, rank_), " ", rb, " of ",
                                      dtype_name(in.dtype()));
      }
      for (int d = 0; d < n; ++d) {  // every pair, so every rank reaches the same verdict
        const int64_t sent = posts[s].plan->send_counts[d];
        const int64_t expected = posts[d].plan->recv_counts[s];
        if (sent != expected) {
          return invalid_argument_error("all_to_all_v: plans disagree: ", describe_rank(*group_, s),
                                        " sends ", sent, " rows to ", describe_rank(*group_, d),
                                        ", which expects ", expected);
        }
      }
    }
    for (int q = 0; q < n; ++q) {
      const char* src =
          static_cast<const char*>(posts[q].in) + posts[q].plan->send_offsets[rank_] * rb;
      copy_bytes(static_cast<char*>(out.raw()) + plan.recv_offsets[q] * rb, src,
                 static_cast<size_t>(plan.recv_counts[q]) * rb);
    }
    return Status::OK();
  };
  return collective(std::move(post), body);
}

Status LocalCommunicator::barrier() {
  LocalPost post;
  post.op = LocalOp::kBarrier;
  return collective(std::move(post), [](const std::vector<LocalPost>&) { return Status::OK(); });
}

StatusOr<std::vector<std::string>> LocalCommunicator::gather_bytes(const std::string& mine,
                                                                   int root) {
  LocalPost post;
  post.op = LocalOp::kGatherBytes;
  post.bytes = &mine;
  post.root = root;
  if (root < 0 || root >= world_size()) {
    post.arg_error = str_cat("root ", root, " is not a rank of a world of ", world_size());
  }
  std::vector<std::string> result;
  auto body = [&](const std::vector<LocalPost>& posts) -> Status {
    for (int q = 0; q < world_size(); ++q) {
      if (posts[q].root != root) {
        return invalid_argument_error("gather_bytes: ", describe_rank(*group_, q), " passed root ",
                                      posts[q].root, ", ", describe_rank(*group_, rank_), " ",
                                      root);
      }
    }
    if (rank_ == root) {
      for (const LocalPost& p : posts) result.push_back(*p.bytes);
    }
    return Status::OK();
  };
  MOE_RETURN_IF_ERROR(collective(std::move(post), body));
  return result;
}

StatusOr<std::string> LocalCommunicator::broadcast_bytes(const std::string& value, int root) {
  LocalPost post;
  post.op = LocalOp::kBroadcastBytes;
  post.bytes = &value;
  post.root = root;
  if (root < 0 || root >= world_size()) {
    post.arg_error = str_cat("root ", root, " is not a rank of a world of ", world_size());
  }
  std::string result;
  auto body = [&](const std::vector<LocalPost>& posts) -> Status {
    for (int q = 0; q < world_size(); ++q) {
      if (posts[q].root != root) {
        return invalid_argument_error("broadcast_bytes: ", describe_rank(*group_, q),
                                      " passed root ", posts[q].root, ", ",
                                      describe_rank(*group_, rank_), " ", root);
      }
    }
    result = *posts[root].bytes;
    return Status::OK();
  };
  MOE_RETURN_IF_ERROR(collective(std::move(post), body));
  return result;
}

StatusOr<std::unique_ptr<Communicator>> LocalCommunicator::split(int color, int key) {
  LocalPost post;
  post.op = LocalOp::kSplit;
  post.color = color;
  post.key = key;
  std::unique_ptr<Communicator> result;
  auto body = [&](const std::vector<LocalPost>& posts) -> Status {
    if (color < 0) return Status::OK();
    std::vector<std::pair<int, int>> members;  // (key, old rank), sorted as MPI_Comm_split does
    for (int q = 0; q < world_size(); ++q) {
      if (posts[q].color == color) members.emplace_back(posts[q].key, q);
    }
    std::sort(members.begin(), members.end());
    int new_rank = 0;
    while (members[new_rank].second != rank_) ++new_rank;
    LocalUniverse& u = *group_->universe;
    std::lock_guard<std::mutex> lock(u.mu);
    auto& pending = group_->splits[{sequence_, color}];
    if (!pending.group) {
      std::vector<int> world;
      for (const auto& m : members) world.push_back(group_->world_ranks[m.second]);
      pending.group = std::make_shared<LocalGroup>(group_->universe, std::move(world));
    }
    result.reset(new LocalCommunicator(pending.group, new_rank, world_rank_));
    if (++pending.taken == static_cast<int>(members.size())) {
      group_->splits.erase({sequence_, color});
    }
    return Status::OK();
  };
  MOE_RETURN_IF_ERROR(collective(std::move(post), body));
  return result;
}

void LocalCommunicator::set_timeout(double seconds) {
  LocalUniverse& u = *group_->universe;
  std::lock_guard<std::mutex> lock(u.mu);
  u.timeout_seconds = seconds;  // shared by the universe's ranks, which all set the same bound
}

Status LocalCommunicator::poll_async_error() {
  LocalUniverse& u = *group_->universe;
  std::lock_guard<std::mutex> lock(u.mu);
  if (u.aborted) return aborted_error(u.abort_message);
  if (!group_->broken.empty()) return unavailable_error(group_->broken);
  return Status::OK();
}

Status LocalCommunicator::abort(const std::string& reason) {
  LocalUniverse& u = *group_->universe;
  std::lock_guard<std::mutex> lock(u.mu);
  if (!u.aborted) {
    u.aborted = true;
    u.abort_message = str_cat("aborted by world rank ", world_rank_, ": ", reason);
  }
  u.cv.notify_all();
  return Status::OK();
}

Status run_local_ranks(int world_size, const std::function<Status(Communicator&)>& fn,
                       LocalOptions opts) {
  if (world_size < 1) return invalid_argument_error("run_local_ranks: world size ", world_size);
  std::vector<std::unique_ptr<Communicator>> comms =
      LocalCommunicator::create_world(world_size, opts);
  std::mutex mu;
  Status first;
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      Status s = fn(*comms[r]);
      if (s.ok()) return;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) first = s.with_context(str_cat("rank ", r));
      }
      comms[r]->abort(str_cat("rank ", r, " failed: ", s.to_string())).ignore_error();
    });
  }
  for (std::thread& t : threads) t.join();
  return first;
}

}  // namespace moe::comm
