#include "core/layers/moe_dispatcher.h"

#include <cmath>

#include "kernels/moe_dispatch.h"
#include "kernels/router.h"

namespace moe {

MoeDispatcher::MoeDispatcher(const MoeLayerConfig& cfg, comm::Communicator* ep_comm)
    : cfg_(cfg), comm_(ep_comm) {
  MOE_CHECK(cfg.num_experts % ep_size() == 0, "num_experts ", cfg.num_experts,
            " not divisible by the EP size ", ep_size());
}

int MoeDispatcher::ep_size() const { return comm_ == nullptr ? 1 : comm_->world_size(); }
int MoeDispatcher::ep_rank() const { return comm_ == nullptr ? 0 : comm_->rank(); }
int64_t MoeDispatcher::local_experts() const { return cfg_.num_experts / ep_size(); }
int64_t MoeDispatcher::first_local_expert() const { return ep_rank() * local_experts(); }

Status MoeDispatcher::plan(const TensorView& idx, int64_t token_offset, DispatchPlan* p) const {
  const int64_t tokens = idx.dim(0), k = cfg_.top_k, experts = cfg_.num_experts;
  const int ranks = ep_size();
  const int64_t local = local_experts();
  p->tokens = tokens;
  p->capacity = cfg_.dropless
                    ? -1
                    : static_cast<int64_t>(std::ceil(cfg_.capacity_factor *
                                                     static_cast<double>(tokens * k) /
                                                     static_cast<double>(experts)));
  p->slot = Tensor::empty({tokens, k}, DType::kI32);
  p->load = Tensor::empty({experts}, DType::kI64);
  p->kept = Tensor::empty({experts}, DType::kI64);
  MOE_RETURN_IF_ERROR(kernels::assign_capacity(idx, experts, p->capacity, p->slot, p->load, p->kept));
  const int64_t* kept = p->kept.data<int64_t>();

  // Send layout: one block per global expert.
  std::vector<int64_t> block_size(experts), block_offset(experts + 1, 0);
  for (int64_t e = 0; e < experts; ++e) {
    block_size[e] = p->capacity < 0 ? kept[e] : p->capacity;
    block_offset[e + 1] = block_offset[e] + block_size[e];
  }
  const int64_t send_rows = block_offset[experts];
  p->row = Tensor::empty({tokens, k}, DType::kI32);
  p->send_token = Tensor::empty({send_rows}, DType::kI32);
  p->send_key = Tensor::empty({send_rows}, DType::kI64);
  std::fill_n(p->send_token.data<int32_t>(), send_rows, -1);
  std::fill_n(p->send_key.data<int64_t>(), send_rows, -1);
  const int32_t* pidx = idx.data<int32_t>();
  const int32_t* slot = p->slot.data<int32_t>();
  int32_t* row = p->row.data<int32_t>();
  p->dropped_slots = 0;
  p->fully_dropped_tokens = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t dropped = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t s = slot[t * k + j];
      if (s < 0) {
        row[t * k + j] = -1;
        ++dropped;
        continue;
      }
      const int64_t r = block_offset[pidx[t * k + j]] + s;
      row[t * k + j] = static_cast<int32_t>(r);
      p->send_token.data<int32_t>()[r] = static_cast<int32_t>(t);
      p->send_key.data<int64_t>()[r] = (token_offset + t) * k + j;
    }
    p->dropped_slots += dropped;
    p->fully_dropped_tokens += dropped == k;
  }

  // Exchange the filled-row counts of each destination's experts, with the capacity appended
  // so that every rank checks it agrees (the uniform exchange needs one C everywhere).
  Tensor counts_out = Tensor::empty({ranks, local + 1}, DType::kI64);
  Tensor counts_in = Tensor::empty({ranks, local + 1}, DType::kI64);
  for (int r = 0; r < ranks; ++r) {
    for (int64_t l = 0; l < local; ++l) counts_out.data<int64_t>()[r * (local + 1) + l] = kept[r * local + l];
    counts_out.data<int64_t>()[r * (local + 1) + local] = p->capacity;
  }
  if (comm_ == nullptr) {
    MOE_RETURN_IF_ERROR(counts_in.copy_from(counts_out));
  } else {
    MOE_RETURN_IF_ERROR(comm_->all_to_all(counts_out, counts_in));
  }
  const int64_t* fill = counts_in.data<int64_t>();
  for (int r = 0; r < ranks; ++r) {
    if (fill[r * (local + 1) + local] != p->capacity) {
      return invalid_argument_error("moe dispatch: EP rank ", r, " uses capacity ",
                                    fill[r * (local + 1) + local], " but rank ", ep_rank(),
                                    " uses ", p->capacity,
                                    " (every rank of an EP group needs the same token count)");
    }
  }

  // Row counts per rank, and the receive/compact maps.
  std::vector<int64_t> send_counts(ranks, 0), recv_counts(ranks, 0);
  for (int r = 0; r < ranks; ++r) {
    send_counts[r] = block_offset[(r + 1) * local] - block_offset[r * local];
    for (int64_t l = 0; l < local; ++l) {
      recv_counts[r] += p->capacity < 0 ? fill[r * (local + 1) + l] : p->capacity;
    }
  }
  MOE_ASSIGN_OR_RETURN(p->exchange, comm::AllToAllPlan::from_counts(send_counts, recv_counts));
  const int64_t recv_rows = p->exchange.recv_total;
  std::vector<int64_t> recv_block(ranks * local);  // first recv row of block (source r, expert l)
  {
    int64_t off = 0;
    for (int r = 0; r < ranks; ++r) {
      for (int64_t l = 0; l < local; ++l) {
        recv_block[r * local + l] = off;
        off += p->capacity < 0 ? fill[r * (local + 1) + l] : p->capacity;
      }
    }
  }
  p->expert_offsets.assign(local + 1, 0);
  for (int64_t l = 0; l < local; ++l) {
    int64_t n = 0;
    for (int r = 0; r < ranks; ++r) n += fill[r * (local + 1) + l];
    p->expert_offsets[l + 1] = p->expert_offsets[l] + n;
  }
  const int64_t compact_rows = p->expert_offsets[local];
  p->compact_rows = Tensor::empty({compact_rows}, DType::kI32);
  p->recv_to_compact = Tensor::empty({recv_rows}, DType::kI32);
  std::fill_n(p->recv_to_compact.data<int32_t>(), recv_rows, -1);
  int64_t c = 0;
  for (int64_t l = 0; l < local; ++l) {
    for (int r = 0; r < ranks; ++r) {
      for (int64_t i = 0; i < fill[r * (local + 1) + l]; ++i, ++c) {
        const int64_t recv_row = recv_block[r * local + l] + i;
        p->compact_rows.data<int32_t>()[c] = static_cast<int32_t>(recv_row);
        p->recv_to_compact.data<int32_t>()[recv_row] = static_cast<int32_t>(c);
      }
    }
  }
  p->recv_key = Tensor::empty({recv_rows}, DType::kI64);
  return exchange(p->send_key, p->exchange, p->recv_key);
}

