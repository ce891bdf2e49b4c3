// momoe-bench layer: the MoE layer forward + backward against the DESIGN.md performance model,
// with the floor measured in the same run:
//   flops = 3 * T * (2 K (2 D F) + 2 D E)       (forward + backward; padding not counted)
//   floor = a dense single GEMM of shape [T*K, D] x [D, F] in the layer's dtype, timed here (the
//           device's GEMM rate), and a copy of 1 GiB on a GPU (64 MiB on the CPU): its bandwidth
//   roofline_ratio = layer GFLOP/s / dense GEMM GFLOP/s
// --torch runs benchmarks/torch_moe_reference.py (PyTorch's strongest plain MoE layer: sorted
// tokens, torch._grouped_mm on a GPU, index_add_ combine, autograd; dropless) on the same shape,
// dtype and device in the same run, after its own --check against a per-token reference, and
// prints speedup_vs_torch (> 1: momoe is faster); $MOMOE_PYTHON and $MOMOE_TORCH_REFERENCE
// choose the interpreter and the script. --shape N takes issue 21's shapes:
//   1: T=16384 D=1024 F=4096 E=8 K=2    2: T=16384 D=2048 F=1024 E=64 K=8
//   3: T=32768 D=4096 F=7168 E=8 K=2    4: T=4096 D=4096 F=14336 E=8 K=2 GELU (Mixtral proxy)
// (dropless, bf16). A finiteness pre-check runs before timing.
//
//   momoe-bench layer [--tokens 2048] [--d 352] [--f 352] [--experts 16] [--top-k 2]
//                     [--variant plain|momentum|adam|robust|ac|sparsemixer]
//                     [--iterations 5] [--warmup 1]
//                     [--threads 0]   (CPU threads; 0 = every core) [--device cpu|cuda]
//                     [--dtype f32|bf16] [--dropless 0|1] [--shape 1|2|3|4] [--torch 0|1]
//                     [--activation relu|gelu|swiglu] [--score softmax|sigmoid] [--shared N]
//                     [--shared-gate 0|1] [--bias-rate R] [--groups G --topk-groups g]
//                     [--compare fine-grained|options|variants] [--rounds 5]
//                     [--forward-alone 0|1]
//   momoe-bench layer --device cuda --shape 1 --torch 1 --iterations 20 --warmup 5
// The routing of current models: --shared N adds N shared experts of width f (--shared-gate 1:
// under Qwen2-MoE's sigmoid gate), --bias-rate R
// loss-free balancing (its bias moves after every iteration, as after a step), --groups with
// --topk-groups group-limited routing; FLOPs count SwiGLU's third matrix and the shared experts.
// --compare fine-grained times the coarse layer (8 experts, top 1, width f) and the fine-grained
// one (64 experts, top 8, width f / 8) and prints their time per active FLOP's ratio;
// --compare options times the layer alone, with loss-free balancing (rate 1e-3), with one shared
// expert and with one gated shared expert, and prints what each adds beyond its own GEMMs (the
// shared FFN timed alone); --compare variants times MomentumSMoE, AdamSMoE, Robust
// MomentumSMoE, the AC router and SparseMixer against the plain layer and prints each overhead.
// gemm_share is the layer's time inside BLAS tiles over its whole time (the rest: routing,
// dispatch, activation, combine; CPU only). On every device, dropless: expert_gemms_ms, the
// layer's six expert products timed alone on an even split of its rows, and their share of
// the layer's time; dispatch_gb_per_second and combine_gb_per_second, the token movement alone,
// with their shares of the copy rate (*_copy_share; the H100 issue's target is 0.7).
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "base/rng.h"
#include "benchmarks/bench_util.h"
#include "benchmarks/layer_fixture.h"
#include "comm/world.h"
#include "core/layers/dense_ffn.h"
#include "io/child_process.h"
#include "kernels/cpu/blas_ref.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/init.h"
#include "kernels/moe_dispatch.h"
#include "types/moe_config.h"

