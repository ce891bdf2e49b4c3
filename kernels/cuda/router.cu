// Routing on the GPU: top-k with softmax or sigmoid scores (the shared per-token
// ref::topk_route_token: the CPU's tie rule, larger key first, then lower index), SparseMixer
// top-1 (the masked softmax, Gumbel-max sampling from the same Philox counters as the CPU, the
// midpoint policies) and their backwards, the per-sequence routing counts, and the auxiliary
// losses. One thread per token runs the reference's per-token loop in double, so indices match the
// CPU exactly and values to rounding; column sums are deterministic block reductions.
#include <cmath>

#include "kernels/common.h"
#include "kernels/cpu/router_math.h"
#include "kernels/cpu/router_ref.h"  // SparseMixerOutputs, SparseMixerSaved
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/router.h"

namespace moe::kernels::cuda {
namespace {

template <typename T>
__device__ __forceinline__ bool ranks_before(T a, int64_t ia, T b, int64_t ib) {
  return a > b || (a == b && ia < ib);
}

// log(sum over kept i of exp(row[i])) in double; mask may be null (all kept).
template <typename T>
__device__ double log_sum_exp(const T* row, int64_t n, const uint8_t* mask) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (mask == nullptr || mask[i]) mx = fmax(mx, static_cast<double>(row[i]));
  }
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (mask == nullptr || mask[i]) s += exp(static_cast<double>(row[i]) - mx);
  }
  return mx + log(s);
}

template <typename T>
__global__ void topk_route_kernel(ref::RouteParams p, const T* logits, const T* bias,
                                  int64_t tokens, int32_t* idx, T* gate, T* probs, T* lse) {
  const int64_t experts = p.experts, k = p.k;
  MOE_GRID_LOOP(t, tokens) {
    ref::topk_route_token<T>(p, logits + t * experts, bias, idx + t * k, gate + t * k,
                             probs + t * experts, lse + t);
  }
}

template <typename T>
__global__ void topk_route_backward_kernel(ref::RouteParams p, const T* logits, const T* d_gate,
                                           const T* gate, const int32_t* idx, int64_t tokens,
                                           T* d_logits) {
  const int64_t experts = p.experts, k = p.k;
  MOE_GRID_LOOP(t, tokens) {
    const T* row = logits == nullptr ? nullptr : logits + t * experts;
    ref::topk_route_backward_token<T>(p, row, d_gate + t * k, gate + t * k, idx + t * k,
                                      d_logits + t * experts);
  }
}

// One thread per (sequence b, expert e): counts[b, e] over the sequence's S K indices, read in
// order (the threads of a warp read the same index: one broadcast load). No atomics.
__global__ void sequence_counts_kernel(const int32_t* idx, int64_t per_sequence, int64_t k,
                                       int64_t sequences, int64_t experts, int64_t* counts) {
  MOE_GRID_LOOP(i, sequences * experts) {
    const int64_t b = i / experts, e = i % experts;
    const int32_t* first = idx + b * per_sequence * k;
    int64_t n = 0;
    for (int64_t q = 0; q < per_sequence * k; ++q) n += first[q] == e ? 1 : 0;
    counts[i] = n;
  }
}

