#include "core/layers/moe_dispatcher.h"

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

Status MoeDispatcher::plan(const Tensor& idx, int64_t token_offset, const TensorView& drops,
                           DispatchPlan* p, bool training) {
  const int64_t tokens = idx.dim(0), k = cfg_.top_k, experts = cfg_.num_experts;
  const int ranks = ep_size();
  const int64_t local = local_experts();
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
  const kernels::LayoutArgs layout{experts, p->capacity, token_offset};
  MOE_RETURN_IF_ERROR(kernels::moe_layout(
      ctx_, layout, idx, {p->slot, p->row, p->load, p->kept, p->send_token, p->send_key, drops}));
  p->blocks.ranks = ranks;
  p->blocks.local_experts = local;

  if (!dropless) {
    // Padded blocks of C rows: every rank sends E_l * C rows to every rank.
    p->exchange = comm::AllToAllPlan::uniform(ranks, local * p->capacity);
    p->blocks.capacity = p->capacity;
    MOE_ASSIGN_OR_RETURN(p->recv_key, exchange(p->send_key, p->exchange, p->capacity >= 0));
    MOE_ASSIGN_OR_RETURN(Tensor filled, ctx_.empty({ranks * local}, DType::kI32));
    MOE_RETURN_IF_ERROR(kernels::block_fill_counts(
        ctx_, p->recv_key.view().reshape({ranks * local, p->capacity}), filled));
    p->blocks.filled = filled;
    p->blocks.offsets.clear();
    return Status::OK();
  }

  // Dropless: exchange the per-expert counts, then read [my kept (E) | received counts (R E_l)]
  // back once to size the exchange and the blocks.
  MOE_ASSIGN_OR_RETURN(Tensor counts, ctx_.empty({2 * experts}, DType::kI64));
  MOE_RETURN_IF_ERROR(ctx_.copy(p->kept, counts.rows(0, experts)));
  if (comm_ == nullptr) {
    MOE_RETURN_IF_ERROR(ctx_.copy(p->kept, counts.rows(experts, 2 * experts)));
  } else {
    ScopedPhase phase(ctx_, Phase::kExchange);
    MOE_RETURN_IF_ERROR(comm_->all_to_all(
        p->kept.view().reshape({ranks, local}),
        counts.view().rows(experts, 2 * experts).reshape({ranks, local}), ctx_.stream()));
  }
  // The layer's one synchronisation (dropless only): the exchanged counts size the buffers.
  MOE_ASSIGN_OR_RETURN(Tensor host, ctx_.read_back(counts));  // host-ok: dropless counts read
  const int64_t* kept = host.data<int64_t>();                 // host-ok: the read-back copy
  const int64_t* received = kept + experts;
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
  MOE_ASSIGN_OR_RETURN(p->recv_key, exchange(p->send_key, p->exchange, p->capacity >= 0));
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