namespace moe::bench {

namespace {

struct LayerShape {
  int64_t tokens, d, f, experts, top_k;
  const char* activation;
};
// Issue 21's shapes (the fourth: Megatron-Core's Mixtral-proxy MoE layer baseline).
constexpr LayerShape kShapes[] = {{16384, 1024, 4096, 8, 2, "relu"},
                                  {16384, 2048, 1024, 64, 8, "relu"},
                                  {32768, 4096, 7168, 8, 2, "relu"},
                                  {4096, 4096, 14336, 8, 2, "gelu"}};

// The value of `key` in a one-line JSON object printed by the reference (a number), or nullopt.
std::optional<double> json_number(const std::string& line, const std::string& key) {
  const std::string needle = "\"" + key + "\": ";
  const size_t at = line.find(needle);
  if (at == std::string::npos) return std::nullopt;
  const char* begin = line.c_str() + at + needle.size();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin) return std::nullopt;
  return v;
}

// The value of `key` in a one-line JSON object printed by the reference (a string), or "".
std::string json_string(const std::string& line, const std::string& key) {
  const std::string needle = "\"" + key + "\": \"";
  const size_t at = line.find(needle);
  if (at == std::string::npos) return "";
  const size_t begin = at + needle.size();
  const size_t end = line.find('"', begin);
  return end == std::string::npos ? "" : line.substr(begin, end - begin);
}

// Runs the PyTorch reference on the same layer; its JSON line (after its --check passed).
StatusOr<std::string> run_torch_reference(const std::vector<std::string>& flags) {
  // $MOMOE_PYTHON (default the python3 on PATH) and
  // $MOMOE_TORCH_REFERENCE (default this source tree's script; another machine's copy of the tree
  // sets it, as tests/run_gpu.sh does).
  const char* python = std::getenv("MOMOE_PYTHON");
  const char* script = std::getenv("MOMOE_TORCH_REFERENCE");
  std::vector<std::string> args = {python != nullptr && *python != '\0' ? python : "python3",
                                   script != nullptr && *script != '\0' ? script
                                                                        : MOE_SOURCE_DIR
                                       "/benchmarks/torch_moe_reference.py",
                                   "layer", "--check"};
  args.insert(args.end(), flags.begin(), flags.end());
  io::SpawnOptions options;
  options.pipes = true;
  StatusOr<std::unique_ptr<io::ChildProcess>> spawned = io::ChildProcess::spawn(args, options);
  if (!spawned.ok()) {
    return spawned.status().with_context("--torch (set MOMOE_PYTHON to a python3 with torch)");
  }
  std::unique_ptr<io::ChildProcess> child = std::move(*spawned);
  child->close_stdin();
  std::string last;
  while (true) {
    MOE_ASSIGN_OR_RETURN(std::optional<std::string> line, child->read_line());
    if (!line) break;
    if (!line->empty()) last = *line;
  }
  MOE_ASSIGN_OR_RETURN(int status, child->wait());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return internal_error(child->command_line(), " ", io::describe_wait_status(status),
                          " (its message is above)");
  }
  if (!json_number(last, "fwd_bwd_ms")) {
    return internal_error(child->command_line(), " printed no fwd_bwd_ms: '", last, "'");
  }
  return last;
}

// What `momoe-bench layer` was asked for: the layer, its dtype and device, and the timing loop.
struct LayerOptions {
  LayerVariant variant = LayerVariant::kPlain;
  int iters = 0, warm = 0;
  std::string dtype_name;
  DType act = DType::kF32;
  std::string activation;
  MoeLayerConfig cfg;
  int64_t tokens = 0, d = 0, f = 0;
  int threads = 0;
  std::string device;
  bool with_torch = false;
  std::string compare;  // "", "fine-grained", "options" or "variants" (bench_layer)
  int rounds = 5;       // --compare: interleaved timing rounds
  // Also time the forward alone (fwd_ms, bwd_ms); 0 keeps a profiled run to its forward +
  // backward passes.
  bool forward_alone = true;
};

// The routing of current models: --score softmax|sigmoid, --shared N (shared experts of width
// f), --bias-rate R (loss-free balancing), --groups G --topk-groups g; --compare
// fine-grained|options|variants (bench_layer).
Status apply_modern_options(const Args& a, LayerOptions* o) {
  const std::string score = a.get_str("score", "softmax");
  if (score != "softmax" && score != "sigmoid") {
    return invalid_argument_error("--score ", score, " is not one of softmax, sigmoid");
  }
  o->cfg.score_function = score == "sigmoid" ? ScoreFunction::kSigmoid : ScoreFunction::kSoftmax;
  o->cfg.shared_experts = a.get("shared", 0);
  o->cfg.d_shared = o->cfg.d_expert;
  o->cfg.shared_expert_gate = a.get("shared-gate", 0) != 0;
  const std::string rate = a.get_str("bias-rate", "0");
  char* end = nullptr;
  o->cfg.bias_update_rate = std::strtod(rate.c_str(), &end);
  if (end == rate.c_str() || *end != '\0' || !(o->cfg.bias_update_rate >= 0)) {
    return invalid_argument_error("--bias-rate ", rate, " is not a number >= 0");
  }
  o->cfg.expert_groups = a.get("groups", 1);
  o->cfg.topk_groups = a.get("topk-groups", 0);
  o->compare = a.get_str("compare", "");
  o->rounds = static_cast<int>(a.get("rounds", 5));
  if (o->rounds < 1) return invalid_argument_error("--rounds must be >= 1");
  if (!o->compare.empty() && o->compare != "fine-grained" && o->compare != "options" &&
      o->compare != "variants") {
    return invalid_argument_error("--compare ", o->compare,
                                  " is not one of fine-grained, options, variants");
  }
  return Status::OK();
}

