#include "comm/hierarchical_communicator.h"

#include <map>
#include <utility>

#include "comm/view_util.h"

namespace moe::comm {
namespace {

// Stage buffers of host views stay cached up to this many bytes (beyond, they are freed).
constexpr size_t kHostCacheBytes = size_t{1} << 30;

// Copies each RowCopy's rows from src to dst (rows of row_bytes), enqueued on `stream`.
Status copy_rows(const std::vector<RowCopy>& copies, const TensorView& src, const TensorView& dst,
                 size_t row_bytes, Stream stream) {
  const auto* from = static_cast<const char*>(src.raw());
  auto* to = static_cast<char*>(dst.raw());
  for (const RowCopy& c : copies) {
    const auto at = [&](int64_t row) { return static_cast<size_t>(row) * row_bytes; };
    MOE_RETURN_IF_ERROR(device_memcpy(to + at(c.dst), dst.device(), from + at(c.src), src.device(),
                                      at(c.rows), stream));
  }
  return Status::OK();
}

// The argument checks of all_to_all_v (empty: valid), as the flat backends make them.
std::string check_exchange(const TensorView& in, const AllToAllPlan& plan, const TensorView& out,
                           int ranks) {
  if (plan.world_size() != ranks) {
    return str_cat("plan has ", plan.world_size(), " ranks, the communicator ", ranks);
  }
  if (in.ndim() < 1 || out.ndim() < 1 || in.dim(0) != plan.send_total ||
      out.dim(0) != plan.recv_total || in.dtype() != out.dtype() ||
      row_bytes_of(in) != row_bytes_of(out) || !in.defined() || !out.defined()) {
    return str_cat("in ", in.to_string(), " and out ", out.to_string(), " must be [send_total ",
                   plan.send_total, ", ...] and [recv_total ", plan.recv_total,
                   ", ...] with one row size and dtype");
  }
  if (overlaps(in.raw(), in.nbytes(), out.raw(), out.nbytes())) return "in and out overlap";
  return {};
}

}  // namespace

StatusOr<HostGrid> HostGrid::from_host_ids(const std::vector<int>& host_of_rank) {
  HostGrid g;
  std::map<int, int> index;  // host id -> h
  for (int r = 0; r < static_cast<int>(host_of_rank.size()); ++r) {
    auto [it, added] = index.emplace(host_of_rank[r], static_cast<int>(g.rank_at.size()));
    if (added) g.rank_at.emplace_back();
    g.host.push_back(it->second);
    g.local.push_back(static_cast<int>(g.rank_at[it->second].size()));
    g.rank_at[it->second].push_back(r);
  }
  std::string counts;
  bool even = true;
  for (const std::vector<int>& ranks : g.rank_at) {
    counts += str_cat(counts.empty() ? "" : ", ", ranks.size());
    even = even && ranks.size() == g.rank_at[0].size();
  }
  if (g.hosts() < 2 || !even) {
    return invalid_argument_error("hierarchical all-to-all: the ", host_of_rank.size(),
                                  " ranks lie on ", g.hosts(), " host(s) with [", counts,
                                  "] ranks; it needs at least 2 hosts with the same number of "
                                  "ranks on each");
  }
  return g;
}

StatusOr<StagedAllToAll> stage_all_to_all(
    const AllToAllPlan& flat, const HostGrid& grid, int rank,
    const std::vector<std::vector<int64_t>>& host_send_counts) {
  const int ranks = static_cast<int>(grid.host.size()), hosts = grid.hosts(), l_n = grid.per_host();
  const auto& c = host_send_counts;  // c[l][q]: rows from (my host, l) to group rank q
  bool fits =
      flat.world_size() == ranks && rank >= 0 && rank < ranks && static_cast<int>(c.size()) == l_n;
  for (size_t l = 0; fits && l < c.size(); ++l) fits = static_cast<int>(c[l].size()) == ranks;
  if (!fits || c[grid.local[rank]] != flat.send_counts) {
    return invalid_argument_error("stage_all_to_all: a plan of ", flat.world_size(),
                                  " ranks and the send counts of ", c.size(),
                                  " host ranks do not fit rank ", rank, " of a grid of ", hosts,
                                  " hosts x ", l_n, " ranks");
  }
  const int me = grid.local[rank];
  const auto& at = grid.rank_at;
  StagedAllToAll s;
  // Stage 1: my rows ordered by destination local rank l2, then destination host h2; from my
  // host's rank l I receive its rows for (h2, me) in the same order.
  std::vector<int64_t> intra_send(l_n, 0), intra_recv(l_n, 0);
  int64_t cursor = 0;
  for (int l2 = 0; l2 < l_n; ++l2) {
    for (int h2 = 0; h2 < hosts; ++h2) {
      const int q = at[h2][l2];
      const int64_t n = flat.send_counts[q];
      if (n > 0) s.pack.push_back({flat.send_offsets[q], cursor, n});
      cursor += n;
      intra_send[l2] += n;
    }
  }
  for (int l = 0; l < l_n; ++l) {
    for (int h2 = 0; h2 < hosts; ++h2) intra_recv[l] += c[l][at[h2][me]];
  }
  MOE_ASSIGN_OR_RETURN(s.intra, AllToAllPlan::from_counts(intra_send, intra_recv));
  // Stage 2: the received rows regrouped by destination host h2, then source local rank l; from
  // host h I receive its ranks' rows for me, ordered by their local rank.
  std::vector<int64_t> next(s.intra.recv_offsets);  // [L] the next unread row of l's chunk
  std::vector<int64_t> inter_send(hosts, 0), inter_recv(hosts, 0);
  cursor = 0;
  for (int h2 = 0; h2 < hosts; ++h2) {
    for (int l = 0; l < l_n; ++l) {
      const int64_t n = c[l][at[h2][me]];
      if (n > 0) s.regroup.push_back({next[l], cursor, n});
      next[l] += n;
      cursor += n;
      inter_send[h2] += n;
    }
  }
  for (int h = 0; h < hosts; ++h) {
    for (int l = 0; l < l_n; ++l) inter_recv[h] += flat.recv_counts[at[h][l]];
  }
  MOE_ASSIGN_OR_RETURN(s.inter, AllToAllPlan::from_counts(inter_send, inter_recv));
  // Stage 3: each source's rows to their place in `out`.
  cursor = 0;
  for (int h = 0; h < hosts; ++h) {
    for (int l = 0; l < l_n; ++l) {
      const int q = at[h][l];
      const int64_t n = flat.recv_counts[q];
      if (n > 0) s.unpack.push_back({cursor, flat.recv_offsets[q], n});
      cursor += n;
    }
  }
  return s;
}

HierarchicalCommunicator::HierarchicalCommunicator(std::unique_ptr<Communicator> flat,
                                                   std::unique_ptr<Communicator> intra,
                                                   std::unique_ptr<Communicator> inter,
                                                   HostGrid grid)
    : flat_(std::move(flat)),
      intra_(std::move(intra)),
      inter_(std::move(inter)),
      grid_(std::move(grid)),
      host_buffers_(make_host_caching_allocator(kHostCacheBytes)) {}

StatusOr<std::unique_ptr<Communicator>> HierarchicalCommunicator::create(
    std::unique_ptr<Communicator> flat, const std::vector<int>& host_of_rank) {
  if (flat == nullptr) return invalid_argument_error("hierarchical all-to-all: no communicator");
  if (static_cast<int>(host_of_rank.size()) != flat->world_size()) {
    return invalid_argument_error("hierarchical all-to-all: ", host_of_rank.size(),
                                  " host ids for a group of ", flat->world_size(), " ranks");
  }
  MOE_ASSIGN_OR_RETURN(HostGrid grid, HostGrid::from_host_ids(host_of_rank));
  const int me = flat->rank(), h = grid.host[me], l = grid.local[me];
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> intra, flat->split(h, l));
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> inter, flat->split(l, h));
  if (!intra || !inter || intra->world_size() != grid.per_host() || intra->rank() != l ||
      inter->world_size() != grid.hosts() || inter->rank() != h) {
    return internal_error("hierarchical all-to-all: split returned groups of the wrong shape on ",
                          "rank ", me);
  }
  return std::unique_ptr<Communicator>(new HierarchicalCommunicator(
      std::move(flat), std::move(intra), std::move(inter), std::move(grid)));
}

