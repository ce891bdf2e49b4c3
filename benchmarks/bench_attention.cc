// momoe-bench attention: the causal attention core (kernels/attention.h), forward and backward,
// at one shape on the CPU or a GPU, by the path the context takes ("attention": cpu, or on a GPU
// kernels/attention.h's cuda_attention: in bf16 fused by default, gemm-bf16 or gemm by
// MOMOE_ATTENTION; gemm in f32). Prints the median
// times and the rate in causal FLOPs: each product covers the S (S + 1) / 2 pairs at or below the
// diagonal, 2 Dh FLOPs a pair; the forward does 2 products (scores, P V), the backward 5 (the
// recomputed scores, dP, dV, dQ, dK), whatever a path computes besides (the GEMM paths multiply
// whole S x S squares, the fused forward its scores twice). Beside it, the GEMM rate measured in
// the same run on a square product of the dtype: the floor the attention is held to.
//
// Checked before timing: the timed batch's first sequence against the CPU reference on the same
// rows (f32 and bf16 rounding of the same inputs): relative Frobenius difference of the outputs
// within 2^-6 for bf16 (the gemm-bf16 and fused paths round P and dS to bf16) and 1e-4 for f32;
// the tests hold the paths to derived bounds (tests/kernels/cuda_kernels_test.cc), this only
// guards the timing of a wrong result.
//   momoe-bench attention [--batch 4 --heads 8 --seq 512 --head-dim 64] [--dtype bf16|f32]
//                         [--device cpu|cuda] [--iterations 10 --warmup 2] [--threads 0]
#include <cmath>
#include <cstdio>

#include "base/device.h"
#include "benchmarks/bench_util.h"
#include "benchmarks/layer_fixture.h"
#include "comm/world.h"
#include "core/train/gemm_rate.h"
#include "kernels/attention.h"
#include "kernels/init.h"

