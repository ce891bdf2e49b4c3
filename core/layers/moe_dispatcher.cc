#include "core/layers/moe_dispatcher.h"

#include <algorithm>
#include <cmath>

#include "base/phase_timer.h"
#include "kernels/moe_dispatch.h"

namespace moe {

MoeDispatcher::MoeDispatcher(const MoeLayerConfig& cfg, Context* ctx, comm::Communicator* ep_comm)
    : cfg_(cfg), ctx_(*ctx), comm_(ep_comm) {
  MOE_CHECK(cfg.num_experts % ep_size() == 0, "num_experts ", cfg.num_experts,
            " not divisible by the EP size ", ep_size());
}

int MoeDispatcher::ep_size() const { return comm_ == nullptr ? 1 : comm_->world_size(); }
int MoeDispatcher::ep_rank() const { return comm_ == nullptr ? 0 : comm_->rank(); }
int64_t MoeDispatcher::local_experts() const { return cfg_.num_experts / ep_size(); }
int64_t MoeDispatcher::first_local_expert() const { return ep_rank() * local_experts(); }

int64_t MoeDispatcher::capacity(int64_t tokens, bool training) const {
  if (cfg_.dropless || (!training && cfg_.eval_capacity_factor <= 0)) return -1;
  const double factor = training ? cfg_.capacity_factor : cfg_.eval_capacity_factor;
  return static_cast<int64_t>(
      std::ceil(factor * static_cast<double>(tokens) * static_cast<double>(cfg_.top_k) /
                static_cast<double>(cfg_.num_experts)));
}

Status MoeDispatcher::agree_tokens(int64_t tokens) {
  if (cfg_.dropless || ep_size() == 1 || agreed_tokens_.count(tokens) > 0) return Status::OK();
  // Host values, not device data: [max T, max -T] over the group.
  Tensor range = Tensor::from_vector<int64_t>({2}, {tokens, -tokens});  // host-ok: token counts
  MOE_RETURN_IF_ERROR(comm_->all_reduce(range, range, comm::ReduceOp::kMax));
  const int64_t* extremes = range.data<int64_t>();  // host-ok: token counts
  const int64_t most = extremes[0], least = -extremes[1];
  if (most != least) {
    return invalid_argument_error("moe dispatch: the EP ranks hold between ", least, " and ", most,
                                  " tokens, so their capacities differ (", capacity(least), " to ",
                                  capacity(most),
                                  " rows per expert); every rank of an EP "
                                  "group needs the same token count in capacity mode (or use "
                                  "dropless)");
  }
  agreed_tokens_.insert(tokens);
  return Status::OK();
}

bool MoeDispatcher::deduplicates() const { return cfg_.max_ep_ranks > 0 && ep_size() > 1; }

Status MoeDispatcher::plan(const Tensor& idx, int64_t token_offset,
                           const DispatchCounters& counters, DispatchPlan* p, bool training,
                           DeviceStep device_step, int64_t tokens_per_sequence) {
  const int64_t tokens = idx.dim(0), k = cfg_.top_k, experts = cfg_.num_experts;
  p->tokens = tokens;
  p->capacity = capacity(tokens, training);
  if (p->capacity >= 0) MOE_RETURN_IF_ERROR(agree_tokens(tokens));
  const bool dropless = p->capacity < 0;
  const int64_t send_rows = dropless ? tokens * k : experts * p->capacity;
  MOE_ASSIGN_OR_RETURN(p->slot, ctx_.empty({tokens, k}, DType::kI32));
  MOE_ASSIGN_OR_RETURN(p->row, ctx_.empty({tokens, k}, DType::kI32));
  MOE_ASSIGN_OR_RETURN(p->load, ctx_.empty({experts}, DType::kI64));
  MOE_ASSIGN_OR_RETURN(p->kept, ctx_.empty({experts}, DType::kI64));
  MOE_ASSIGN_OR_RETURN(p->send_token, ctx_.empty({send_rows}, DType::kI32));
  MOE_ASSIGN_OR_RETURN(p->send_key, ctx_.empty({send_rows}, DType::kI64));
  if (device_step.keys != nullptr && tokens_per_sequence <= 0) {
    return internal_error("moe dispatch: a device step needs the tokens per sequence");
  }
  kernels::LayoutArgs layout(experts, p->capacity, token_offset);
  layout.device_step = device_step;
  layout.tokens_per_sequence = tokens_per_sequence;
  MOE_RETURN_IF_ERROR(kernels::moe_layout(
      ctx_, layout, idx,
      {p->slot, p->row, p->load, p->kept, p->send_token, p->send_key, counters.drops}));
  p->blocks.ranks = ep_size();
  p->blocks.local_experts = local_experts();
  p->unique = UniqueRows();
  if (deduplicates()) MOE_RETURN_IF_ERROR(plan_unique(idx, counters.exchange, p));
  MOE_ASSIGN_OR_RETURN(const std::vector<int64_t> counts, read_counts(*p));
  MOE_RETURN_IF_ERROR(dropless ? plan_dropless(counts.data(), p) : plan_capacity(p));
  if (!deduplicates()) return Status::OK();
  return plan_unique_exchange(counts.data() + (dropless ? 2 * experts : 0), p);
}

Status MoeDispatcher::exchange_counts(const Tensor& mine, const TensorView& out) const {
  const int64_t n = mine.numel();
  MOE_RETURN_IF_ERROR(ctx_.copy(mine, out.rows(0, n)));
  if (comm_ == nullptr) return ctx_.copy(mine, out.rows(n, 2 * n));
  ScopedPhase phase(ctx_, Phase::kExchange);
  const int ranks = ep_size();
  return comm_->all_to_all(mine.view().reshape({ranks, n / ranks}),
                           out.rows(n, 2 * n).reshape({ranks, n / ranks}), ctx_.stream());
}

StatusOr<std::vector<int64_t>> MoeDispatcher::read_counts(const DispatchPlan& p) {
  const int64_t kept = p.capacity < 0 ? cfg_.num_experts : 0;
  const int64_t unique = p.unique.uniq_counts.numel();
  if (kept + unique == 0) return std::vector<int64_t>();
  MOE_ASSIGN_OR_RETURN(Tensor counts, ctx_.empty({2 * (kept + unique)}, DType::kI64));
  if (kept > 0) MOE_RETURN_IF_ERROR(exchange_counts(p.kept, counts.view().rows(0, 2 * kept)));
  if (unique > 0) {
    MOE_RETURN_IF_ERROR(
        exchange_counts(p.unique.uniq_counts, counts.view().rows(2 * kept, 2 * (kept + unique))));
  }
  // The layer's one synchronisation (dropless, or deduplicating): the exchanged counts size the
  // buffers and the exchanges.
  MOE_ASSIGN_OR_RETURN(Tensor host, ctx_.read_back(counts));  // host-ok: the counts read
  const int64_t* values = host.data<int64_t>();               // host-ok: the read-back copy
  return std::vector<int64_t>(values, values + host.numel());
}

Status MoeDispatcher::plan_capacity(DispatchPlan* p) {
  // Padded blocks of C rows: every rank sends E_l * C rows to every rank.
  const int ranks = ep_size();
  const int64_t local = local_experts();
  p->exchange = comm::AllToAllPlan::uniform(ranks, local * p->capacity);
  p->blocks.capacity = p->capacity;
  MOE_ASSIGN_OR_RETURN(p->recv_key, exchange(p->send_key, p->exchange, true));
  MOE_ASSIGN_OR_RETURN(Tensor filled, ctx_.empty({ranks * local}, DType::kI32));
  MOE_RETURN_IF_ERROR(kernels::block_fill_counts(
      ctx_, p->recv_key.view().reshape({ranks * local, p->capacity}), filled));
  p->blocks.filled = filled;
  p->blocks.offsets.clear();
  return Status::OK();
}

Status MoeDispatcher::plan_dropless(const int64_t* counts, DispatchPlan* p) {
  // counts: [my kept (E) | received counts (R E_l)] size the exchange and the blocks.
  const int ranks = ep_size();
  const int64_t local = local_experts();
  const int64_t* kept = counts;
  const int64_t* received = kept + cfg_.num_experts;
  std::vector<int64_t> send_counts(ranks, 0), recv_counts(ranks, 0);
  p->blocks.capacity = -1;
  p->blocks.filled = Tensor();
  p->blocks.offsets.assign(ranks * local + 1, 0);
  for (int r = 0; r < ranks; ++r) {
    for (int64_t l = 0; l < local; ++l) {
      send_counts[r] += kept[r * local + l];
      recv_counts[r] += received[r * local + l];
      p->blocks.offsets[r * local + l + 1] =
          p->blocks.offsets[r * local + l] + received[r * local + l];
    }
  }
  MOE_ASSIGN_OR_RETURN(p->exchange, comm::AllToAllPlan::from_counts(send_counts, recv_counts));
  MOE_ASSIGN_OR_RETURN(p->recv_key, exchange(p->send_key, p->exchange, false));
  return Status::OK();
}

Status MoeDispatcher::plan_unique(const Tensor& idx, const TensorView& counter, DispatchPlan* p) {
  const int ranks = ep_size();
  const int64_t tokens = idx.dim(0), k = cfg_.top_k;
  UniqueRows& u = p->unique;
  MOE_ASSIGN_OR_RETURN(u.uniq_token,
                       ctx_.empty({tokens * std::min<int64_t>(k, ranks - 1)}, DType::kI32));
  MOE_ASSIGN_OR_RETURN(u.uniq_counts, ctx_.empty({ranks}, DType::kI64));
  MOE_ASSIGN_OR_RETURN(u.send_uniq, ctx_.empty({p->send_token.numel()}, DType::kI32));
  const kernels::DedupArgs args{cfg_.num_experts, p->capacity, ranks, ep_rank()};
  return kernels::moe_dedup_layout(ctx_, args, idx, p->row,
                                   {u.uniq_token, u.uniq_counts, u.send_uniq, counter});
}

Status MoeDispatcher::plan_unique_exchange(const int64_t* counts, DispatchPlan* p) {
  // counts: [unique rows I send to each rank (R) | unique rows each rank sends me (R)].
  const int ranks = ep_size();
  UniqueRows& u = p->unique;
  MOE_ASSIGN_OR_RETURN(u.exchange, comm::AllToAllPlan::from_counts(
                                       std::vector<int64_t>(counts, counts + ranks),
                                       std::vector<int64_t>(counts + ranks, counts + 2 * ranks)));
  // Each received row's unique row, under the plan the keys took.
  MOE_ASSIGN_OR_RETURN(u.recv_uniq, exchange(u.send_uniq, p->exchange, p->capacity >= 0));
  return Status::OK();
}

StatusOr<Tensor> MoeDispatcher::exchange(const Tensor& in, const comm::AllToAllPlan& plan,
                                         bool capacity_mode) const {
  if (comm_ == nullptr) return in;  // one rank: the receive buffer is the send buffer
  ScopedPhase phase(ctx_, Phase::kExchange);
  std::vector<int64_t> dims = in.shape().to_vector();
  dims[0] = plan.recv_total;
  MOE_ASSIGN_OR_RETURN(Tensor out, ctx_.empty(Shape(dims), in.dtype()));
  // Every rank must call the same collective, so the choice may not depend on local counts: in
  // capacity mode every rank has agreed on one C (agree_tokens), so every plan is uniform; a
  // dropless plan (dropless training, or evaluation without an eval capacity) can be uniform on
  // one rank and not on its peers, so it always takes all_to_all_v. Every rank of a forward pass
  // is in the same mode (the config and the training flag are the same everywhere).
  if (capacity_mode) {
    const int ranks = plan.world_size();
    std::vector<int64_t> chunked = in.shape().to_vector();
    chunked[0] = plan.send_counts[0];
    chunked.insert(chunked.begin(), ranks);
    MOE_RETURN_IF_ERROR(comm_->all_to_all(in.view().reshape(Shape(chunked)),
                                          out.view().reshape(Shape(chunked)), ctx_.stream()));
    return out;
  }
  MOE_RETURN_IF_ERROR(comm_->all_to_all_v(in, plan, out, ctx_.stream()));
  return out;
}

StatusOr<Tensor> MoeDispatcher::dispatch(const Tensor& x, const DispatchPlan& plan) const {
  if (plan.unique.active()) return dispatch_unique(x, plan);
  const comm::AllToAllPlan& ex = plan.exchange;
  MOE_ASSIGN_OR_RETURN(Tensor send, ctx_.empty({ex.send_total, x.dim(1)}, x.dtype()));
  if (comm_ == nullptr) {
    MOE_RETURN_IF_ERROR(kernels::gather_rows(ctx_, x, plan.send_token, send));
    return send;  // one rank: the receive buffer is the send buffer
  }
  // The rows bound for my own experts are gathered straight into their place in the receive
  // buffer; only the peers' rows go through the send buffer and the exchange (whose plan leaves
  // my rows out). This saves copying 1/R of the bytes once more, on every backend.
  MOE_ASSIGN_OR_RETURN(Tensor recv, ctx_.empty({ex.recv_total, x.dim(1)}, x.dtype()));
  const int me = ep_rank();
  const int64_t own_begin = ex.send_offsets[me], own_end = own_begin + ex.send_counts[me];
  const auto gather = [&](int64_t begin, int64_t end, const Tensor& dst, int64_t at) -> Status {
    if (begin == end) return Status::OK();
    return kernels::gather_rows(ctx_, x, plan.send_token.rows(begin, end),
                                dst.rows(at, at + end - begin));
  };
  MOE_RETURN_IF_ERROR(gather(0, own_begin, send, 0));
  MOE_RETURN_IF_ERROR(gather(own_end, ex.send_total, send, own_end));
  MOE_RETURN_IF_ERROR(gather(own_begin, own_end, recv, ex.recv_offsets[me]));
  ScopedPhase phase(ctx_, Phase::kExchange);
  MOE_RETURN_IF_ERROR(comm_->all_to_all_v(send, ex.without(me), recv, ctx_.stream()));
  return recv;
}

StatusOr<Tensor> MoeDispatcher::dispatch_unique(const Tensor& x, const DispatchPlan& plan) const {
  const comm::AllToAllPlan &ex = plan.exchange, &ux = plan.unique.exchange;
  const int ranks = ep_size(), me = ep_rank();
  const int64_t d = x.dim(1);
  // My own rows: straight into the receive buffer, as without deduplication.
  MOE_ASSIGN_OR_RETURN(Tensor recv, ctx_.empty({ex.recv_total, d}, x.dtype()));
  const int64_t own_begin = ex.send_offsets[me], own_rows = ex.send_counts[me];
  if (own_rows > 0) {
    MOE_RETURN_IF_ERROR(
        kernels::gather_rows(ctx_, x, plan.send_token.rows(own_begin, own_begin + own_rows),
                             recv.rows(ex.recv_offsets[me], ex.recv_offsets[me] + own_rows)));
  }
  // The peers' unique rows: gathered, exchanged (my own chunk is empty both ways).
  MOE_ASSIGN_OR_RETURN(Tensor send, ctx_.empty({ux.send_total, d}, x.dtype()));
  if (ux.send_total > 0) {
    MOE_RETURN_IF_ERROR(
        kernels::gather_rows(ctx_, x, plan.unique.uniq_token.rows(0, ux.send_total), send));
  }
  MOE_ASSIGN_OR_RETURN(Tensor unique, ctx_.empty({ux.recv_total, d}, x.dtype()));
  {
    ScopedPhase phase(ctx_, Phase::kExchange);
    MOE_RETURN_IF_ERROR(comm_->all_to_all_v(send, ux, unique, ctx_.stream()));
  }
  // Expanded into each peer's blocks: its receive rows index its chunk of the unique rows (a row
  // gather from that chunk; -1, the capacity padding, gives a zero row).
  for (int r = 0; r < ranks; ++r) {
    const int64_t at = ex.recv_offsets[r], rows = ex.recv_counts[r];
    if (r == me || rows == 0) continue;
    const int64_t chunk = ux.recv_offsets[r];
    MOE_RETURN_IF_ERROR(kernels::gather_rows(ctx_, unique.rows(chunk, chunk + ux.recv_counts[r]),
                                             plan.unique.recv_uniq.rows(at, at + rows),
                                             recv.rows(at, at + rows)));
  }
  return recv;
}

StatusOr<Tensor> MoeDispatcher::gather_back(const Tensor& y, const DispatchPlan& plan) const {
  return exchange(y, plan.exchange.transposed(), plan.capacity >= 0);
}

StatusOr<Tensor> MoeDispatcher::gather_back_backward(const Tensor& d_send,
                                                     const DispatchPlan& plan) const {
  return exchange(d_send, plan.exchange, plan.capacity >= 0);
}

StatusOr<Tensor> MoeDispatcher::dispatch_backward(const Tensor& d_rows,
                                                  const DispatchPlan& plan) const {
  MOE_ASSIGN_OR_RETURN(Tensor d_send,
                       exchange(d_rows, plan.exchange.transposed(), plan.capacity >= 0));
  MOE_ASSIGN_OR_RETURN(Tensor dx, ctx_.empty({plan.tokens, d_rows.dim(1)}, d_rows.dtype()));
  MOE_RETURN_IF_ERROR(kernels::gather_sum_rows(ctx_, d_send, plan.row, dx));
  return dx;
}

}  // namespace moe