Status MoeDispatcher::exchange(const TensorView& in, const comm::AllToAllPlan& plan,
                               const TensorView& out) const {
  if (comm_ == nullptr) return device_memcpy(out.raw(), out.device(), in.raw(), in.device(), in.nbytes());
  // Every rank must call the same collective, so the choice may not depend on local counts: in
  // capacity mode every rank has checked that all use one C (plan() fails otherwise), so every
  // rank's plan is uniform with E_l * C rows per peer; a dropless plan can be uniform on one
  // rank and not on its peers, so dropless always takes all_to_all_v.
  if (!cfg_.dropless && plan.send_counts[0] > 0) {
    MOE_CHECK(plan.is_uniform(), "capacity plan is not uniform: ", plan.to_string());
    const int ranks = plan.world_size();
    std::vector<int64_t> dims = in.shape().to_vector();
    dims[0] = plan.send_counts[0];
    dims.insert(dims.begin(), ranks);
    return comm_->all_to_all(in.reshape(Shape(dims)), out.reshape(Shape(dims)));
  }
  return comm_->all_to_all_v(in, plan, out);
}

Status MoeDispatcher::dispatch(const TensorView& x, const DispatchPlan& plan,
                               Tensor* compact) const {
  const int64_t d = x.dim(1);
  Tensor send = Tensor::empty({plan.exchange.send_total, d}, x.dtype());
  MOE_RETURN_IF_ERROR(kernels::gather_rows(x, plan.send_token, send));
  Tensor recv = Tensor::empty({plan.exchange.recv_total, d}, x.dtype());
  MOE_RETURN_IF_ERROR(exchange(send, plan.exchange, recv));
  *compact = Tensor::empty({plan.compact_rows.numel(), d}, x.dtype());
  return kernels::gather_rows(recv, plan.compact_rows, *compact);
}

Status MoeDispatcher::gather_back(const TensorView& compact, const DispatchPlan& plan,
                                  Tensor* send) const {
  const int64_t d = compact.dim(1);
  Tensor recv = Tensor::empty({plan.exchange.recv_total, d}, compact.dtype());
  MOE_RETURN_IF_ERROR(kernels::gather_rows(compact, plan.recv_to_compact, recv));
  *send = Tensor::empty({plan.exchange.send_total, d}, compact.dtype());
  return exchange(recv, plan.exchange.transposed(), *send);
}

Status MoeDispatcher::gather_back_backward(const TensorView& d_send, const DispatchPlan& plan,
                                           Tensor* d_compact) const {
  const int64_t d = d_send.dim(1);
  Tensor d_recv = Tensor::empty({plan.exchange.recv_total, d}, d_send.dtype());
  MOE_RETURN_IF_ERROR(exchange(d_send, plan.exchange, d_recv));
  *d_compact = Tensor::empty({plan.compact_rows.numel(), d}, d_send.dtype());
  return kernels::gather_rows(d_recv, plan.compact_rows, *d_compact);
}

Status MoeDispatcher::dispatch_backward(const TensorView& d_compact, const DispatchPlan& plan,
                                        const TensorView& dx) const {
  const int64_t d = d_compact.dim(1);
  Tensor d_recv = Tensor::empty({plan.exchange.recv_total, d}, d_compact.dtype());
  MOE_RETURN_IF_ERROR(kernels::gather_rows(d_compact, plan.recv_to_compact, d_recv));
  Tensor d_send = Tensor::empty({plan.exchange.send_total, d}, d_compact.dtype());
  MOE_RETURN_IF_ERROR(exchange(d_recv, plan.exchange.transposed(), d_send));
  return kernels::scatter_add_rows(d_send, plan.send_token, dx);
}

}  // namespace moe
