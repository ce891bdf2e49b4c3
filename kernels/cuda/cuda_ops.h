// The CUDA backend's entry points, one per kernel of kernels/*.h that has a GPU implementation.
// The public entry point (kernels/<op>.cc) validates every view (device, dtype, shape) and then
// calls the function here with a CUDA context; these functions only enqueue work on ctx.stream()
// (never wait, never read device memory on the host) and return launch errors. Host-only header:
// no CUDA types, so core code and the CPU build include it freely.
//
// Numerics follow the CPU reference (kernels/reference/): the same dtypes per argument, the same
// accumulation precision (double where the reference sums in double), and fixed reduction orders
// (no atomics deciding a result), so a run is bit-identical run to run on one GPU.
#pragma once

#include <vector>

#include "core/base/context.h"
#include "core/base/rng.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/expert_blocks.h"
#include "kernels/init.h"
#include "kernels/moe_dispatch.h"
#include "kernels/moe_stats.h"
#include "kernels/optimizer.h"
#include "kernels/residual.h"
#include "kernels/router.h"

namespace moe::kernels::cuda {

// elementwise.cu
Status add(Context& ctx, const TensorView& a, const TensorView& b, const TensorView& out);
Status axpy(Context& ctx, double alpha, const TensorView& x, const TensorView& y);
Status scale(Context& ctx, const TensorView& x, double alpha);
Status convert(Context& ctx, const TensorView& src, const TensorView& dst);
Status count_nonfinite(Context& ctx, const TensorView& x, const TensorView& out);
Status add_scalar(Context& ctx, const TensorView& out, double value);

// optimizer.cu
Status adamw_step(Context& ctx, const AdamWArgs& args, const TensorView& param,
                  const TensorView& grad, const TensorView& m, const TensorView& v);
Status sgd_step(Context& ctx, const SgdArgs& args, const TensorView& param, const TensorView& grad,
                const TensorView& buf);
Status sum_of_squares(Context& ctx, const std::vector<TensorView>& views, const TensorView& out);

// gemm.cu (cuBLAS)
Status gemm(Context& ctx, const TensorView& a, bool trans_a, const TensorView& b, bool trans_b,
            const TensorView& c, double alpha, double beta);
Status expert_gemm(Context& ctx, const TensorView& x, const TensorView& w, bool trans_w,
                   const TensorView& y, const ExpertBlocks& blocks);
Status expert_gemm_wgrad(Context& ctx, const TensorView& x, const TensorView& dy,
                         const TensorView& dw, const ExpertBlocks& blocks);

// activation.cu
Status activation_forward(Context& ctx, Activation act, const TensorView& x, const TensorView& y);
Status activation_backward(Context& ctx, Activation act, const TensorView& x, const TensorView& dy,
                           const TensorView& dx);
Status add_bias(Context& ctx, const TensorView& x, const TensorView& bias);
Status bias_grad(Context& ctx, const TensorView& dy, const TensorView& dbias);
Status add_bias_blocks(Context& ctx, const TensorView& x, const TensorView& bias,
                       const ExpertBlocks& blocks);
Status bias_grad_blocks(Context& ctx, const TensorView& dy, const TensorView& dbias,
                        const ExpertBlocks& blocks);
// backward = false: y = mask(x) / (1 - p); backward = true: the same mask applied to dy.
Status dropout(Context& ctx, const TensorView& x, const TensorView& row_keys, int64_t key_base,
               CounterRng rng, float p, const TensorView& y);

// layernorm.cu
Status layernorm_forward(Context& ctx, const TensorView& x, const TensorView& gamma,
                         const TensorView& beta, double eps, const TensorView& y,
                         const TensorView& mean, const TensorView& rstd);
Status layernorm_backward(Context& ctx, const TensorView& dy, const TensorView& x,
                          const TensorView& gamma, const TensorView& mean, const TensorView& rstd,
                          const TensorView& dx, const TensorView& dgamma, const TensorView& dbeta);

// embedding.cu. Ids outside [0, V) cannot be reported without a sync: their output rows are
// zero and they add no gradient (the data loader validates ids when it builds a batch).
Status embedding_forward(Context& ctx, const TensorView& ids, const TensorView& table,
                         const TensorView& positions, int64_t seq_len, const TensorView& out);
Status embedding_backward(Context& ctx, const TensorView& ids, const TensorView& d_out,
                          const TensorView& d_table, const TensorView& d_positions,
                          int64_t seq_len);

// cross_entropy.cu. A target outside [-1, V) is treated as ignored (-1), for the same reason.
Status cross_entropy_forward(Context& ctx, const TensorView& logits, const TensorView& targets,
                             const TensorView& lse, const TensorView& sums,
                             const TensorView& row_loss);
Status cross_entropy_backward(Context& ctx, const TensorView& logits, const TensorView& targets,
                              const TensorView& lse, double scale, const TensorView& d_logits);

// router.cu
Status topk_softmax(Context& ctx, const TensorView& logits, const TensorView& idx,
                    const TensorView& gate, const TensorView& probs, const TensorView& lse);
Status topk_softmax_backward(Context& ctx, const TensorView& d_gate, const TensorView& gate,
                             const TensorView& idx, const TensorView& d_logits);
Status sparsemixer_route(Context& ctx, const SparseMixerRouteArgs& args, const TensorView& logits,
                         const TensorView& idx, const TensorView& gate, const TensorView& probs,
                         const TensorView& lse, const TensorView& mask, const TensorView& scale,
                         const TensorView& is_argmax);
Status sparsemixer_backward(Context& ctx, SparseMixerGateGrad rule, const TensorView& d_gate,
                            const TensorView& idx, const TensorView& probs, const TensorView& mask,
                            const TensorView& scale, const TensorView& d_logits);
Status aux_sums(Context& ctx, const TensorView& probs, const TensorView& lse,
                const TensorView& load, int64_t tokens, const TensorView& packed);
Status aux_losses(Context& ctx, const TensorView& packed, int64_t top_k, double balance_coef,
                  double z_coef, const TensorView& losses);
Status aux_losses_backward(Context& ctx, const TensorView& logits, const TensorView& probs,
                           const TensorView& packed, const TensorView& lse, int64_t top_k,
                           double balance_weight, double z_weight, const TensorView& d_logits);

// moe_dispatch.cu
Status moe_layout(Context& ctx, const LayoutArgs& args, const TensorView& idx,
                  const TensorView& slot, const TensorView& row, const TensorView& load,
                  const TensorView& kept, const TensorView& send_token, const TensorView& send_key,
                  const TensorView& drops);
Status block_fill_counts(Context& ctx, const TensorView& keys, const TensorView& filled);
Status gather_rows(Context& ctx, const TensorView& src, const TensorView& index,
                   const TensorView& dst);
Status gather_sum_rows(Context& ctx, const TensorView& src, const TensorView& rows,
                       const TensorView& dst);
Status combine(Context& ctx, const TensorView& y, const TensorView& row, const TensorView& gate,
               const TensorView& omega, const TensorView& u);
Status combine_backward(Context& ctx, const TensorView& du, const TensorView& y,
                        const TensorView& row, const TensorView& gate, const TensorView& omega,
                        const TensorView& dy, const TensorView& d_gate, const TensorView& d_omega);

// residual.cu
Status residual_forward(Context& ctx, const ResidualArgs& args, const TensorView& x,
                        const TensorView& u, const TensorView& p_in, const TensorView& m_in,
                        const TensorView& v_in, const TensorView& out, const TensorView& p_out,
                        const TensorView& m_out, const TensorView& v_out);
Status residual_backward(Context& ctx, const ResidualArgs& args, const TensorView& d_out,
                         const TensorView& d_p_out, const TensorView& d_m_out,
                         const TensorView& d_v_out, const TensorView& u, const TensorView& m_out,
                         const TensorView& v_out, const TensorView& dx, const TensorView& du,
                         const TensorView& d_p_in, const TensorView& d_m_in,
                         const TensorView& d_v_in);
Status residual_shift_input(Context& ctx, const TensorView& x, const TensorView& p, double a_shift,
                            const TensorView& y);

// moe_stats.cu
Status entropy_sum(Context& ctx, const TensorView& probs, const TensorView& out);
Status row_norm_sum(Context& ctx, const TensorView& x, const TensorView& out);
Status column_sum(Context& ctx, const TensorView& x, int64_t col, const TensorView& out);
Status accumulate_counts(Context& ctx, const TensorView& counts, const TensorView& out);
Status count_mismatches(Context& ctx, const TensorView& a, const TensorView& b,
                        const TensorView& out);
Status sparsemixer_stats(Context& ctx, const TensorView& mask, const TensorView& is_argmax,
                         const TensorView& scale, const TensorView& out);
Status ac_stats(Context& ctx, const TensorView& abs_dev, const TensorView& counts,
                const TensorView& local_counts, const TensorView& summary, const TensorView& out);

// attention.cu
Status attention_forward(Context& ctx, const AttentionArgs& args, const TensorView& qkv,
                         const TensorView& out, const TensorView& lse);
Status attention_backward(Context& ctx, const AttentionArgs& args, const TensorView& d_out,
                          const TensorView& qkv, const TensorView& lse, const TensorView& d_qkv);

// ac_router.cu
Status ac_cluster_sums(Context& ctx, const TensorView& x, const TensorView& labels,
                       const TensorView& sums, const TensorView& counts);
Status ac_cluster_abs_dev(Context& ctx, const TensorView& x, const TensorView& labels,
                          const TensorView& sums, const TensorView& counts,
                          const TensorView& abs_dev);
Status ac_metric(Context& ctx, const AcRouterParams& params, const TensorView& abs_dev,
                 const TensorView& counts, const TensorView& metric, const TensorView& summary);
Status ac_apply_metric(Context& ctx, const TensorView& x, const TensorView& labels,
                       const TensorView& metric, const TensorView& out);
Status ac_apply_metric_backward(Context& ctx, const TensorView& d_out, const TensorView& labels,
                                const TensorView& metric, const TensorView& dx);
Status normalize_columns(Context& ctx, const TensorView& w, const TensorView& out,
                         const TensorView& inv_norm);
Status normalize_columns_backward(Context& ctx, const TensorView& d_out, const TensorView& out,
                                  const TensorView& inv_norm, const TensorView& dw);
Status argmax_rows(Context& ctx, const TensorView& logits, const TensorView& top1);

// init.cu
Status init_normal(Context& ctx, const TensorView& t, double stddev, CounterRng rng,
                   uint64_t first_index);
Status init_constant(Context& ctx, const TensorView& t, double value);

}  // namespace moe::kernels::cuda