namespace moe::bench {
namespace {

struct AttentionOptions {
  kernels::AttentionArgs args;
  int64_t head_dim = 64;
  DType dtype = DType::kBF16;
  int cuda_device = -1;  // -1: the CPU
  int threads = 0;
  int iters = 10, warm = 2;
};

// Relative Frobenius difference of two host tensors of any float dtype.
double relative_difference(const TensorView& a, const TensorView& b) {
  Tensor x = Tensor::empty(a.shape(), DType::kF64), y = Tensor::empty(b.shape(), DType::kF64);
  MOE_CHECK(convert_into(a, x).ok() && convert_into(b, y).ok());
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double d = x.data<double>()[i] - y.data<double>()[i];
    num += d * d;
    den += x.data<double>()[i] * x.data<double>()[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The attention's tensors on one context: inputs drawn on the device, outputs allocated.
struct AttentionTensors {
  Tensor qkv, out, lse, d_out, d_qkv;
};
StatusOr<AttentionTensors> make_tensors(Context& ctx, const AttentionOptions& o) {
  const int64_t batch = o.args.batch, rows = batch * o.args.seq_len, d = o.args.heads * o.head_dim;
  AttentionTensors t;
  MOE_ASSIGN_OR_RETURN(t.qkv, ctx.empty({rows, 3 * d}, o.dtype));
  MOE_ASSIGN_OR_RETURN(t.d_out, ctx.empty({rows, d}, o.dtype));
  MOE_ASSIGN_OR_RETURN(t.out, ctx.empty({rows, d}, o.dtype));
  MOE_ASSIGN_OR_RETURN(t.d_qkv, ctx.empty({rows, 3 * d}, o.dtype));
  MOE_ASSIGN_OR_RETURN(t.lse,
                       ctx.empty({batch, o.args.heads, o.args.seq_len}, compute_dtype(o.dtype)));
  const CounterRng rng{7, make_stream(RngTag::kTest, 1, 0)};
  MOE_RETURN_IF_ERROR(kernels::init_normal(ctx, t.qkv, 1.0, rng));
  MOE_RETURN_IF_ERROR(kernels::init_normal(ctx, t.d_out, 1.0, rng, uint64_t{1} << 40));
  return t;
}

Status run_both(Context& ctx, const kernels::AttentionArgs& a, AttentionTensors& t) {
  MOE_RETURN_IF_ERROR(kernels::attention_forward(ctx, a, t.qkv, t.out, t.lse));
  return kernels::attention_backward(ctx, a, t.d_out, t.qkv, t.out, t.lse, t.d_qkv);
}

// One run of the timed batch on `ctx`, its first sequence against the CPU reference on the same
// rows: the larger relative difference of the output and the input gradient.
StatusOr<double> check_first_sequence(Context& ctx, const AttentionOptions& o,
                                      AttentionTensors& dev) {
  MOE_RETURN_IF_ERROR(run_both(ctx, o.args, dev));
  const int64_t S = o.args.seq_len;
  AttentionTensors ref, got;
  MOE_ASSIGN_OR_RETURN(ref.qkv, ctx.read_back(dev.qkv.view().rows(0, S)));
  MOE_ASSIGN_OR_RETURN(ref.d_out, ctx.read_back(dev.d_out.view().rows(0, S)));
  MOE_ASSIGN_OR_RETURN(got.out, ctx.read_back(dev.out.view().rows(0, S)));
  MOE_ASSIGN_OR_RETURN(got.d_qkv, ctx.read_back(dev.d_qkv.view().rows(0, S)));
  ref.out = Tensor::empty(got.out.shape(), o.dtype);
  ref.d_qkv = Tensor::empty(got.d_qkv.shape(), o.dtype);
  ref.lse = Tensor::empty({1, o.args.heads, S}, compute_dtype(o.dtype));
  kernels::AttentionArgs one = o.args;
  one.batch = 1;  // sequence 0 keys its dropout as in the batch (sequence_offset unchanged)
  std::unique_ptr<Context> host = Context::host();
  MOE_RETURN_IF_ERROR(run_both(*host, one, ref));
  return std::max(relative_difference(ref.out, got.out), relative_difference(ref.d_qkv, got.d_qkv));
}

Status measure(const AttentionOptions& o) {
  std::unique_ptr<Context> ctx = make_bench_context(o.threads, o.cuda_device);
  const bool cuda = o.cuda_device >= 0;
  const kernels::AttentionArgs& a = o.args;
  MOE_ASSIGN_OR_RETURN(AttentionTensors t, make_tensors(*ctx, o));
  MOE_ASSIGN_OR_RETURN(const double diff, check_first_sequence(*ctx, o, t));
  const double allowed = o.dtype == DType::kBF16 ? 0x1p-6 : 1e-4;
  MOE_ASSIGN_OR_RETURN(
      const Timing fwd, time_it(o.warm, o.iters, [&]() -> Status {
        MOE_RETURN_IF_ERROR(kernels::attention_forward(*ctx, a, t.qkv, t.out, t.lse));
        return ctx->synchronize();
      }));
  MOE_ASSIGN_OR_RETURN(const Timing bwd, time_it(o.warm, o.iters, [&]() -> Status {
                         MOE_RETURN_IF_ERROR(kernels::attention_backward(*ctx, a, t.d_out, t.qkv,
                                                                         t.out, t.lse, t.d_qkv));
                         return ctx->synchronize();
                       }));
  MOE_ASSIGN_OR_RETURN(const double gemm,
                       measure_gemm_rate(*ctx, o.dtype, cuda ? 4096 : 512, cuda ? 10 : 3));
  const double S = static_cast<double>(a.seq_len);
  const double product = 2.0 * static_cast<double>(a.batch * a.heads) * (S * (S + 1) / 2) *
                         static_cast<double>(o.head_dim);
  JsonLine j("attention");
  j.str("device", ctx->device().to_string())
      .str("attention", kernels::attention_path(*ctx, o.dtype, o.head_dim))
      .str("dtype", dtype_name(o.dtype))
      .num("batch", static_cast<double>(a.batch))
      .num("heads", static_cast<double>(a.heads))
      .num("seq", S)
      .num("head_dim", static_cast<double>(o.head_dim))
      .num("forward_ms", fwd.median * 1e3)
      .num("backward_ms", bwd.median * 1e3)
      .num("forward_tflops_per_second", 2 * product / fwd.median / 1e12)
      .num("backward_tflops_per_second", 5 * product / bwd.median / 1e12)
      .num("gemm_tflops_per_second", gemm / 1e12)
      .num("check_relative_difference", diff)
      .str("check", diff <= allowed ? "ok" : "MISMATCH");
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  if (diff > allowed) {
    return internal_error(
        "momoe-bench attention: the first sequence differs from the CPU "
        "reference by ",
        diff, " (relative), more than ", allowed);
  }
  return Status::OK();
}

}  // namespace

StatusOr<BenchRun> bench_attention(int argc, char** argv, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(Args args, Args::parse(argc, argv,
                                              {"batch", "heads", "seq", "head-dim", "dtype",
                                               "device", "iterations", "warmup", "threads"}));
  AttentionOptions o;
  o.args.batch = args.get("batch", 4);
  o.args.heads = args.get("heads", 8);
  o.args.seq_len = args.get("seq", 512);
  o.head_dim = args.get("head-dim", 64);
  o.iters = static_cast<int>(args.get("iterations", 10));
  o.warm = static_cast<int>(args.get("warmup", 2));
  o.threads = static_cast<int>(args.get("threads", 0));
  if (o.args.batch < 1 || o.args.heads < 1 || o.args.seq_len < 1 || o.head_dim < 1 || o.iters < 1 ||
      o.warm < 0 || o.threads < 0) {
    return invalid_argument_error(
        "--batch, --heads, --seq, --head-dim and --iterations must be >= 1, --warmup and "
        "--threads >= 0");
  }
  const std::string dtype = args.get_str("dtype", "bf16");
  MOE_RETURN_IF_ERROR(check_one_of("dtype", dtype, {"bf16", "f32"}));
  o.dtype = dtype == "bf16" ? DType::kBF16 : DType::kF32;
  const std::string device = args.get_str("device", "cpu");
  MOE_RETURN_IF_ERROR(check_one_of("device", device, {"cpu", "cuda"}));
  if (device == "cuda") {
    MOE_ASSIGN_OR_RETURN(o.cuda_device, choose_cuda_device(0));
  }
  if (world->rank() != 0) return BenchRun([] { return Status::OK(); });
  return BenchRun([o] { return measure(o); });
}

}  // namespace moe::bench