// Parses and checks the flags (defaults: the quick-start-sized layer in f32 with capacity, or
// one of issue 21's shapes in bf16, dropless); the benchmark runs on one rank.
StatusOr<LayerOptions> parse_layer_options(int argc, char** argv, const comm::World& world) {
  MOE_ASSIGN_OR_RETURN(
      Args a, Args::parse(argc, argv,
                          {"tokens",  "d",          "f",           "experts",      "top-k",
                           "variant", "iterations", "warmup",      "threads",      "device",
                           "dtype",   "dropless",   "activation",  "shape",        "torch",
                           "score",   "shared",     "bias-rate",   "groups",       "topk-groups",
                           "compare", "rounds",     "shared-gate", "forward-alone"}));
  if (world.size() != 1) return invalid_argument_error("momoe-bench layer runs on one rank");
  LayerOptions o;
  MOE_ASSIGN_OR_RETURN(o.variant, parse_variant(a.get_str("variant", "plain")));
  LayerShape shape{2048, 352, 352, 16, 2, "relu"};
  const int64_t shape_id = a.get("shape", 0);
  if (shape_id < 0 || shape_id > 4) {
    return invalid_argument_error("--shape ", shape_id, " is not one of 1, 2, 3, 4 (0: none)");
  }
  o.iters = static_cast<int>(a.get("iterations", shape_id > 0 ? 20 : 5));
  o.warm = static_cast<int>(a.get("warmup", shape_id > 0 ? 5 : 1));
  if (o.iters < 1 || o.warm < 0) {
    return invalid_argument_error("--iterations must be >= 1 and --warmup >= 0");
  }
  if (shape_id > 0) shape = kShapes[shape_id - 1];
  o.dtype_name = a.get_str("dtype", shape_id > 0 ? "bf16" : "f32");
  if (o.dtype_name != "f32" && o.dtype_name != "bf16") {
    return invalid_argument_error("--dtype ", o.dtype_name, " is not one of f32, bf16");
  }
  o.act = o.dtype_name == "bf16" ? DType::kBF16 : DType::kF32;
  o.activation = a.get_str("activation", shape.activation);
  if (o.activation != "relu" && o.activation != "gelu" && o.activation != "swiglu") {
    return invalid_argument_error("--activation ", o.activation,
                                  " is not one of relu, gelu, swiglu");
  }
  o.cfg = layer_config(a.get("d", shape.d), a.get("f", shape.f), a.get("experts", shape.experts),
                       a.get("top-k", shape.top_k), o.variant);
  o.cfg.dropless = a.get("dropless", shape_id > 0 ? 1 : 0) != 0;
  o.cfg.activation = o.activation == "gelu"     ? ExpertActivation::kGelu
                     : o.activation == "swiglu" ? ExpertActivation::kSwiglu
                                                : ExpertActivation::kRelu;
  MOE_RETURN_IF_ERROR(apply_modern_options(a, &o));
  MOE_RETURN_IF_ERROR(o.cfg.validate("bench"));
  o.tokens = a.get("tokens", shape.tokens);
  o.d = o.cfg.d_model;
  o.f = o.cfg.d_expert;
  o.threads = static_cast<int>(a.get("threads", 0));
  o.device = a.get_str("device", "cpu");
  if (o.device != "cpu" && o.device != "cuda") {
    return invalid_argument_error("--device ", o.device, " is not one of cpu, cuda");
  }
  o.with_torch = a.get("torch", 0) != 0;
  if (o.with_torch && (o.variant != LayerVariant::kPlain || !o.cfg.dropless)) {
    return invalid_argument_error(
        "--torch compares the plain dropless layer (the reference has no capacity and no "
        "residual variant): use --variant plain --dropless 1");
  }
  if (o.with_torch && !o.compare.empty()) {
    return invalid_argument_error(
        "--torch times one layer against PyTorch: leave it out of --compare");
  }
  if (o.compare == "variants" && o.variant != LayerVariant::kPlain) {
    return invalid_argument_error("--compare variants times every variant: leave out --variant");
  }
  o.forward_alone = a.get("forward-alone", 1) != 0;
  return o;
}

// The layer's forward + backward time, and its seconds per iteration inside BLAS tiles; the
// forward alone where it was timed (fwd.iterations > 0).
struct LayerTiming {
  Timing t;
  double gemm_seconds = 0;
  Timing fwd;
};

// Times the layer's forward + backward after a finiteness check of one step, counting the time
// its BLAS tiles take (CPU only).
StatusOr<LayerTiming> time_layer(const LayerOptions& o, LayerFixture& fixture) {
  Context& ctx = fixture.context();
  // One forward and backward, finished (a GPU runs them asynchronously until the wait).
  auto step = [&]() -> Status {
    MOE_RETURN_IF_ERROR(fixture.forward_backward());
    return ctx.synchronize();
  };
  MOE_RETURN_IF_ERROR(step());
  MOE_ASSIGN_OR_RETURN(bool finite, fixture.outputs_finite());
  if (!finite) return internal_error("check failed: non-finite output");
  kernels::ref::reset_gemm_counters();
  kernels::ref::set_gemm_timing(true);
  LayerTiming layer;
  MOE_ASSIGN_OR_RETURN(layer.t, time_it(o.warm, o.iters, step));
  kernels::ref::set_gemm_timing(false);
  layer.gemm_seconds = kernels::ref::gemm_counters().seconds / (o.warm + o.iters);
  return layer;
}

// The forward alone, finished, with the same warm-up and iterations (its saved tensors freed
// after each): fwd_ms, and bwd_ms as the forward + backward median less it. The shape 4
// targets each side (Megatron-Core's baseline times them apart).
StatusOr<Timing> time_forward(const LayerOptions& o, LayerFixture& fixture) {
  Context& ctx = fixture.context();
  return time_it(o.warm, o.iters, [&]() -> Status {
    MoeLayerSaved saved;
    MOE_RETURN_IF_ERROR(fixture.forward(&saved));
    return ctx.synchronize();
  });
}

// The floors' timings, with the buffers they timed (held until the benchmark returns).
struct Floors {
  Tensor ga, gb, gc;
  Timing g;
  int64_t copy_bytes = 0;
  Tensor copy_src, copy_dst;
  Timing c;
  Timing experts;            // time_expert_gemms (iterations 0 when not timed)
  Timing dispatch, combine;  // time_token_movement (iterations 0 when not timed)
};