template <typename T>
__global__ void sparsemixer_route_kernel(SparseMixerRouteArgs args, const T* logits, int64_t tokens,
                                         int64_t experts, ref::SparseMixerOutputs<T> out) {
  const double r = args.params.jitter;
  MOE_GRID_LOOP(t, tokens) {
    const T* row = logits + t * experts;
    uint8_t* mrow = out.mask + t * experts;
    int64_t imax = 0;
    for (int64_t e = 1; e < experts; ++e) {
      if (ranks_before(row[e], e, row[imax], imax)) imax = e;
    }
    const double top = row[imax];
    for (int64_t e = 0; e < experts; ++e) {
      const double th = row[e];
      const double diff = top - th;
      const bool keep = args.params.mask == SparseMixerMask::kPaper
                            ? diff <= r * (fabs(top) + fabs(th))
                            : diff <= 2.0 * r * fmax(fabs(th), top);
      mrow[e] = (e == imax || keep) ? 1 : 0;
    }
    const double masked_lse = log_sum_exp(row, experts, mrow);
    for (int64_t e = 0; e < experts; ++e) {
      out.probs[t * experts + e] =
          mrow[e] ? static_cast<T>(exp(static_cast<double>(row[e]) - masked_lse)) : T(0);
    }
    out.lse[t] = static_cast<T>(log_sum_exp(row, experts, static_cast<const uint8_t*>(nullptr)));
    int64_t chosen = imax;
    double c = 1.0;
    // A step in device memory (args.rng.device_step, a recorded launch) is read here.
    const uint64_t token = static_cast<uint64_t>(args.token_offset + args.rng.key_shift() + t);
    const CounterRng rng = args.rng.at_step();
    if (args.training) {
      double best = -INFINITY;
      for (int64_t e = 0; e < experts; ++e) {
        if (!mrow[e]) continue;
        const double v =
            static_cast<double>(row[e]) + rng.gumbel(token * static_cast<uint64_t>(experts) + e, 0);
        if (v > best) {
          best = v;
          chosen = e;
        }
      }
      if (chosen != imax) {
        switch (args.params.midpoint) {
          case SparseMixerMidpoint::kPaper:
            c = 0.5;
            break;
          case SparseMixerMidpoint::kReferenceCode:
            c = rng.uniform(token * static_cast<uint64_t>(experts), 1) <= 0.5f ? 0.5 : 1.0;
            break;
          case SparseMixerMidpoint::kEulerOnly:
            c = 1.0;
            break;
        }
      }
    }
    out.idx[t] = static_cast<int32_t>(chosen);
    out.scale[t] = static_cast<T>(c);
    out.is_argmax[t] = chosen == imax ? 1 : 0;
    out.gate[t] = static_cast<T>(c * static_cast<double>(out.probs[t * experts + chosen]));
  }
}

template <typename T>
__global__ void sparsemixer_backward_kernel(SparseMixerGateGrad rule, const T* d_gate,
                                            ref::SparseMixerSaved<T> saved, int64_t tokens,
                                            int64_t experts, T* d_logits) {
  MOE_GRID_LOOP(t, tokens) {
    ref::sparsemixer_backward_token<T>(rule, d_gate[t], saved.scale[t], saved.idx[t],
                                       saved.probs + t * experts, saved.mask + t * experts, experts,
                                       d_logits + t * experts);
  }
}

// The sequence slots' inputs of aux_sums_kernel: counts [sequences, E] (null: zero slots).
struct SequenceSums {
  const int64_t* counts;
  int64_t per_sequence;
  int64_t sequences;
};

// Block e < E: sum_t probs[t, e] and q_e; block E: sum_t lse[t]^2; block E + 1: the loads, the
// tokens and the sequences.
template <typename T>
__global__ void aux_sums_kernel(const T* probs, const T* lse, const int64_t* load, int64_t rows,
                                int64_t experts, double tokens, SequenceSums seq, double* packed) {
  __shared__ double scratch[32];
  const int64_t b = blockIdx.x;
  if (b == experts + 1) {
    for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
      packed[e] = static_cast<double>(load[e]);
    }
    if (threadIdx.x == 0) {
      packed[2 * experts] = tokens;
      packed[3 * experts + 2] = seq.counts != nullptr ? static_cast<double>(seq.sequences) : 0.0;
    }
    return;
  }
  double s = 0, q = 0;
  for (int64_t t = threadIdx.x; t < rows; t += blockDim.x) {
    if (b < experts) {
      const double p = static_cast<double>(probs[t * experts + b]);
      s += p;
      if (seq.counts != nullptr) {
        q += static_cast<double>(seq.counts[(t / seq.per_sequence) * experts + b]) * p;
      }
    } else {
      const double z = lse[t];
      s += z * z;
    }
  }
  s = block_sum(s, scratch);
  if (b == experts) {
    if (threadIdx.x == 0) packed[2 * experts + 1] = s;
    return;
  }
  q = block_sum(q, scratch);
  if (threadIdx.x == 0) {
    packed[experts + b] = s;
    const double n = static_cast<double>(seq.per_sequence);
    packed[2 * experts + 2 + b] = seq.counts != nullptr ? q / (n * n) : 0.0;
  }
}

__global__ void aux_losses_kernel(const double* v, int64_t experts, AuxLossWeights w, double* out) {
  ref::aux_losses_from_packed(v, experts, w.top_k, w.balance, w.z, w.seq, out);
}