StatusOr<Tensor> HierarchicalCommunicator::stage_buffer(Device device, int64_t rows,
                                                        size_t row_bytes, Stream stream) {
  const Shape shape{rows, static_cast<int64_t>(row_bytes)};
  if (device.is_host()) return Tensor::allocate(shape, DType::kU8, host_buffers_, stream);
  if (device_buffers_ == nullptr) {
    MOE_ASSIGN_OR_RETURN(device_buffers_, make_cuda_pool_allocator(device.index));
  }
  return Tensor::allocate(shape, DType::kU8, device_buffers_, stream, /*guarded=*/true);
}

Status HierarchicalCommunicator::run_stages(const StagedAllToAll& s, const TensorView& in,
                                            const TensorView& out, Stream stream) {
  const size_t rb = row_bytes_of(in);
  const Device device = in.device();
  MOE_ASSIGN_OR_RETURN(Tensor send1, stage_buffer(device, s.intra.send_total, rb, stream));
  MOE_RETURN_IF_ERROR(copy_rows(s.pack, in, send1, rb, stream));
  MOE_ASSIGN_OR_RETURN(Tensor recv1, stage_buffer(device, s.intra.recv_total, rb, stream));
  MOE_RETURN_IF_ERROR(intra_->all_to_all_v(send1, s.intra, recv1, stream));
  send1 = Tensor();  // freed in stream order
  MOE_ASSIGN_OR_RETURN(Tensor send2, stage_buffer(device, s.inter.send_total, rb, stream));
  MOE_RETURN_IF_ERROR(copy_rows(s.regroup, recv1, send2, rb, stream));
  recv1 = Tensor();
  MOE_ASSIGN_OR_RETURN(Tensor recv2, stage_buffer(device, s.inter.recv_total, rb, stream));
  MOE_RETURN_IF_ERROR(inter_->all_to_all_v(send2, s.inter, recv2, stream));
  return copy_rows(s.unpack, recv2, out, rb, stream);
}