// The layer's token movement alone, dropless on one rank: the dispatch gather (each token's row
// copied to its K send rows: kernels/moe_dispatch.h's gather_rows of moe_layout's send_token)
// and the combine (each token's K rows, gate-weighted, summed back), on a routing that spreads
// the T K assignments evenly (token t's k-th choice is expert (t + k) mod E). The target
// is 70% of the copy rate for each; the bytes each must move are in movement_bytes.
Status time_token_movement(const LayerOptions& o, Context& ctx, Floors* fl) {
  const MoeLayerConfig& c = o.cfg;
  if (!c.dropless || c.top_k > c.num_experts) return Status::OK();
  const int64_t t = o.tokens, k = c.top_k, e = c.num_experts, d = o.d;
  std::vector<int32_t> choice(static_cast<size_t>(t * k));
  for (int64_t i = 0; i < t * k; ++i) choice[i] = static_cast<int32_t>((i / k + i % k) % e);
  MOE_ASSIGN_OR_RETURN(Tensor idx, ctx.upload(Tensor::from_vector<int32_t>(Shape{t, k}, choice)));
  MOE_ASSIGN_OR_RETURN(Tensor slot, ctx.empty({t, k}, DType::kI32));
  MOE_ASSIGN_OR_RETURN(Tensor row, ctx.empty({t, k}, DType::kI32));
  MOE_ASSIGN_OR_RETURN(Tensor load, ctx.empty({e}, DType::kI64));
  MOE_ASSIGN_OR_RETURN(Tensor kept, ctx.empty({e}, DType::kI64));
  MOE_ASSIGN_OR_RETURN(Tensor send_token, ctx.empty({t * k}, DType::kI32));
  MOE_ASSIGN_OR_RETURN(Tensor send_key, ctx.empty({t * k}, DType::kI64));
  MOE_RETURN_IF_ERROR(kernels::moe_layout(ctx, kernels::LayoutArgs(e, -1, 0), idx,
                                          {slot, row, load, kept, send_token, send_key, {}}));
  MOE_ASSIGN_OR_RETURN(Tensor x, ctx.empty({t, d}, o.act));
  MOE_ASSIGN_OR_RETURN(Tensor send, ctx.empty({t * k, d}, o.act));
  MOE_ASSIGN_OR_RETURN(Tensor u, ctx.empty({t, d}, o.act));
  MOE_ASSIGN_OR_RETURN(Tensor gate, ctx.empty({t, k}, compute_dtype(o.act)));
  MOE_RETURN_IF_ERROR(
      kernels::init_normal(ctx, x, 1.0, CounterRng{7, make_stream(RngTag::kTest, 7, 0)}));
  MOE_RETURN_IF_ERROR(kernels::init_constant(ctx, gate, 1.0 / static_cast<double>(k)));
  MOE_ASSIGN_OR_RETURN(fl->dispatch, time_it(o.warm, o.iters, [&]() {
                         MOE_RETURN_IF_ERROR(kernels::gather_rows(ctx, x, send_token, send));
                         return ctx.synchronize();
                       }));
  MOE_ASSIGN_OR_RETURN(fl->combine, time_it(o.warm, o.iters, [&]() {
                         MOE_RETURN_IF_ERROR(kernels::combine(ctx, send, row, gate, {}, u));
                         return ctx.synchronize();
                       }));
  return Status::OK();
}

// Bytes the dispatch and the combine must move: each reads or writes T K rows of D, and the
// combine writes T rows.
double movement_bytes(const LayerOptions& o, bool combine) {
  const double row = static_cast<double>(o.d) * static_cast<double>(dtype_size(o.act));
  const double tk = static_cast<double>(o.tokens * o.cfg.top_k);
  return combine ? (tk + static_cast<double>(o.tokens)) * row : 2.0 * tk * row;
}

// The layer's six expert products alone, as core/layers/expert_ffn.cc calls them (forward: x w1,
// h w2; backward: both weight gradients into compute-dtype accumulators, dy w2^T, dh w1^T), on
// T K rows split evenly over the experts (the layer's routing is near even), with the same
// kernels/gemm.h entry points and MOMOE_EXPERT_GEMM path: what the layer would take if nothing
// but its expert GEMMs ran. Dropless only; `t` untouched otherwise.
Status time_expert_gemms(const LayerOptions& o, Context& ctx, Timing* t) {
  const MoeLayerConfig& c = o.cfg;
  if (!c.dropless) return Status::OK();
  const int64_t e = c.num_experts, m = o.tokens * c.top_k, d = o.d, f = o.f;
  const int64_t f1 = first_matrix_cols(c.activation, f);
  kernels::ExpertBlocks blocks;
  blocks.local_experts = e;
  for (int64_t i = 0; i <= e; ++i) blocks.offsets.push_back(m * i / e);
  const DType act = o.act, acc = compute_dtype(o.act);
  MOE_ASSIGN_OR_RETURN(Tensor x, ctx.empty({m, d}, act));
  MOE_ASSIGN_OR_RETURN(Tensor w1, ctx.empty({e, d, f1}, act));
  MOE_ASSIGN_OR_RETURN(Tensor w2, ctx.empty({e, f, d}, act));
  MOE_ASSIGN_OR_RETURN(Tensor h_pre, ctx.empty({m, f1}, act));
  MOE_ASSIGN_OR_RETURN(Tensor h, ctx.empty({m, f}, act));
  MOE_ASSIGN_OR_RETURN(Tensor dh, ctx.empty({m, f}, act));
  MOE_ASSIGN_OR_RETURN(Tensor y, ctx.empty({m, d}, act));
  MOE_ASSIGN_OR_RETURN(Tensor dx, ctx.empty({m, d}, act));
  MOE_ASSIGN_OR_RETURN(Tensor dw1, ctx.zeros({e, d, f1}, acc));
  MOE_ASSIGN_OR_RETURN(Tensor dw2, ctx.zeros({e, f, d}, acc));
  int tag = 0;
  for (Tensor* v : {&x, &w1, &w2, &h}) {
    const double stddev = v == &x || v == &h ? 1.0 : 0.02;
    MOE_RETURN_IF_ERROR(kernels::init_normal(
        ctx, *v, stddev,
        CounterRng{5, make_stream(RngTag::kTest, 5, static_cast<uint32_t>(tag++))}));
  }
  MOE_ASSIGN_OR_RETURN(*t, time_it(o.warm, o.iters, [&]() {
    MOE_RETURN_IF_ERROR(kernels::expert_gemm(ctx, x, w1, false, h_pre, blocks));
    MOE_RETURN_IF_ERROR(kernels::expert_gemm(ctx, h, w2, false, y, blocks));
    MOE_RETURN_IF_ERROR(kernels::expert_gemm_wgrad(ctx, h, y, dw2, blocks));
    MOE_RETURN_IF_ERROR(kernels::expert_gemm(ctx, y, w2, true, dh, blocks));
    MOE_RETURN_IF_ERROR(kernels::expert_gemm_wgrad(ctx, x, h_pre, dw1, blocks));
    MOE_RETURN_IF_ERROR(kernels::expert_gemm(ctx, h_pre, w1, true, dx, blocks));
    return ctx.synchronize();
  }));
  return Status::OK();
}