// What aux_losses_backward_kernel reads.
template <typename T>
struct AuxBackwardIn {
  const T* logits;            // [local, E]
  const T* probs;             // [local, E]
  const double* packed;       // [3E + 3]: aux_sums (T, B and the loads)
  const T* lse;               // [local]
  const int64_t* seq_counts;  // [local / seq_len, E], or null (no sequence loss)
};

template <typename T>
__global__ void aux_losses_backward_kernel(AuxBackwardIn<T> in, int64_t local, int64_t experts,
                                           ref::AuxWeights w, int64_t seq_len, T* d_logits) {
  // T, B and the loads are read on the device: no host value.
  const ref::AuxGradArgs a = ref::aux_grad_args(in.packed, experts, w, seq_len);
  if (!(a.tokens > 0)) return;
  MOE_GRID_LOOP(t, local) {
    const int64_t* n = a.seq_len > 0 ? in.seq_counts + (t / a.seq_len) * experts : nullptr;
    ref::aux_losses_backward_token<T>(in.logits + t * experts, in.probs + t * experts, in.packed,
                                      static_cast<double>(in.lse[t]), n, a, d_logits + t * experts);
  }
}

}  // namespace

Status topk_route(Context& ctx, const RouteOptions& opt, const TensorView& logits,
                  const TensorView& idx, const TensorView& gate, const TensorView& probs,
                  const TensorView& lse) {
  const int64_t tokens = logits.dim(0), experts = logits.dim(1), k = idx.dim(1);
  if (tokens == 0) return Status::OK();
  const ref::RouteParams p{opt.score, opt.renormalize, opt.scaling,     experts,
                           k,         opt.groups,      opt.topk_groups, opt.group_top};
  MOE_RETURN_IF_ERROR(dispatch_full("topk_route", logits, [&](auto tag) {
    using T = decltype(tag);
    const T* bias = opt.selection_bias.numel() > 0 ? opt.selection_bias.data<T>() : nullptr;
    topk_route_kernel<T><<<grid_for(tokens), kThreads, 0, stream_of(ctx)>>>(
        p, logits.data<T>(), bias, tokens, idx.data<int32_t>(), gate.data<T>(), probs.data<T>(),
        lse.data<T>());
  }));
  return launch_status("topk_route");
}

Status topk_route_backward(Context& ctx, const RouteOptions& opt, const TensorView& logits,
                           const TensorView& d_gate, const TensorView& gate, const TensorView& idx,
                           const TensorView& d_logits) {
  const int64_t tokens = d_logits.dim(0);
  if (tokens == 0) return Status::OK();
  const ref::RouteParams p{opt.score, opt.renormalize, opt.scaling, d_logits.dim(1), gate.dim(1)};
  MOE_RETURN_IF_ERROR(dispatch_full("topk_route_backward", d_gate, [&](auto tag) {
    using T = decltype(tag);
    topk_route_backward_kernel<T><<<grid_for(tokens), kThreads, 0, stream_of(ctx)>>>(
        p, logits.numel() > 0 ? logits.data<T>() : nullptr, d_gate.data<T>(), gate.data<T>(),
        idx.data<int32_t>(), tokens, d_logits.data<T>());
  }));
  return launch_status("topk_route_backward");
}

Status sequence_counts(Context& ctx, const TensorView& idx, const TensorView& counts) {
  const int64_t sequences = counts.dim(0), experts = counts.dim(1);
  if (counts.numel() == 0) return Status::OK();
  sequence_counts_kernel<<<grid_for(sequences * experts), kThreads, 0, stream_of(ctx)>>>(
      idx.data<int32_t>(), idx.dim(0) / sequences, idx.dim(1), sequences, experts,
      counts.data<int64_t>());
  return launch_status("sequence_counts");
}