StatusOr<std::vector<std::vector<int64_t>>> HierarchicalCommunicator::host_send_counts(
    const AllToAllPlan& plan, bool valid) {
  const int ranks = world_size(), l_n = grid_.per_host();
  Tensor mine = Tensor::empty({ranks + 1}, DType::kI64);  // my send counts, then the flag
  for (int q = 0; q < ranks; ++q) mine.data<int64_t>()[q] = valid ? plan.send_counts[q] : 0;
  mine.data<int64_t>()[ranks] = valid ? 1 : 0;
  Tensor all = Tensor::empty({l_n * (ranks + 1)}, DType::kI64);
  MOE_RETURN_IF_ERROR(intra_->all_gather(mine, all));
  std::vector<std::vector<int64_t>> counts(l_n);
  std::string invalid;
  for (int l = 0; l < l_n; ++l) {
    const int64_t* row = all.data<int64_t>() + static_cast<int64_t>(l) * (ranks + 1);
    counts[l].assign(row, row + ranks);
    if (row[ranks] != 1) {
      invalid += str_cat(invalid.empty() ? "" : ", ", grid_.rank_at[grid_.host[rank()]][l]);
    }
  }
  if (!invalid.empty()) {
    return invalid_argument_error("all_to_all_v: rank(s) ", invalid,
                                  " of this host passed invalid arguments");
  }
  return counts;
}

Status HierarchicalCommunicator::all_to_all_v(const TensorView& in, const AllToAllPlan& plan,
                                              const TensorView& out, Stream stream) {
  DeviceAccessScope device_side;  // the stages move tensor memory
  const std::string error = check_exchange(in, plan, out, world_size());
  StatusOr<std::vector<std::vector<int64_t>>> counts = host_send_counts(plan, error.empty());
  if (!error.empty()) return invalid_argument_error("all_to_all_v: ", error);
  MOE_RETURN_IF_ERROR(counts.status());
  MOE_ASSIGN_OR_RETURN(StagedAllToAll staged, stage_all_to_all(plan, grid_, rank(), *counts));
  return run_stages(staged, in, out, stream);
}

Status HierarchicalCommunicator::all_to_all(const TensorView& in, const TensorView& out,
                                            Stream stream) {
  DeviceAccessScope device_side;  // the stages move tensor memory
  const int ranks = world_size();
  if (in.ndim() < 1 || out.ndim() < 1 || in.dim(0) % ranks != 0 || in.dim(0) != out.dim(0) ||
      in.dtype() != out.dtype() || in.numel() != out.numel() || !in.defined() || !out.defined()) {
    return invalid_argument_error("all_to_all: in ", in.to_string(), " and out ", out.to_string(),
                                  " must be equal [world_size ", ranks,
                                  " * k, ...] views of one dtype");
  }
  if (overlaps(in.raw(), in.nbytes(), out.raw(), out.nbytes())) {
    return invalid_argument_error("all_to_all: in and out overlap");
  }
  // Equal chunks: every rank's counts are k everywhere, so none need exchanging.
  const int64_t k = in.dim(0) / ranks;
  const std::vector<std::vector<int64_t>> counts(grid_.per_host(), std::vector<int64_t>(ranks, k));
  MOE_ASSIGN_OR_RETURN(StagedAllToAll staged,
                       stage_all_to_all(AllToAllPlan::uniform(ranks, k), grid_, rank(), counts));
  return run_stages(staged, in, out, stream);
}

void HierarchicalCommunicator::set_timeout(double seconds) {
  for (Communicator* c : {flat_.get(), intra_.get(), inter_.get()}) c->set_timeout(seconds);
}

Status HierarchicalCommunicator::poll_async_error() {
  for (Communicator* c : {flat_.get(), intra_.get(), inter_.get()}) {
    MOE_RETURN_IF_ERROR(c->poll_async_error());
  }
  return Status::OK();
}

Status HierarchicalCommunicator::abort(const std::string& reason) {
  Status first = Status::OK();
  for (Communicator* c : {flat_.get(), intra_.get(), inter_.get()}) {
    Status s = c->abort(reason);
    if (first.ok()) first = s;
  }
  return first;
}

Status HierarchicalCommunicator::poll_device_error() {
  for (Communicator* c : {flat_.get(), intra_.get(), inter_.get()}) {
    MOE_RETURN_IF_ERROR(c->poll_device_error());
  }
  return Status::OK();
}

void HierarchicalCommunicator::abort_device(const std::string& reason) {
  for (Communicator* c : {flat_.get(), intra_.get(), inter_.get()}) c->abort_device(reason);
}

}  // namespace moe::comm