// Times the floors: one dense GEMM with the expert FFN's row count and width, in the layer's
// dtype, and a device-to-device copy.
Status time_floors(const LayerOptions& o, Context& ctx, Floors* fl) {
  const int64_t tokens = o.tokens, d = o.d, f = o.f;
  const DType act = o.act;
  Tensor &ga = fl->ga, &gb = fl->gb, &gc = fl->gc;
  MOE_ASSIGN_OR_RETURN(ga, ctx.empty({tokens * o.cfg.top_k, d}, act));
  MOE_ASSIGN_OR_RETURN(gb, ctx.empty({d, f}, act));
  MOE_ASSIGN_OR_RETURN(gc, ctx.empty({tokens * o.cfg.top_k, f}, act));
  MOE_RETURN_IF_ERROR(
      kernels::init_normal(ctx, ga, 1.0, CounterRng{3, make_stream(RngTag::kTest, 3, 0)}));
  MOE_RETURN_IF_ERROR(
      kernels::init_normal(ctx, gb, 1.0, CounterRng{3, make_stream(RngTag::kTest, 3, 1)}));
  MOE_ASSIGN_OR_RETURN(fl->g, time_it(o.warm, o.iters, [&]() {
                         MOE_RETURN_IF_ERROR(kernels::gemm(ctx, ga, false, gb, false, gc));
                         return ctx.synchronize();
                       }));
  const int64_t copy_bytes = ctx.device().is_host() ? (int64_t{64} << 20) : (int64_t{1} << 30);
  fl->copy_bytes = copy_bytes;
  Tensor &copy_src = fl->copy_src, &copy_dst = fl->copy_dst;
  MOE_ASSIGN_OR_RETURN(copy_src, ctx.empty({copy_bytes / 4}, DType::kF32));
  MOE_ASSIGN_OR_RETURN(copy_dst, ctx.empty({copy_bytes / 4}, DType::kF32));
  MOE_RETURN_IF_ERROR(kernels::init_constant(ctx, copy_src, 1.0));
  MOE_ASSIGN_OR_RETURN(fl->c, time_it(o.warm, o.iters, [&]() {
                         MOE_RETURN_IF_ERROR(kernels::convert(ctx, copy_src, copy_dst));
                         return ctx.synchronize();
                       }));
  MOE_RETURN_IF_ERROR(time_expert_gemms(o, ctx, &fl->experts));
  return time_token_movement(o, ctx, fl);
}

// The layer's active FLOPs per forward + backward (3 x forward): each token's K experts and the
// shared experts (2 matrices of D x F, 3 with SwiGLU; padding not counted) and the router.
double active_flops(const LayerOptions& o) {
  const MoeLayerConfig& c = o.cfg;
  const double matrices = is_gated(c.activation) ? 3.0 : 2.0;
  const double d = static_cast<double>(c.d_model);
  const double expert = 2.0 * matrices * d * static_cast<double>(c.d_expert);
  const double shared = 2.0 * matrices * d * static_cast<double>(c.shared_width());
  return 3.0 * static_cast<double>(o.tokens) *
         (static_cast<double>(c.top_k) * expert + shared + 2.0 * d * c.num_experts);
}

// How the line's expert products ran: "cpu", or on a GPU "batched" (capacity mode: one strided
// batch per source rank) or the dropless path (kernels/expert_gemm_path.h: "loop", "grouped").
const char* expert_gemm_label(const Context& ctx, const MoeLayerConfig& cfg) {
  if (ctx.device().is_host()) return "cpu";
  if (!cfg.dropless) return "batched";
  return kernels::expert_gemm_path_name(kernels::expert_gemm_path());
}