Status sparsemixer_route(Context& ctx, const SparseMixerRouteArgs& args, const TensorView& logits,
                         const SparseMixerRouteOut& out) {
  const TensorView &idx = out.idx, &gate = out.gate, &probs = out.probs, &lse = out.lse;
  const TensorView &mask = out.mask, &scale = out.scale, &is_argmax = out.is_argmax;
  const int64_t tokens = logits.dim(0);
  if (tokens == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_full("sparsemixer_route", logits, [&](auto tag) {
    using T = decltype(tag);
    ref::SparseMixerOutputs<T> o;
    o.idx = idx.data<int32_t>();
    o.gate = gate.data<T>();
    o.probs = probs.data<T>();
    o.lse = lse.data<T>();
    o.mask = mask.data<uint8_t>();
    o.scale = scale.data<T>();
    o.is_argmax = is_argmax.data<uint8_t>();
    sparsemixer_route_kernel<T><<<grid_for(tokens), kThreads, 0, stream_of(ctx)>>>(
        args, logits.data<T>(), tokens, logits.dim(1), o);
  }));
  return launch_status("sparsemixer_route");
}

Status sparsemixer_backward(Context& ctx, SparseMixerGateGrad rule, const TensorView& d_gate,
                            const TensorView& idx, const TensorView& probs, const TensorView& mask,
                            const TensorView& scale, const TensorView& d_logits) {
  const int64_t tokens = probs.dim(0);
  if (tokens == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_full("sparsemixer_backward", probs, [&](auto tag) {
    using T = decltype(tag);
    ref::SparseMixerSaved<T> saved;
    saved.idx = idx.data<int32_t>();
    saved.probs = probs.data<T>();
    saved.mask = mask.data<uint8_t>();
    saved.scale = scale.data<T>();
    sparsemixer_backward_kernel<T><<<grid_for(tokens), kThreads, 0, stream_of(ctx)>>>(
        rule, d_gate.data<T>(), saved, tokens, probs.dim(1), d_logits.data<T>());
  }));
  return launch_status("sparsemixer_backward");
}

Status aux_sums(Context& ctx, const TensorView& probs, const TensorView& lse,
                const TensorView& load, const TensorView& seq_counts, int64_t tokens,
                const TensorView& packed) {
  const int64_t rows = probs.dim(0), experts = probs.dim(1);
  SequenceSums seq{nullptr, 1, 0};
  if (seq_counts.numel() > 0) {
    seq = {seq_counts.data<int64_t>(), rows / seq_counts.dim(0), seq_counts.dim(0)};
  }
  MOE_RETURN_IF_ERROR(dispatch_full("aux_sums", probs, [&](auto tag) {
    using T = decltype(tag);
    aux_sums_kernel<T><<<static_cast<unsigned>(experts + 2), kThreads, 0, stream_of(ctx)>>>(
        probs.data<T>(), lse.data<T>(), load.data<int64_t>(), rows, experts,
        static_cast<double>(tokens), seq, packed.data<double>());
  }));
  return launch_status("aux_sums");
}

Status aux_losses(Context& ctx, const TensorView& packed, const AuxLossWeights& w,
                  const TensorView& losses) {
  const int64_t experts = (packed.numel() - 3) / 3;
  aux_losses_kernel<<<1, 1, 0, stream_of(ctx)>>>(packed.data<double>(), experts, w,
                                                 losses.data<double>());
  return launch_status("aux_losses");
}

Status aux_losses_backward(Context& ctx, const TensorView& logits, const TensorView& probs,
                           const TensorView& packed, const TensorView& lse,
                           const TensorView& seq_counts, const AuxLossWeights& w,
                           const TensorView& d_logits) {
  const int64_t local = logits.dim(0);
  if (local == 0) return Status::OK();
  const bool seq = seq_counts.numel() > 0;
  const int64_t seq_len = seq ? local / seq_counts.dim(0) : 0;
  const ref::AuxWeights weights{w.top_k, w.balance, w.z, w.seq, w.score};
  MOE_RETURN_IF_ERROR(dispatch_full("aux_losses_backward", logits, [&](auto tag) {
    using T = decltype(tag);
    AuxBackwardIn<T> in;
    in.logits = logits.data<T>();
    in.probs = probs.data<T>();
    in.packed = packed.data<double>();
    in.lse = lse.data<T>();
    in.seq_counts = seq ? seq_counts.data<int64_t>() : nullptr;
    aux_losses_backward_kernel<T><<<grid_for(local), kThreads, 0, stream_of(ctx)>>>(
        in, local, logits.dim(1), weights, seq_len, d_logits.data<T>());
  }));
  return launch_status("aux_losses_backward");
}

}  // namespace moe::kernels::cuda