// The result line: the layer's rate against the performance model and the measured floors.
JsonLine layer_line(const LayerOptions& o, Context& ctx, const LayerTiming& layer,
                    const Floors& fl) {
  const int64_t tokens = o.tokens, d = o.d, f = o.f;
  const MoeLayerConfig& cfg = o.cfg;
  const Timing& t = layer.t;
  const double gemm_flops = 2.0 * tokens * cfg.top_k * d * f;
  const double layer_flops = active_flops(o);
  const kernels::ExpertGemmPaths paths = kernels::expert_gemm_paths();
  JsonLine j("layer");
  j.str("device", ctx.device().to_string())
      .str("variant", variant_name(o.variant))
      .str("dtype", o.dtype_name)
      .str("activation", o.activation)
      .str("score", cfg.score_function == ScoreFunction::kSigmoid ? "sigmoid" : "softmax")
      .num("shared", cfg.shared_experts)
      .num("bias_rate", cfg.bias_update_rate)
      .num("groups", cfg.expert_groups)
      .num("dropless", cfg.dropless ? 1 : 0)
      // A GPU's dropless expert products: one cuBLAS call per block, or one grouped call when
      // MOMOE_EXPERT_GEMM=grouped (kernels/gemm.h's expert_gemm_path); then how this process's
      // groups really ran (cuBLAS may refuse a dtype pair, unaligned blocks run one by one).
      .str("expert_gemm", expert_gemm_label(ctx, cfg))
      .num("expert_gemm_groups_grouped", paths.grouped)
      .num("expert_gemm_groups_refused", paths.refused)
      .num("expert_gemm_groups_unaligned", paths.unaligned)
      .num("tokens", tokens)
      .num("d", d)
      .num("f", f)
      .num("experts", cfg.num_experts)
      .num("top_k", cfg.top_k)
      .num("threads", ctx.threads())
      .num("iterations", o.iters)
      .num("fwd_bwd_ms", t.median * 1e3)
      .num("fwd_ms", layer.fwd.iterations > 0 ? layer.fwd.median * 1e3 : -1.0)
      .num("bwd_ms", layer.fwd.iterations > 0 ? (t.median - layer.fwd.median) * 1e3 : -1.0)
      // The CPU's BLAS calls are timed one by one; a GPU's kernels are not (-1).
      .num("gemm_share", ctx.device().is_host() ? layer.gemm_seconds / t.mean : -1.0)
      .num("tokens_per_second", tokens / t.median)
      .num("gflops_per_second", layer_flops / t.median / 1e9)
      .num("dense_gemm_gflops_per_second", gemm_flops / fl.g.median / 1e9)
      .num("roofline_ratio", (layer_flops / t.median) / (gemm_flops / fl.g.median))
      // A copy reads and writes every byte.
      .num("copy_gb_per_second", 2.0 * static_cast<double>(fl.copy_bytes) / fl.c.median / 1e9)
      // The expert GEMMs alone (time_expert_gemms; -1 in capacity mode) and their share of the
      // layer's time: the rest is routing, dispatch, activations, biases and combine.
      .num("expert_gemms_ms", fl.experts.iterations > 0 ? fl.experts.median * 1e3 : -1.0)
      .num("expert_gemms_share", fl.experts.iterations > 0 ? fl.experts.median / t.median : -1.0);
  // The token movement alone (time_token_movement; -1 in capacity mode): GB/s and the share of
  // the copy rate (the target: 0.7).
  const double copy = 2.0 * static_cast<double>(fl.copy_bytes) / fl.c.median;
  for (const bool combine : {false, true}) {
    const Timing& m = combine ? fl.combine : fl.dispatch;
    const double rate = m.iterations > 0 ? movement_bytes(o, combine) / m.median : -1.0;
    const std::string name = combine ? "combine" : "dispatch";
    j.num(name + "_gb_per_second", rate > 0 ? rate / 1e9 : -1.0)
        .num(name + "_copy_share", rate > 0 ? rate / copy : -1.0);
  }
  return j;
}

// Runs the PyTorch reference on the same layer and adds its time and speedup_vs_torch to `j`.
Status add_torch_comparison(const LayerOptions& o, int threads, const Timing& t, JsonLine* j) {
  std::vector<std::string> flags = {"--tokens",     std::to_string(o.tokens),
                                    "--d",          std::to_string(o.d),
                                    "--f",          std::to_string(o.f),
                                    "--experts",    std::to_string(o.cfg.num_experts),
                                    "--top-k",      std::to_string(o.cfg.top_k),
                                    "--activation", o.activation,
                                    "--dtype",      o.dtype_name,
                                    "--device",     o.device,
                                    "--iterations", std::to_string(o.iters),
                                    "--warmup",     std::to_string(o.warm),
                                    "--threads",    std::to_string(threads)};
  // On a GPU in bf16 the grouped GEMMs or nothing: a torch without _grouped_mm fails loudly
  // instead of timing the slower per-expert loop.
  if (o.device == "cuda" && o.act == DType::kBF16) {
    flags.push_back("--impl");
    flags.push_back("grouped");
  }
  MOE_ASSIGN_OR_RETURN(std::string line, run_torch_reference(flags));
  const double torch_ms = *json_number(line, "fwd_bwd_ms");
  j->str("torch_version", json_string(line, "torch"))
      .str("torch_impl", json_string(line, "impl"))
      .num("torch_fwd_bwd_ms", torch_ms)
      .num("torch_check_logic_rel_error", json_number(line, "check_logic_rel_error").value_or(-1))
      .num("torch_check_logic_bound", json_number(line, "check_logic_bound").value_or(-1))
      .num("torch_check_grouped_rel_error",
           json_number(line, "check_grouped_rel_error").value_or(-1))
      .num("speedup_vs_torch", torch_ms / (t.median * 1e3));
  return Status::OK();
}

// Times one layer and prints its line; returns its median seconds per forward + backward.
StatusOr<double> run_layer(const LayerOptions& o, int cuda_device) {
  LayerFixture fixture(o.cfg, o.tokens, nullptr, 0, o.act, o.threads, cuda_device);
  Context& ctx = fixture.context();
  MOE_ASSIGN_OR_RETURN(LayerTiming layer, time_layer(o, fixture));
  if (o.forward_alone) {
    MOE_ASSIGN_OR_RETURN(layer.fwd, time_forward(o, fixture));
  }
  Floors floors;
  MOE_RETURN_IF_ERROR(time_floors(o, ctx, &floors));
  JsonLine j = layer_line(o, ctx, layer, floors);
  if (o.with_torch) MOE_RETURN_IF_ERROR(add_torch_comparison(o, ctx.threads(), layer.t, &j));
  j.str("check", "ok");
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  return layer.t.median;
}

// The shared experts' own FFN (width shared_width, the experts' activation) alone, forward +
// backward on the layer's tokens: the GEMMs the shared experts add.
StatusOr<double> time_shared_ffn(const LayerOptions& o, int cuda_device) {
  const std::unique_ptr<Context> ctx = make_bench_context(o.threads, cuda_device);
  ParameterSet params(ctx.get(), o.act);
  DenseFfn ffn("shared", o.d, o.cfg.shared_width(), o.cfg.activation, o.cfg.linear_bias, 0.0,
               &params);
  MOE_RETURN_IF_ERROR(params.allocate());
  uint64_t stream = 0;
  for (const auto& p : params.all()) {
    MOE_RETURN_IF_ERROR(kernels::init_normal(
        *ctx, p->master, 0.05, CounterRng{1, make_stream(RngTag::kTest, 1, ++stream)}));
  }
  MOE_RETURN_IF_ERROR(params.refresh_working());
  MOE_ASSIGN_OR_RETURN(Tensor x, ctx->empty({o.tokens, o.d}, o.act));
  MOE_RETURN_IF_ERROR(
      kernels::init_normal(*ctx, x, 1.0, CounterRng{2, make_stream(RngTag::kTest, 2, 0)}));
  MOE_ASSIGN_OR_RETURN(const Timing t, time_it(o.warm, o.iters, [&]() -> Status {
                         DenseFfn::Saved saved;
                         MOE_ASSIGN_OR_RETURN(Tensor y,
                                              ffn.forward(x, 0, false, CounterRng{}, &saved));
                         MOE_RETURN_IF_ERROR(ffn.backward(y, saved).status());
                         return ctx->synchronize();
                       }));
  return t.median;
}

// The median of `v` (non-empty).
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times each of `layers` once per round, interleaved (A B C A B C ...: a slow spell of a shared
// machine hits every layer alike), after printing each layer's line once. seconds[i][r]: layer
// i's median forward + backward in round r.
StatusOr<std::vector<std::vector<double>>> interleaved_rounds(
    const std::vector<LayerOptions>& layers, int rounds, int cuda_device) {
  std::vector<std::unique_ptr<LayerFixture>> fixtures;
  std::vector<std::vector<double>> seconds(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerOptions& o = layers[i];
    fixtures.push_back(
        std::make_unique<LayerFixture>(o.cfg, o.tokens, nullptr, 0, o.act, o.threads, cuda_device));
  }
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < layers.size(); ++i) {
      MOE_ASSIGN_OR_RETURN(const LayerTiming t, time_layer(layers[i], *fixtures[i]));
      seconds[i].push_back(t.t.median);
    }
  }
  return seconds;
}

// --compare fine-grained: the coarse layer (8 experts, top 1, width F) and the fine-grained one
// (64 experts, top 8, width F / 8): the same tokens, width and active FLOPs in the experts. Each
// layer's line first, then --rounds interleaved timings; the ratio is their median's.
Status compare_fine_grained(const LayerOptions& o, int cuda_device) {
  LayerOptions coarse = o, fine = o;
  coarse.cfg.num_experts = 8;
  coarse.cfg.top_k = 1;
  fine.cfg.num_experts = 64;
  fine.cfg.top_k = 8;
  fine.cfg.d_expert = fine.f = o.f / 8;
  fine.cfg.d_shared = fine.f;  // shared experts (--shared) split alike
  MOE_RETURN_IF_ERROR(coarse.cfg.validate("coarse"));
  MOE_RETURN_IF_ERROR(fine.cfg.validate("fine-grained"));
  MOE_RETURN_IF_ERROR(run_layer(coarse, cuda_device).status());
  MOE_RETURN_IF_ERROR(run_layer(fine, cuda_device).status());
  MOE_ASSIGN_OR_RETURN(const auto t, interleaved_rounds({coarse, fine}, o.rounds, cuda_device));
  std::vector<double> ratio;
  for (int r = 0; r < o.rounds; ++r) {
    ratio.push_back((t[1][r] / active_flops(fine)) / (t[0][r] / active_flops(coarse)));
  }
  JsonLine j("layer_compare");
  j.str("compare", "fine-grained")
      .num("rounds", o.rounds)
      .num("coarse_ms", median_of(t[0]) * 1e3)
      .num("fine_ms", median_of(t[1]) * 1e3)
      // Seconds per active FLOP, fine-grained over coarse (the target: at most 1.3).
      .num("time_per_active_flop_ratio", median_of(ratio))
      .num("ratio_min", *std::min_element(ratio.begin(), ratio.end()))
      .num("ratio_max", *std::max_element(ratio.begin(), ratio.end()));
  std::printf("%s\n", j.dump().c_str());
  return Status::OK();
}

// --compare options: the layer as given, with loss-free balancing (rate 1e-3), with one shared
// expert of width F, and with it under Qwen2-MoE's gate, timed in --rounds interleaved rounds
// with the shared experts' own FFN alone; per round, loss-free's overhead is its time over the
// layer's, and the shared experts' what their time adds beyond their FFN's forward + backward
// (the gated one's includes the gate: its [D, 1] products, sigmoid and row sums; the targets: at
// most 3% each, the medians over rounds).
Status compare_options(const LayerOptions& o, int cuda_device) {
  LayerOptions base = o, loss_free = o, shared = o;
  base.cfg.bias_update_rate = shared.cfg.bias_update_rate = 0;
  base.cfg.shared_experts = loss_free.cfg.shared_experts = 0;
  base.cfg.shared_expert_gate = loss_free.cfg.shared_expert_gate = false;
  loss_free.cfg.bias_update_rate = 1e-3;
  shared.cfg.shared_experts = 1;
  shared.cfg.shared_expert_gate = false;
  LayerOptions gated = shared;
  gated.cfg.shared_expert_gate = true;
  for (const LayerOptions* l : {&base, &loss_free, &shared, &gated}) {
    MOE_RETURN_IF_ERROR(run_layer(*l, cuda_device).status());
  }
  std::vector<double> lf, sh, gsh, tffn;
  for (int r = 0; r < o.rounds; ++r) {
    MOE_ASSIGN_OR_RETURN(const auto t,
                         interleaved_rounds({base, loss_free, shared, gated}, 1, cuda_device));
    MOE_ASSIGN_OR_RETURN(const double f, time_shared_ffn(shared, cuda_device));
    tffn.push_back(f);
    lf.push_back(t[1][0] / t[0][0] - 1);
    sh.push_back((t[2][0] - f) / t[0][0] - 1);
    gsh.push_back((t[3][0] - f) / t[0][0] - 1);
  }
  JsonLine j("layer_compare");
  j.str("compare", "options")
      .num("rounds", o.rounds)
      .num("shared_ffn_alone_ms", median_of(tffn) * 1e3)
      .num("loss_free_overhead", median_of(lf))
      .num("shared_overhead_beyond_its_gemms", median_of(sh))
      .num("gated_shared_overhead_beyond_its_gemms", median_of(gsh));
  std::printf("%s\n", j.dump().c_str());
  return Status::OK();
}

// The layer of `o` as variant v: its residual, router and top-k as layer_config sets them, every
// other setting (dtype, dropless, activation, ...) kept.
LayerOptions with_variant(const LayerOptions& o, LayerVariant v) {
  LayerOptions r = o;
  const MoeLayerConfig c = layer_config(o.d, o.f, o.cfg.num_experts, o.cfg.top_k, v);
  r.variant = v;
  r.cfg.residual = c.residual;
  r.cfg.ac.enabled = c.ac.enabled;
  r.cfg.sparsemixer.enabled = c.sparsemixer.enabled;
  r.cfg.top_k = c.top_k;
  return r;
}

// --compare variants: the papers' layers against the plain one of the same shape (the H100
// issue's target: each adds at most 3%): MomentumSMoE, AdamSMoE, Robust MomentumSMoE and the
// Adaptive Clustering router against plain top-k, SparseMixer (top 1) against plain top 1. Each
// layer's line first, then --rounds interleaved rounds; each overhead is the median over rounds
// of its time over its baseline's, less 1.
Status compare_variants(const LayerOptions& o, int cuda_device) {
  const LayerVariant kinds[] = {LayerVariant::kPlain, LayerVariant::kMomentum,
                                LayerVariant::kAdam,  LayerVariant::kRobust,
                                LayerVariant::kAc,    LayerVariant::kSparseMixer};
  std::vector<LayerOptions> layers;
  for (LayerVariant v : kinds) layers.push_back(with_variant(o, v));
  LayerOptions plain_top1 = layers[0];
  plain_top1.cfg.top_k = 1;
  layers.push_back(plain_top1);
  // Every layer checked before any is timed (SparseMixer refuses some routing options).
  for (const LayerOptions& l : layers) MOE_RETURN_IF_ERROR(l.cfg.validate(variant_name(l.variant)));
  for (const LayerOptions& l : layers) MOE_RETURN_IF_ERROR(run_layer(l, cuda_device).status());
  MOE_ASSIGN_OR_RETURN(const auto t, interleaved_rounds(layers, o.rounds, cuda_device));
  JsonLine j("layer_compare");
  j.str("compare", "variants").num("rounds", o.rounds).num("plain_ms", median_of(t[0]) * 1e3);
  for (size_t i = 1; i + 1 < layers.size(); ++i) {
    const size_t base = layers[i].variant == LayerVariant::kSparseMixer ? layers.size() - 1 : 0;
    std::vector<double> over;
    for (int r = 0; r < o.rounds; ++r) over.push_back(t[i][r] / t[base][r] - 1);
    j.num(str_cat(variant_name(layers[i].variant), "_overhead"), median_of(over));
  }
  std::printf("%s\n", j.dump().c_str());
  return Status::OK();
}

}  // namespace

StatusOr<BenchRun> bench_layer(int argc, char** argv, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(const LayerOptions o, parse_layer_options(argc, argv, *world));
  int cuda_device = -1;
  if (o.device == "cuda") {
    MOE_ASSIGN_OR_RETURN(cuda_device, choose_cuda_device(0));
  }
  return BenchRun([o, cuda_device]() -> Status {
    if (o.compare == "fine-grained") return compare_fine_grained(o, cuda_device);
    if (o.compare == "options") return compare_options(o, cuda_device);
    if (o.compare == "variants") return compare_variants(o, cuda_device);
    return run_layer(o, cuda_device).status();
  });
}

}  // namespace moe::bench
