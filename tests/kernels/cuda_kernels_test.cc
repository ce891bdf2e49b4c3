// The CUDA kernels against their CPU reference, op by op (label gpu; skips without a device).
// Each case draws fresh random inputs, runs the op on the host context and on a CUDA context,
// poisons the GPU outputs with NaN before the call, and compares ||gpu - cpu|| / ||cpu|| against
// a tolerance per dtype. Awkward shapes throughout: one row, sizes that are not multiples of a
// block or of 8, empty expert blocks, capacity padding. Every result is also recorded and printed
// at the end as "op dtype max-relative-error" lines (the report).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <tuple>

#include "base/device.h"
#include "base/rng.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/common.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/init.h"
#include "kernels/layernorm.h"
#include "kernels/load_balance.h"
#include "kernels/moe_dispatch.h"
#include "kernels/moe_stats.h"
#include "kernels/optimizer.h"
#include "kernels/residual.h"
#include "kernels/rope.h"
#include "kernels/router.h"
#include "tests/testing/attention_bound.h"
#include "tests/testing/cross_path.h"
#include "tests/testing/cuda_device.h"
#include "tests/testing/gradient_check.h"
#include "tests/testing/scoped_env.h"

namespace moe::kernels {
namespace {

using testing::host_context;

std::map<std::string, double>& worst() {
  static std::map<std::string, double> w;
  return w;
}

class ReportEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    if (worst().empty()) return;
    std::printf("max relative error, GPU vs CPU reference:\n");
    for (const auto& [key, err] : worst()) std::printf("  %-40s %.3e\n", key.c_str(), err);
  }
};
const auto* const kReport = ::testing::AddGlobalTestEnvironment(new ReportEnvironment);

// GPU against the CPU reference is a cross-path comparison (tests/testing/cross_path.h): the
// default bound on the relative Frobenius error is the dtype's epsilon times the op's depth: 16
// rounding stages for f32, an f64 layer's 4096 (kF64LayerTolerance); a bf16 output is rounded
// once on each side, so the two differ by at most one bf16 ulp (kBf16Eps relative). Ops with
// longer sums (GEMMs) pass their own bound; decisions (top-k, SparseMixer samples and sets, AC
// clusters) are compared bit for bit before the values, on identical inputs.
double tolerance(DType d) {
  switch (d) {
    case DType::kF64:
      return testing::kF64LayerTolerance;
    case DType::kBF16:
      return testing::kBf16Eps;
    default:
      return testing::rounding_tolerance(testing::kF32Eps, 16);
  }
}

// Runs `expr` once (ops accumulate into their outputs: never twice for a message).
#define OK(expr)                                            \
  do {                                                      \
    const ::moe::Status ok_status_ = (expr);                \
    ASSERT_TRUE(ok_status_.ok()) << ok_status_.to_string(); \
  } while (0)

// One attention case of the GPU tests: its shape, dropout and the arguments (a fixed stream).
struct AttentionCase {
  int64_t batch, seq, heads, head_dim;
  float dropout;
  AttentionArgs args() const {
    return AttentionArgs{
        batch, seq, heads, dropout, CounterRng{9, make_stream(RngTag::kDropout, 3, 2)}, 5};
  }
};

class CudaKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MOE_REQUIRE_CUDA_DEVICE();
    auto c = Context::cuda(0);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    gpu_ = std::move(*c);
  }

  Context& cpu() { return host_context(); }
  Context& gpu() { return *gpu_; }

  // Host tensor, uniform in [lo, hi).
  Tensor rand(Shape shape, DType dtype, double lo = -1.0, double hi = 1.0) {
    Tensor t = Tensor::empty(shape, dtype);
    testing::fill_uniform(t, ++seed_, lo, hi);
    return t;
  }
  Tensor up(const Tensor& host) {
    auto t = gpu().upload(host);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return std::move(*t);
  }
  // A GPU tensor full of NaN (float) or 0x7f bytes (integers): an output the op must overwrite.
  Tensor poisoned(Shape shape, DType dtype) {
    Tensor h = Tensor::empty(shape, dtype);
    if (dtype_is_floating(dtype)) {
      Tensor f = Tensor::empty(shape, DType::kF64);
      for (int64_t i = 0; i < f.numel(); ++i) {
        f.data<double>()[i] = std::numeric_limits<double>::quiet_NaN();
      }
      EXPECT_TRUE(convert_into(f, h).ok());
    } else if (h.nbytes() > 0) {
      std::memset(h.raw(), 0x7f, h.nbytes());
    }
    return up(h);
  }
  Tensor down(const TensorView& t) {
    auto h = gpu().read_back(t);
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    return std::move(*h);
  }
  // ||gpu - ref|| / ||ref|| (absolute when ref is zero), recorded under op/dtype and checked.
  void expect_close(const std::string& op, const TensorView& ref, const TensorView& gpu_t,
                    double tol = -1) {
    Tensor got = down(gpu_t);
    ASSERT_EQ(ref.shape(), got.shape()) << op;
    Tensor a = Tensor::empty(ref.shape(), DType::kF64), b = Tensor::empty(ref.shape(), DType::kF64);
    ASSERT_TRUE(convert_into(ref, a).ok());
    ASSERT_TRUE(convert_into(got, b).ok());
    double num = 0, den = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double x = a.data<double>()[i], y = b.data<double>()[i];
      num += (x - y) * (x - y);
      den += x * x;
      if (std::isfinite(x)) {
        ASSERT_TRUE(std::isfinite(y)) << op << ": element " << i << " is " << y;
      }
    }
    const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    record(op + " " + dtype_name(gpu_t.dtype()), err, tol >= 0 ? tol : tolerance(gpu_t.dtype()));
  }

  // One op's error against its bound: kept for the report, printed as recorded
  // (tests/run_gpu.sh collects the lines; a crash keeps those before it), and checked.
  void record(const std::string& key, double err, double bound) {
    worst()[key] = std::max(worst()[key], err);
    std::printf("[ op ] %-40s %.3e (bound %.3e)%s\n", key.c_str(), err, bound,
                err <= bound ? "" : " OVER");
    std::fflush(stdout);
    EXPECT_LE(err, bound) << key;
  }

  // One bf16 attention path (MOMOE_ATTENTION already set to `path`) within the derived bound.
  void expect_attention_within_bound(const std::string& path) {
    using Case = AttentionCase;
    std::vector<Case> cases = {Case{1, 1, 1, 4, 0.f},    Case{2, 37, 3, 8, 0.f},
                               Case{3, 64, 4, 16, 0.1f}, Case{1, 130, 2, 5, 0.25f},
                               Case{2, 200, 2, 64, 0.f}, Case{1, 129, 2, 128, 0.1f},
                               Case{1, 70, 3, 33, 0.f},  Case{1, 65, 1, 32, 0.f}};
    if (path == "gemm-bf16") cases.push_back(Case{1, 40, 2, 160, 0.1f});
    for (const Case& c : cases) {
      SCOPED_TRACE(
          str_cat("B", c.batch, " S", c.seq, " H", c.heads, " Dh", c.head_dim, " p", c.dropout));
      ASSERT_EQ(std::string(attention_path(gpu(), DType::kBF16, c.head_dim)), path);
      const AttentionArgs a = c.args();
      const int64_t rows = c.batch * c.seq, d = c.heads * c.head_dim;
      Tensor qkv = rand({rows, 3 * d}, DType::kBF16, -1.5, 1.5);
      Tensor dout = rand({rows, d}, DType::kBF16);
      Tensor gqkv = up(qkv), gdout = up(dout);
      Tensor gout = poisoned({rows, d}, DType::kBF16);
      Tensor glse = poisoned({c.batch, c.heads, c.seq}, DType::kF32);
      Tensor gdqkv = poisoned({rows, 3 * d}, DType::kBF16);
      OK(attention_forward(gpu(), a, gqkv, gout, glse));
      OK(attention_backward(gpu(), a, gdout, gqkv, gout, glse, gdqkv));
      const Tensor out = down(gout), lse = down(glse), dqkv = down(gdqkv);
      // The fused kernels form D_i from the output they stored: the bound takes that output's D.
      const TensorView used = out.view();
      const testing::AttentionWithBound exact =
          testing::exact_attention(a, qkv, dout, path == "fused" ? &used : nullptr);
      EXPECT_TRUE(
          testing::within_bound(path + " attention_forward", out, exact.out, exact.out_bound));
      EXPECT_TRUE(
          testing::within_bound(path + " attention_forward(lse)", lse, exact.lse, exact.lse_bound));
      EXPECT_TRUE(testing::within_bound(path + " attention_backward", dqkv, exact.d_qkv,
                                        exact.d_qkv_bound));
      // The margin, in the report: the worst entry's error over its bound (at most 1 passes).
      record(path + " attention_forward bf16 (err/bound)",
             testing::worst_error_over_bound(out, exact.out, exact.out_bound), 1.0);
      for (int part = 0; part < 3; ++part) {
        record(str_cat(path, " attention_backward bf16 d", "qkv"[part], " (err/bound)"),
               testing::worst_part_error_over_bound(dqkv, exact.d_qkv, exact.d_qkv_bound, part),
               1.0);
      }
      // Repeat: the same bits.
      Tensor gout2 = poisoned({rows, d}, DType::kBF16);
      Tensor glse2 = poisoned({c.batch, c.heads, c.seq}, DType::kF32);
      Tensor gdqkv2 = poisoned({rows, 3 * d}, DType::kBF16);
      OK(attention_forward(gpu(), a, gqkv, gout2, glse2));
      OK(attention_backward(gpu(), a, gdout, gqkv, gout2, glse2, gdqkv2));
      EXPECT_TRUE(testing::bitwise_equal(out, down(gout2)));
      EXPECT_TRUE(testing::bitwise_equal(lse, down(glse2)));
      EXPECT_TRUE(testing::bitwise_equal(dqkv, down(gdqkv2)));
      if (c.seq > 1) expect_not_the_f32_path(a, gqkv, gdout, out, dqkv);
    }
  }

  // The bound also admits the f32 GEMM path (P and dS kept in f32), so a dispatch that sent
  // `path` there would pass it: past one position (P = 1 and dS = 0 are exact in bf16) its
  // roundings of P and dS must show in the bits.
  void expect_not_the_f32_path(const AttentionArgs& a, const Tensor& gqkv, const Tensor& gdout,
                               const Tensor& out, const Tensor& dqkv) {
    const testing::ScopedEnv f32_path("MOMOE_ATTENTION", "gemm");
    Tensor gout = poisoned(out.shape(), DType::kBF16), gdqkv = poisoned(dqkv.shape(), DType::kBF16);
    Tensor glse = poisoned({a.batch, a.heads, a.seq_len}, DType::kF32);
    OK(attention_forward(gpu(), a, gqkv, gout, glse));
    OK(attention_backward(gpu(), a, gdout, gqkv, gout, glse, gdqkv));
    EXPECT_FALSE(testing::bitwise_equal(out, down(gout)) &&
                 testing::bitwise_equal(dqkv, down(gdqkv)))
        << "the same bits as the f32 GEMM path: did the dispatch take it?";
  }

  // ac_metric on the GPU equals the CPU's bit for bit (the same steps; the long sums in the chunked
  // order both run), under both normalisations, with tiny clusters and clipping.
  void expect_ac_metric_matches(const Tensor& dev, const Tensor& counts) {
    const int64_t experts = dev.dim(0), d = dev.dim(1);
    for (auto norm : {AcNormalization::kPaper, AcNormalization::kReferenceCode}) {
      AcRouterParams params;
      params.normalization = norm;
      params.min_cluster_size = 2;
      params.clip_mult = 1.5;  // some weights clip
      for (DType f : {DType::kF32, DType::kF64}) {
        SCOPED_TRACE(std::string(norm == AcNormalization::kPaper ? "paper " : "reference code ") +
                     dtype_name(f));
        Tensor metric = Tensor::empty({experts, d}, f);
        Tensor summary = Tensor::empty({kAcSummarySize}, DType::kF64);
        const Status on_cpu = ac_metric(cpu(), params, dev, counts, metric, summary);
        ASSERT_TRUE(on_cpu.ok()) << on_cpu.to_string();
        Tensor gmetric = poisoned({experts, d}, f);
        Tensor gsummary = poisoned({kAcSummarySize}, DType::kF64);
        const Status on_gpu = ac_metric(gpu(), params, up(dev), up(counts), gmetric, gsummary);
        ASSERT_TRUE(on_gpu.ok()) << on_gpu.to_string();
        EXPECT_TRUE(testing::bitwise_equal(metric, down(gmetric)));
        EXPECT_TRUE(testing::bitwise_equal(summary, down(gsummary)));
      }
    }
  }

  std::unique_ptr<Context> gpu_;
  uint64_t seed_ = 100;
};

const DType kActs[] = {DType::kF32, DType::kBF16, DType::kF64};
// kernels/cuda/cuda_util.cuh's kThreads (that header is CUDA-only).
constexpr int64_t kThreadsPerBlockForTest = 256;

// Column blocks: copies, so bit for bit the host's (a gather, then a scatter into a poisoned
// matrix's middle columns, whose other columns keep the poison on both sides).
TEST_F(CudaKernelTest, CopyColumns) {
  for (DType dt : kActs) {
    for (auto [rows, width] : {std::pair<int64_t, int64_t>{1, 1}, {257, 96}, {1031, 384}}) {
      Tensor packed = rand({rows, 3 * width}, dt), block = Tensor::empty({rows, width}, dt);
      Tensor gblock = poisoned({rows, width}, dt);
      OK(copy_columns(cpu(), packed, width, block, 0, width));
      OK(copy_columns(gpu(), up(packed), width, gblock, 0, width));
      EXPECT_TRUE(testing::bitwise_equal(block, down(gblock))) << dtype_name(dt) << " gather";
      Tensor host_back = down(poisoned({rows, 3 * width}, dt));
      Tensor gback = up(host_back);
      OK(copy_columns(cpu(), block, 0, host_back, 2 * width, width));
      OK(copy_columns(gpu(), gblock, 0, gback, 2 * width, width));
      EXPECT_TRUE(testing::bitwise_equal(host_back, down(gback))) << dtype_name(dt) << " scatter";
    }
  }
}

TEST_F(CudaKernelTest, Elementwise) {
  for (DType dt : kActs) {
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{70001}}) {
      Tensor a = rand({n}, dt), b = rand({n}, dt);
      Tensor ga = up(a), gb = up(b), gout = poisoned({n}, dt);
      Tensor out = Tensor::empty({n}, dt);
      OK(add(cpu(), a, b, out));
      OK(add(gpu(), ga, gb, gout));
      expect_close("add", out, gout, 0);  // one rounding of the same sum: exact
      OK(scale(cpu(), a, -0.37));
      OK(scale(gpu(), ga, -0.37));
      expect_close("scale", a, ga, 0);
      // axpy across dtypes: an f32 gradient into this dtype.
      Tensor x = rand({n}, DType::kF32);
      Tensor gx = up(x);
      OK(axpy(cpu(), 0.25, x, b));
      OK(axpy(gpu(), 0.25, gx, gb));
      expect_close("axpy", b, gb, 0);
      // convert both ways through bf16.
      Tensor c = Tensor::empty({n}, DType::kBF16), gc = poisoned({n}, DType::kBF16);
      OK(convert(cpu(), a, c));
      OK(convert(gpu(), ga, gc));
      expect_close("convert", c, gc, 0);
      Tensor back = Tensor::empty({n}, dt), gback = poisoned({n}, dt);
      OK(convert(cpu(), c, back));
      OK(convert(gpu(), gc, gback));
      expect_close("convert", back, gback, 0);
    }
  }
}

TEST_F(CudaKernelTest, NonFiniteCountAndScalars) {
  for (DType dt : kActs) {
    Tensor x = rand({5, 1001}, dt);
    Tensor f = Tensor::empty(x.shape(), DType::kF64);
    OK(convert_into(x, f));
    f.data<double>()[3] = std::numeric_limits<double>::infinity();
    f.data<double>()[4000] = std::numeric_limits<double>::quiet_NaN();
    f.data<double>()[5004] = -std::numeric_limits<double>::infinity();
    OK(convert_into(f, x));
    Tensor out = Tensor::zeros({1}, DType::kF64);
    out.data<double>()[0] = 2;
    Tensor gout = up(out);
    OK(count_nonfinite(cpu(), x, out));
    OK(count_nonfinite(gpu(), up(x), gout));
    expect_close("count_nonfinite", out, gout, 0);
    EXPECT_EQ(down(gout).data<double>()[0], 5.0);
    OK(add_scalar(cpu(), out, 1.5));
    OK(add_scalar(gpu(), gout, 1.5));
    expect_close("add_scalar", out, gout, 0);
  }
}

TEST_F(CudaKernelTest, LossFreeBiasUpdate) {
  // The same loop in one GPU thread: the same doubles, so the biases are bit-identical (f32 and
  // f64) over several steps, whatever the loads.
  for (DType f : {DType::kF32, DType::kF64}) {
    Tensor bias = Tensor::zeros({37}, f);
    Tensor gbias = up(bias);
    for (int s = 0; s < 5; ++s) {
      Tensor load = Tensor::empty({37}, DType::kF64);
      for (int e = 0; e < 37; ++e) load.data<double>()[e] = (e * 7 + s * 13) % 11;
      OK(score_bias_update(cpu(), load, 1e-3, bias));
      OK(score_bias_update(gpu(), up(load), 1e-3, gbias));
    }
    expect_close("score_bias_update", bias, gbias, 0);
  }
}

TEST_F(CudaKernelTest, Optimizers) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    const Shape s{3, 333};
    Tensor p = rand(s, dt), g = rand(s, dt), m = rand(s, dt, -0.1, 0.1), v = rand(s, dt, 0, 0.1);
    Tensor gp = up(p), gg = up(g), gm = up(m), gv = up(v);
    AdamWArgs a;
    a.lr = 3e-3;
    a.weight_decay = 0.1;
    a.step = 7;
    a.grad_scale = 0.5;
    OK(adamw_step(cpu(), a, p, g, m, v));
    OK(adamw_step(gpu(), a, gp, gg, gm, gv));
    expect_close("adamw_step", p, gp);
    expect_close("adamw_step(m)", m, gm);
    expect_close("adamw_step(v)", v, gv);
    for (bool first : {true, false}) {
      SgdArgs sa;
      sa.lr = 0.1;
      sa.momentum = 0.9;
      sa.weight_decay = 0.01;
      sa.first_step = first;
      OK(sgd_step(cpu(), sa, p, g, m));
      OK(sgd_step(gpu(), sa, gp, gg, gm));
      expect_close("sgd_step", p, gp);
      expect_close("sgd_step(buf)", m, gm);
    }
    SgdArgs plain;
    plain.momentum = 0;
    OK(sgd_step(cpu(), plain, p, g, TensorView()));
    OK(sgd_step(gpu(), plain, gp, gg, TensorView()));
    expect_close("sgd_step", p, gp);
  }
  // The squared norm over views of mixed dtypes and sizes (one empty).
  Tensor x = rand({1}, DType::kF32), y = rand({100003}, DType::kF32), z = rand({77}, DType::kBF16);
  Tensor e = Tensor::empty({0}, DType::kF32);
  Tensor out = Tensor::zeros({1}, DType::kF64);
  Tensor gout = up(out);
  Tensor gx = up(x), gy = up(y), gz = up(z), ge = up(e);
  OK(sum_of_squares(cpu(), {x.view(), y.view(), z.view(), e.view()}, out));
  OK(sum_of_squares(gpu(), {gx.view(), gy.view(), gz.view(), ge.view()}, gout));
  expect_close("sum_of_squares", out, gout, 1e-13);
}

TEST_F(CudaKernelTest, Gemm) {
  struct Case {
    int64_t m, n, k;
  };
  for (DType dt : kActs) {
    for (Case c : {Case{1, 1, 1}, Case{37, 53, 29}, Case{128, 96, 200}, Case{5, 7, 0}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          Tensor a = rand(ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, dt);
          Tensor b = rand(tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, dt);
          Tensor out = rand({c.m, c.n}, dt);
          Tensor gout = up(out);
          OK(gemm(cpu(), a, ta, b, tb, out, 0.5, 1.0));  // accumulate
          OK(gemm(gpu(), up(a), ta, up(b), tb, gout, 0.5, 1.0));
          expect_close("gemm", out, gout, dt == DType::kF32 ? 1e-5 : -1);
          Tensor o2 = Tensor::empty({c.m, c.n}, dt), g2 = poisoned({c.m, c.n}, dt);
          OK(gemm(cpu(), a, ta, b, tb, o2));
          OK(gemm(gpu(), up(a), ta, up(b), tb, g2));
          expect_close("gemm", o2, g2, dt == DType::kF32 ? 1e-5 : -1);
        }
      }
    }
  }
  // bf16 operands into an f32 result (weight gradients, logits).
  Tensor a = rand({33, 70}, DType::kBF16), b = rand({70, 45}, DType::kBF16);
  Tensor out = Tensor::empty({33, 45}, DType::kF32), gout = poisoned({33, 45}, DType::kF32);
  OK(gemm(cpu(), a, false, b, false, out));
  OK(gemm(gpu(), up(a), false, up(b), false, gout));
  expect_close("gemm(bf16->f32)", out, gout, 1e-5);
}

// Blocks of R = 2 ranks x E_l = 3 experts: capacity mode with C rows and the given filled
// prefixes, or dropless with the given row offsets.
ExpertBlocks capacity_blocks(int64_t capacity, const std::vector<int32_t>& filled) {
  ExpertBlocks b;
  b.ranks = 2;
  b.local_experts = 3;
  b.capacity = capacity;
  b.filled = Tensor::from_vector<int32_t>(Shape{6}, filled);
  return b;
}
ExpertBlocks dropless_blocks(const std::vector<int64_t>& offsets) {
  ExpertBlocks b;
  b.ranks = 2;
  b.local_experts = 3;
  b.offsets = offsets;
  return b;
}

// Capacity mode: C = 5 rows, filled prefixes 5, 0, 2 / 1, 5, 3; padding rows hold zeros (as the
// dispatch writes them). Dropless: blocks of 3, 0, 2, 2, 1, 2 rows, and with empty first and
// last blocks (the single-launch bias kernel searches the offsets).
std::vector<ExpertBlocks> block_layouts() {
  return {capacity_blocks(5, {5, 0, 2, 1, 5, 3}), dropless_blocks({0, 3, 3, 5, 7, 8, 10}),
          dropless_blocks({0, 0, 4, 4, 6, 9, 9})};
}

// Zeroes the padding rows of x [rows, n] (capacity mode) on the host.
void zero_padding(const Tensor& x, const ExpertBlocks& blocks) {
  if (blocks.capacity < 0) return;
  Tensor f = Tensor::empty(x.shape(), DType::kF64);
  ASSERT_TRUE(convert_into(x, f).ok());
  const int64_t n = x.dim(1);
  for (int64_t b = 0; b < blocks.blocks(); ++b) {
    for (int64_t r = blocks.filled.data<int32_t>()[b]; r < blocks.capacity; ++r) {
      for (int64_t j = 0; j < n; ++j) f.data<double>()[(b * blocks.capacity + r) * n + j] = 0;
    }
  }
  ASSERT_TRUE(convert_into(f, x).ok());
}

ExpertBlocks on_gpu(Context& gpu, const ExpertBlocks& blocks) {
  ExpertBlocks g = blocks;
  if (blocks.filled.numel() > 0) g.filled = *gpu.upload(blocks.filled);
  return g;
}

TEST_F(CudaKernelTest, ExpertGemmsAndBlockBiases) {
  for (const ExpertBlocks& blocks : block_layouts()) {
    const ExpertBlocks gblocks = on_gpu(gpu(), blocks);
    const int64_t rows = blocks.rows(), k = 12, n = 9;
    for (DType dt : kActs) {
      const DType f = compute_dtype(dt);
      Tensor x = rand({rows, k}, dt);
      zero_padding(x, blocks);
      for (bool tw : {false, true}) {
        Tensor w = rand(tw ? Shape{3, n, k} : Shape{3, k, n}, dt);
        Tensor y = Tensor::empty({rows, n}, dt), gy = poisoned({rows, n}, dt);
        OK(expert_gemm(cpu(), x, w, tw, y, blocks));
        OK(expert_gemm(gpu(), up(x), up(w), tw, gy, gblocks));
        expect_close("expert_gemm", y, gy, dt == DType::kF32 ? 1e-5 : -1);
      }
      Tensor dy = rand({rows, n}, dt);
      zero_padding(dy, blocks);
      Tensor dw = rand({3, k, n}, f);
      Tensor gdw = up(dw);
      OK(expert_gemm_wgrad(cpu(), x, dy, dw, blocks));
      OK(expert_gemm_wgrad(gpu(), up(x), up(dy), gdw, gblocks));
      expect_close("expert_gemm_wgrad", dw, gdw, dt == DType::kF32 ? 1e-5 : -1);
      // Per-expert biases: padding rows become zero, gradients sum the used rows.
      Tensor h = rand({rows, n}, dt), bias = rand({3, n}, f);
      Tensor gh = up(h);
      OK(add_bias_blocks(cpu(), h, bias, blocks));
      OK(add_bias_blocks(gpu(), gh, up(bias), gblocks));
      expect_close("add_bias_blocks", h, gh, 0);
      Tensor db = rand({3, n}, f);
      Tensor gdb = up(db);
      Tensor g2 = rand({rows, n}, dt);
      OK(bias_grad_blocks(cpu(), g2, db, blocks));
      OK(bias_grad_blocks(gpu(), up(g2), gdb, gblocks));
      expect_close("bias_grad_blocks", db, gdb, 0);  // the same double sums in the same order
    }
  }
}

// Dropless products in one grouped cuBLAS call (MOMOE_EXPERT_GEMM=grouped) against one call per
// block (=loop, the default), at a shape with uneven blocks (one empty) whose operands are all
// 16-byte aligned: both within the GEMM bound of the CPU reference. f32 must take the grouped
// call (a wrong argument would show as a refusal); other dtypes may be refused by cuBLAS (bf16
// products with an f32 output, the weight gradient, are not in its documented list). Prints
// which path each dtype took.
TEST_F(CudaKernelTest, DroplessExpertGemmsGroupedAndOneByOne) {
  ExpertBlocks blocks;
  blocks.ranks = 2;
  blocks.local_experts = 4;
  blocks.offsets = {0, 40, 40, 157, 190, 260, 261, 333, 400};
  const int64_t rows = blocks.rows(), k = 64, n = 96;
  for (DType dt : kActs) {
    const DType f = compute_dtype(dt);
    const double tol = dt == DType::kF32 ? 1e-5 : -1;
    Tensor x = rand({rows, k}, dt), w = rand({4, k, n}, dt), dy = rand({rows, n}, dt);
    Tensor y = Tensor::empty({rows, n}, dt), dw = rand({4, k, n}, f);
    Tensor dw0 = Tensor::empty(dw.shape(), f);
    ASSERT_TRUE(convert_into(dw, dw0).ok());
    OK(expert_gemm(cpu(), x, w, false, y, blocks));
    OK(expert_gemm_wgrad(cpu(), x, dy, dw, blocks));
    for (const char* mode : {"grouped", "loop"}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + mode);
      const ExpertGemmPaths before = expert_gemm_paths();
      Tensor gy = poisoned({rows, n}, dt), gdw = up(dw0);
      Status fwd, wgrad;
      {
        const testing::ScopedEnv path("MOMOE_EXPERT_GEMM", mode);
        fwd = expert_gemm(gpu(), up(x), up(w), false, gy, blocks);
        wgrad = expert_gemm_wgrad(gpu(), up(x), up(dy), gdw, blocks);
      }
      OK(fwd);
      OK(wgrad);
      expect_close("expert_gemm (dropless)", y, gy, tol);
      expect_close("expert_gemm_wgrad (dropless)", dw, gdw, tol);
      const ExpertGemmPaths after = expert_gemm_paths();
      const int64_t grouped = after.grouped - before.grouped;
      const int64_t refused = after.refused - before.refused;
      const int64_t looped = after.looped - before.looped;
      std::printf("dropless expert GEMMs, %s, %s: %lld grouped, %lld refused, %lld one by one\n",
                  dtype_name(dt), mode, static_cast<long long>(grouped),
                  static_cast<long long>(refused), static_cast<long long>(looped));
      EXPECT_EQ(after.unaligned, before.unaligned);
      if (std::string(mode) == "loop") {
        EXPECT_EQ(looped, 3);  // the forward product's group and one per source rank's wgrad
      } else {
        EXPECT_EQ(looped, 0);
        EXPECT_EQ(grouped + refused, 3);
        if (dt == DType::kF32) {
          EXPECT_EQ(grouped, 3);
        }
      }
    }
  }
}

// Dropless blocks whose operands start off 16-byte boundaries (odd rows of width 9 in bf16) are
// never offered to the grouped call (MOMOE_EXPERT_GEMM=grouped): they run one by one, counted as
// unaligned.
TEST_F(CudaKernelTest, UnalignedDroplessBlocksRunOneByOne) {
  ExpertBlocks blocks;
  blocks.ranks = 1;
  blocks.local_experts = 3;
  blocks.offsets = {0, 3, 8, 15};
  const int64_t rows = blocks.rows(), k = 12, n = 9;
  Tensor x = rand({rows, k}, DType::kBF16), w = rand({3, k, n}, DType::kBF16);
  Tensor y = Tensor::empty({rows, n}, DType::kBF16), gy = poisoned({rows, n}, DType::kBF16);
  const ExpertGemmPaths before = expert_gemm_paths();
  const testing::ScopedEnv grouped("MOMOE_EXPERT_GEMM", "grouped");
  OK(expert_gemm(cpu(), x, w, false, y, blocks));
  OK(expert_gemm(gpu(), up(x), up(w), false, gy, blocks));
  expect_close("expert_gemm (dropless, unaligned)", y, gy);
  EXPECT_EQ(expert_gemm_paths().unaligned - before.unaligned, 1);
  EXPECT_EQ(expert_gemm_paths().grouped, before.grouped);
}

// bias_grad_blocks over blocks of several kBiasGradChunk-row chunks (full, partial, empty, one
// row; capacity with filled prefixes and dropless): the CPU's order of double sums (chunks of a
// block summed on threads of their own, then in order), so the same bits.
TEST_F(CudaKernelTest, BiasGradBlocksInChunks) {
  for (const ExpertBlocks& blocks : {capacity_blocks(600, {600, 0, 257, 256, 599, 1}),
                                     dropless_blocks({0, 300, 813, 813, 1069, 2069, 2070})}) {
    const ExpertBlocks gblocks = on_gpu(gpu(), blocks);
    for (DType dt : kActs) {
      const DType f = compute_dtype(dt);
      for (int64_t n : {int64_t{7}, int64_t{300}}) {
        SCOPED_TRACE(str_cat(dtype_name(dt), " n ", n, blocks.capacity < 0 ? " dropless" : ""));
        Tensor dy = rand({blocks.rows(), n}, dt, -2, 2), db = rand({blocks.local_experts, n}, f);
        Tensor gdb = up(db);
        OK(bias_grad_blocks(cpu(), dy, db, blocks));
        OK(bias_grad_blocks(gpu(), up(dy), gdb, gblocks));
        expect_close("bias_grad_blocks (chunks)", db, gdb, 0);
      }
    }
  }
}

// The elementwise kernels over long runs (activations, biases) load and store 16-byte words
// where every pointer is on a 16-byte boundary (and, for the biases, rows hold whole words), one
// element at a time otherwise (cuda_util.cuh's Elems): the same per-element arithmetic, so the
// two paths give the same bits, and ReLU and the biases the CPU's. Each op runs on freshly
// allocated tensors (words, with a tail of fewer than a word's elements where n is odd) and on
// the same values one element past a boundary (one at a time).
TEST_F(CudaKernelTest, ElementwiseWordsEqualOneElementAtATime) {
  // The same values as a device view one element past a 16-byte boundary (and its buffer).
  struct Shifted {
    Tensor buf;
    TensorView view;
  };
  const auto shifted = [&](const Tensor& values) {  // host or device values
    Shifted s;
    const int64_t n = values.numel();
    s.buf = poisoned({n + 1}, values.dtype());
    s.view = s.buf.view().rows(1, n + 1).reshape(values.shape());
    Tensor g = values.device().is_host() ? up(values) : Tensor(values);
    EXPECT_TRUE(convert(gpu(), g.view(), s.view).ok());
    // The two paths are taken: fresh tensors on 16-byte boundaries, the shifted view off one
    // (addresses only; nothing is read).
    const DeviceAccessScope addresses;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(g.view().raw()) % 16, 0u);
    EXPECT_NE(reinterpret_cast<uintptr_t>(s.view.raw()) % 16, 0u);
    return s;
  };
  for (DType dt : kActs) {
    const DType f = compute_dtype(dt);
    for (const auto& [m, n] : {std::pair<int64_t, int64_t>{37, 64}, {5, 24}, {3, 9}}) {
      SCOPED_TRACE(str_cat(dtype_name(dt), " ", m, " x ", n));
      Tensor x = rand({m, n}, dt, -3, 3), dy = rand({m, n}, dt);
      Tensor gx = up(x), gdy = up(dy);
      const Shifted sx = shifted(x), sdy = shifted(dy);
      for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kSilu}) {
        Tensor words = poisoned({m, n}, dt), gdx = poisoned({m, n}, dt);
        Shifted one = shifted(words), done = shifted(gdx);
        OK(activation_forward(gpu(), act, gx, words));
        OK(activation_forward(gpu(), act, sx.view, one.view));
        EXPECT_TRUE(testing::bitwise_equal(down(words), down(one.view))) << activation_name(act);
        OK(activation_backward(gpu(), act, gx, gdy, gdx));
        OK(activation_backward(gpu(), act, sx.view, sdy.view, done.view));
        EXPECT_TRUE(testing::bitwise_equal(down(gdx), down(done.view))) << activation_name(act);
        if (act == Activation::kRelu) {
          Tensor y = Tensor::empty(x.shape(), dt), dx = Tensor::empty(x.shape(), dt);
          OK(activation_forward(cpu(), act, x, y));
          OK(activation_backward(cpu(), act, x, dy, dx));
          expect_close("activation_forward(relu, words)", y, words, 0);
          expect_close("activation_backward(relu, words)", dx, gdx, 0);
        }
      }
      {
        // add, axpy (into the compute dtype), scale and convert (both ways).
        Tensor sum = poisoned({m, n}, dt), acc = up(rand({m, n}, f)), wide = poisoned({m, n}, f);
        Shifted ssum = shifted(down(sum)), sacc = shifted(down(acc)), swide = shifted(down(wide));
        OK(add(gpu(), gx, gdy, sum));
        OK(add(gpu(), sx.view, sdy.view, ssum.view));
        OK(axpy(gpu(), 0.375, gx, acc));
        OK(axpy(gpu(), 0.375, sx.view, sacc.view));
        OK(scale(gpu(), acc, -1.25));
        OK(scale(gpu(), sacc.view, -1.25));
        OK(convert(gpu(), gx, wide));
        OK(convert(gpu(), sx.view, swide.view));
        Tensor back = poisoned({m, n}, dt);
        Shifted sback = shifted(down(back));
        OK(convert(gpu(), acc, back));
        OK(convert(gpu(), sacc.view, sback.view));
        EXPECT_TRUE(testing::bitwise_equal(down(sum), down(ssum.view))) << "add";
        EXPECT_TRUE(testing::bitwise_equal(down(acc), down(sacc.view))) << "axpy, scale";
        EXPECT_TRUE(testing::bitwise_equal(down(wide), down(swide.view))) << "convert";
        EXPECT_TRUE(testing::bitwise_equal(down(back), down(sback.view))) << "convert back";
      }
      Tensor bias = rand({n}, f), gbias = up(bias);
      Shifted one = shifted(x);
      OK(add_bias(gpu(), gx, gbias));
      OK(add_bias(gpu(), one.view, gbias));
      OK(add_bias(cpu(), x, bias));
      expect_close("add_bias (words)", x, gx, 0);
      expect_close("add_bias (one at a time)", x, down(one.view), 0);
      for (const ExpertBlocks& blocks : block_layouts()) {
        Tensor h = rand({blocks.rows(), n}, dt), eb = rand({blocks.local_experts, n}, f);
        Tensor gh = up(h);
        Shifted sh = shifted(h);
        const ExpertBlocks gblocks = on_gpu(gpu(), blocks);
        OK(add_bias_blocks(gpu(), gh, up(eb), gblocks));
        OK(add_bias_blocks(gpu(), sh.view, up(eb), gblocks));
        OK(add_bias_blocks(cpu(), h, eb, blocks));
        expect_close("add_bias_blocks (words)", h, gh, 0);
        expect_close("add_bias_blocks (one at a time)", h, down(sh.view), 0);
      }
    }
  }
}

TEST_F(CudaKernelTest, ActivationsBiasesDropout) {
  for (DType dt : kActs) {
    const DType f = compute_dtype(dt);
    for (int64_t m : {int64_t{1}, int64_t{300}, int64_t{1031}}) {
      const int64_t n = 13;
      for (Activation act :
           {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh, Activation::kSilu}) {
        Tensor x = rand({m, n}, dt, -3, 3), dy = rand({m, n}, dt);
        Tensor y = Tensor::empty(x.shape(), dt), gy = poisoned(x.shape(), dt);
        Tensor gx = up(x);
        OK(activation_forward(cpu(), act, x, y));
        OK(activation_forward(gpu(), act, gx, gy));
        const std::string name = std::string("activation_forward(") + activation_name(act) + ")";
        expect_close(name, y, gy, dt == DType::kBF16 ? 4e-3 : 1e-6);
        Tensor dx = Tensor::empty(x.shape(), dt), gdx = poisoned(x.shape(), dt);
        OK(activation_backward(cpu(), act, x, dy, dx));
        OK(activation_backward(gpu(), act, gx, up(dy), gdx));
        expect_close(std::string("activation_backward(") + activation_name(act) + ")", dx, gdx,
                     dt == DType::kBF16 ? 4e-3 : 1e-6);
      }
      Tensor x = rand({m, n}, dt), bias = rand({n}, f);
      Tensor gx = up(x);
      OK(add_bias(cpu(), x, bias));
      OK(add_bias(gpu(), gx, up(bias)));
      expect_close("add_bias", x, gx, 0);
      Tensor db = rand({n}, f);
      Tensor gdb = up(db);
      OK(bias_grad(cpu(), x, db));
      OK(bias_grad(gpu(), gx, gdb));
      expect_close("bias_grad", db, gdb, f == DType::kF64 ? 1e-14 : 1e-7);
      // Dropout: the same Philox mask bit for bit, keyed by row or by key_base + row; negative
      // keys zero their row.
      CounterRng rng{7, make_stream(RngTag::kDropout, 2, 9)};
      std::vector<int64_t> keys(m);
      for (int64_t r = 0; r < m; ++r) keys[r] = (r % 7 == 3) ? -1 : 1000 + 3 * r;
      Tensor hk = Tensor::from_vector<int64_t>(Shape{m}, keys);
      for (bool keyed : {false, true}) {
        for (float p : {0.0f, 0.1f, 0.5f}) {
          Tensor y = Tensor::empty(x.shape(), dt), gy = poisoned(x.shape(), dt);
          OK(dropout_forward(cpu(), x, keyed ? hk.view() : TensorView(), 55, rng, p, y));
          Tensor gk = up(hk);
          OK(dropout_forward(gpu(), gx, keyed ? gk.view() : TensorView(), 55, rng, p, gy));
          expect_close("dropout_forward", y, gy, 0);
          Tensor dx = Tensor::empty(x.shape(), dt), gdx = poisoned(x.shape(), dt);
          OK(dropout_backward(cpu(), y, keyed ? hk.view() : TensorView(), 55, rng, p, dx));
          OK(dropout_backward(gpu(), gy, keyed ? gk.view() : TensorView(), 55, rng, p, gdx));
          expect_close("dropout_backward", dx, gdx, 0);
        }
      }
    }
  }
}

// SwiGLU: both sides evaluate the same double formula (activation_math.h) and round it once, so
// they differ only where the device's exp and the host's round differently in the last double
// bit: at most one ulp of the output dtype per element (kF32Eps, kBf16Eps relative; f64 within
// the layer tolerance). Gates far out (+-60) check the sigmoid's saturation on the device too.
TEST_F(CudaKernelTest, Swiglu) {
  for (DType dt : kActs) {
    const double bound = dt == DType::kF32 ? testing::kF32Eps : tolerance(dt);
    for (auto [m, f] : {std::pair<int64_t, int64_t>{1, 1}, {300, 13}, {1031, 64}}) {
      const double range = m == 1031 ? 60 : 4;  // the largest case saturates many gates
      Tensor x = rand({m, 2 * f}, dt, -range, range), dy = rand({m, f}, dt);
      Tensor y = Tensor::empty({m, f}, dt), gy = poisoned({m, f}, dt);
      Tensor gx = up(x);
      OK(swiglu_forward(cpu(), x, y));
      OK(swiglu_forward(gpu(), gx, gy));
      expect_close("swiglu_forward", y, gy, bound);
      Tensor dx = Tensor::empty(x.shape(), dt), gdx = poisoned(x.shape(), dt);
      OK(swiglu_backward(cpu(), x, dy, dx));
      OK(swiglu_backward(gpu(), gx, up(dy), gdx));
      expect_close("swiglu_backward", dx, gdx, bound);
    }
  }
}

// Qwen2-MoE's row gate: the same double expressions on both sides, so each value is the host's
// up to one rounding of the act dtype (a last-bit difference of exp, or of the row sum's order in
// double, can move a rounding); a bound of one epsilon on the relative L2 error. The widest case
// saturates many gates; dx is written over dy in one call (allowed: each row's sum comes first).
TEST_F(CudaKernelTest, SigmoidGate) {
  for (DType dt : kActs) {
    const DType f = compute_dtype(dt);
    const double bound = dt == DType::kF32 ? testing::kF32Eps : tolerance(dt);
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {300, 13}, {257, 1000}}) {
      const double range = n == 1000 ? 40 : 3;
      Tensor x = rand({m, n}, dt), logit = rand({m, 1}, f, -range, range), dy = rand({m, n}, dt);
      Tensor gx = up(x), glogit = up(logit);
      Tensor y = Tensor::empty({m, n}, dt), gy = poisoned({m, n}, dt);
      OK(sigmoid_gate_forward(cpu(), x, logit, y));
      OK(sigmoid_gate_forward(gpu(), gx, glogit, gy));
      expect_close("sigmoid_gate_forward", y, gy, bound);
      Tensor dx = Tensor::empty({m, n}, dt), dl = Tensor::empty({m, 1}, dt);
      Tensor gdy = up(dy), gdl = poisoned({m, 1}, dt);
      OK(sigmoid_gate_backward(cpu(), x, logit, dy, dx, dl));
      OK(sigmoid_gate_backward(gpu(), gx, glogit, gdy, gdy, gdl));
      expect_close("sigmoid_gate_backward(dx)", dx, gdy, bound);
      expect_close("sigmoid_gate_backward(dlogit)", dl, gdl, bound);
    }
  }
}

TEST_F(CudaKernelTest, LayerNorm) {
  for (DType dt : kActs) {
    const DType f = compute_dtype(dt);
    for (int64_t d : {int64_t{1}, int64_t{7}, int64_t{352}, int64_t{1000}}) {
      const int64_t n = 301;
      Tensor x = rand({n, d}, dt, -2, 3), gamma = rand({d}, f), beta = rand({d}, f);
      Tensor y = Tensor::empty(x.shape(), dt), mean = Tensor::empty({n}, f),
             rstd = Tensor::empty({n}, f);
      Tensor gx = up(x), gy = poisoned(x.shape(), dt), gmean = poisoned({n}, f),
             grstd = poisoned({n}, f), ggamma = up(gamma);
      OK(layernorm_forward(cpu(), x, gamma, beta, 1e-5, y, mean, rstd));
      OK(layernorm_forward(gpu(), gx, ggamma, up(beta), 1e-5, gy, gmean, grstd));
      expect_close("layernorm_forward", y, gy, dt == DType::kF32 ? 1e-6 : -1);
      expect_close("layernorm_forward(mean)", mean, gmean, f == DType::kF64 ? 1e-12 : 1e-6);
      expect_close("layernorm_forward(rstd)", rstd, grstd, f == DType::kF64 ? 1e-12 : 1e-6);
      Tensor dy = rand({n, d}, dt), dgamma = rand({d}, f), dbeta = rand({d}, f);
      Tensor dx = Tensor::empty(x.shape(), dt), gdx = poisoned(x.shape(), dt);
      Tensor gdgamma = up(dgamma), gdbeta = up(dbeta);
      OK(layernorm_backward(cpu(), dy, x, gamma, mean, rstd, {dx, dgamma, dbeta}));
      OK(layernorm_backward(gpu(), up(dy), gx, ggamma, up(mean), up(rstd), {gdx, gdgamma, gdbeta}));
      expect_close("layernorm_backward", dx, gdx, dt == DType::kF32 ? 1e-5 : -1);
      expect_close("layernorm_backward(dgamma)", dgamma, gdgamma, f == DType::kF64 ? 1e-12 : 1e-6);
      expect_close("layernorm_backward(dbeta)", dbeta, gdbeta, f == DType::kF64 ? 1e-12 : 1e-6);
    }
  }
}

// RMSNorm: statistics and outputs in double on both sides, rounded once, so f32 agrees to an ulp
// or two per element; also y aliasing x and dx aliasing dy on the GPU.
TEST_F(CudaKernelTest, RmsNorm) {
  for (DType dt : kActs) {
    const DType f = compute_dtype(dt);
    for (int64_t d : {int64_t{1}, int64_t{7}, int64_t{352}, int64_t{1000}}) {
      const int64_t n = 301;
      Tensor x = rand({n, d}, dt, -2, 3), gamma = rand({d}, f);
      Tensor y = Tensor::empty(x.shape(), dt), rstd = Tensor::empty({n}, f);
      Tensor gx = up(x), gy = poisoned(x.shape(), dt), grstd = poisoned({n}, f), ggamma = up(gamma);
      OK(rmsnorm_forward(cpu(), x, gamma, 1e-5, y, rstd));
      OK(rmsnorm_forward(gpu(), gx, ggamma, 1e-5, gy, grstd));
      const double f32_tol = 1e-6, stat_tol = f == DType::kF64 ? 1e-12 : 1e-6;
      expect_close("rmsnorm_forward", y, gy, dt == DType::kF32 ? f32_tol : -1);
      expect_close("rmsnorm_forward(rstd)", rstd, grstd, stat_tol);
      Tensor gxi = up(x), grstdi = poisoned({n}, f);
      OK(rmsnorm_forward(gpu(), gxi, ggamma, 1e-5, gxi, grstdi));
      expect_close("rmsnorm_forward(in place)", y, gxi, dt == DType::kF32 ? f32_tol : -1);
      Tensor dy = rand({n, d}, dt), dgamma = rand({d}, f);
      Tensor dx = Tensor::empty(x.shape(), dt), gdx = poisoned(x.shape(), dt);
      Tensor gdgamma = up(dgamma), gdgamma_i = up(dgamma), gdyi = up(dy);
      OK(rmsnorm_backward(cpu(), dy, x, gamma, rstd, {dx, dgamma}));
      OK(rmsnorm_backward(gpu(), up(dy), gx, ggamma, up(rstd), {gdx, gdgamma}));
      expect_close("rmsnorm_backward", dx, gdx, dt == DType::kF32 ? f32_tol : -1);
      expect_close("rmsnorm_backward(dgamma)", dgamma, gdgamma, stat_tol);
      OK(rmsnorm_backward(gpu(), gdyi, gx, ggamma, up(rstd), {gdyi, gdgamma_i}));
      expect_close("rmsnorm_backward(in place)", dx, gdyi, dt == DType::kF32 ? f32_tol : -1);
    }
  }
}

TEST_F(CudaKernelTest, Embedding) {
  const int64_t v = 50, d = 19, s = 8, n = 3 * s;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7) % 13);  // repeats
  Tensor hid = Tensor::from_vector<int32_t>(Shape{n}, ids);
  Tensor gid = up(hid);
  for (DType dt : kActs) {
    const DType f = compute_dtype(dt);
    for (bool widen : {false, true}) {
      if (widen && dt != DType::kBF16) continue;
      const DType wt = widen ? DType::kF32 : dt;
      Tensor table = rand({v, d}, wt), pos = rand({s + 2, d}, f);
      for (bool with_pos : {false, true}) {
        Tensor out = Tensor::empty({n, d}, dt), gout = poisoned({n, d}, dt);
        OK(embedding_forward(cpu(), hid, table, with_pos ? pos.view() : TensorView(), s, out));
        Tensor gpos = up(pos);
        OK(embedding_forward(gpu(), gid, up(table), with_pos ? gpos.view() : TensorView(), s,
                             gout));
        expect_close("embedding_forward", out, gout, 0);
      }
    }
    Tensor dout = rand({n, d}, dt), dtable = rand({v, d}, f), dpos = rand({s, d}, f);
    Tensor gdtable = up(dtable), gdpos = up(dpos);
    OK(embedding_backward(cpu(), hid, dout, dtable, dpos, s));
    OK(embedding_backward(gpu(), gid, up(dout), gdtable, gdpos, s));
    expect_close("embedding_backward", dtable, gdtable, 0);
    expect_close("embedding_backward(positions)", dpos, gdpos, 0);
  }
}

// Many tokens with a skewed id distribution: the grouping sort takes its multi-tile path (the
// small test above fits one tile), one id repeats thousands of times, ids cross block
// boundaries; every element still adds its rows in token order, so the bits equal the CPU's.
TEST_F(CudaKernelTest, EmbeddingBackwardOverManyTokens) {
  const int64_t v = 700, d = 33, s = 64, n = 320 * s;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t h = (i * 2654435761) % 1000;
    ids[i] = static_cast<int32_t>(h < 300 ? 3 : h % v);  // id 3: about 30% of the tokens
  }
  Tensor hid = Tensor::from_vector<int32_t>(Shape{n}, ids);
  for (DType dt : kActs) {
    const DType f = compute_dtype(dt);
    Tensor dout = rand({n, d}, dt), dtable = rand({v, d}, f), dpos = rand({s + 3, d}, f);
    Tensor gdtable = up(dtable), gdpos = up(dpos);
    OK(embedding_backward(cpu(), hid, dout, dtable, dpos, s));
    OK(embedding_backward(gpu(), up(hid), up(dout), gdtable, gdpos, s));
    expect_close("embedding_backward (20480 tokens)", dtable, gdtable, 0);
    expect_close("embedding_backward(positions, 20480 tokens)", dpos, gdpos, 0);
  }
}

TEST_F(CudaKernelTest, CrossEntropy) {
  for (DType f : {DType::kF32, DType::kF64}) {
    for (int64_t v : {int64_t{1}, int64_t{5}, int64_t{5003}}) {
      const int64_t n = 37;
      Tensor logits = rand({n, v}, f, -8, 8);
      std::vector<int32_t> t(n);
      for (int64_t i = 0; i < n; ++i) t[i] = i % 5 == 2 ? -1 : static_cast<int32_t>((i * 31) % v);
      Tensor ht = Tensor::from_vector<int32_t>(Shape{n}, t);
      Tensor lse = Tensor::empty({n}, f), rows = Tensor::empty({n}, f);
      Tensor sums = Tensor::zeros({2}, DType::kF64);
      Tensor glogits = up(logits), gt = up(ht), glse = poisoned({n}, f), grows = poisoned({n}, f),
             gsums = up(sums);
      OK(cross_entropy_forward(cpu(), logits, ht, lse, sums, rows));
      OK(cross_entropy_forward(gpu(), glogits, gt, glse, gsums, grows));
      const double tol = f == DType::kF64 ? 1e-13 : 1e-6;
      expect_close("cross_entropy_forward(lse)", lse, glse, tol);
      expect_close("cross_entropy_forward(row_loss)", rows, grows, tol);
      expect_close("cross_entropy_forward(sums)", sums, gsums, tol);
      for (DType dt : {f, DType::kBF16}) {
        if (dt == DType::kBF16 && f == DType::kF64) continue;
        Tensor d = Tensor::empty({n, v}, dt), gd = poisoned({n, v}, dt);
        OK(cross_entropy_backward(cpu(), logits, ht, lse, 1.0 / 30, d));
        OK(cross_entropy_backward(gpu(), glogits, gt, glse, 1.0 / 30, gd));
        expect_close("cross_entropy_backward", d, gd, dt == DType::kBF16 ? -1 : tol);
      }
    }
  }
}

// Same inputs, same GPU: bit-identical results (no atomics decide a sum).
TEST_F(CudaKernelTest, RepeatedRunsAreBitIdentical) {
  Tensor x = rand({2000, 333}, DType::kF32);
  Tensor gx = up(x);
  Tensor first;
  for (int run = 0; run < 2; ++run) {
    Tensor db = *gpu().zeros({333}, DType::kF32);
    Tensor sq = *gpu().zeros({1}, DType::kF64);
    OK(bias_grad(gpu(), gx, db));
    OK(sum_of_squares(gpu(), {gx.view()}, sq));
    Tensor both = Tensor::empty({334}, DType::kF64);
    Tensor hdb = down(db), hsq = down(sq);
    for (int j = 0; j < 333; ++j) both.data<double>()[j] = hdb.data<float>()[j];
    both.data<double>()[333] = hsq.data<double>()[0];
    if (run == 0) {
      first = std::move(both);
    } else {
      EXPECT_TRUE(testing::bitwise_equal(first, both));
    }
  }
}

TEST_F(CudaKernelTest, TopkSoftmaxAndAuxLosses) {
  for (DType f : {DType::kF32, DType::kF64}) {
    for (int64_t experts : {int64_t{1}, int64_t{8}, int64_t{61}}) {
      for (int64_t k : {int64_t{1}, int64_t{2}, experts}) {
        if (k > experts) continue;
        const int64_t tokens = 1037;
        Tensor logits = rand({tokens, experts}, f, -3, 3);
        // Exact ties: the CPU's rule (lower index first) must hold on the GPU too.
        for (int64_t t = 0; t < tokens; t += 7) {
          Tensor row = Tensor::empty({experts}, DType::kF64);
          for (int64_t e = 0; e < experts; ++e) row.data<double>()[e] = (e % 3) * 0.5;
          ASSERT_TRUE(convert_into(row, logits.view().rows(t, t + 1).reshape({experts})).ok());
        }
        Tensor idx = Tensor::empty({tokens, k}, DType::kI32), gate = Tensor::empty({tokens, k}, f),
               probs = Tensor::empty({tokens, experts}, f), lse = Tensor::empty({tokens}, f);
        Tensor gl = up(logits), gidx = poisoned({tokens, k}, DType::kI32),
               ggate = poisoned({tokens, k}, f), gprobs = poisoned({tokens, experts}, f),
               glse = poisoned({tokens}, f);
        OK(topk_softmax(cpu(), logits, idx, gate, probs, lse));
        OK(topk_softmax(gpu(), gl, gidx, ggate, gprobs, glse));
        EXPECT_TRUE(testing::bitwise_equal(idx, down(gidx))) << "top-k indices differ";
        const double tol = f == DType::kF64 ? 1e-14 : 1e-6;
        expect_close("topk_softmax(gate)", gate, ggate, tol);
        expect_close("topk_softmax(probs)", probs, gprobs, tol);
        expect_close("topk_softmax(lse)", lse, glse, tol);
        Tensor dg = rand({tokens, k}, f), dl = rand({tokens, experts}, f);
        Tensor gdl = up(dl);
        OK(topk_softmax_backward(cpu(), dg, gate, idx, dl));
        OK(topk_softmax_backward(gpu(), up(dg), ggate, gidx, gdl));
        expect_close("topk_softmax_backward", dl, gdl, tol);
        // The balance and z losses over these probabilities and a load.
        Tensor load = Tensor::empty({experts}, DType::kI64);
        for (int64_t e = 0; e < experts; ++e) load.data<int64_t>()[e] = (e * 37) % 101;
        Tensor packed = Tensor::empty({aux_packed_size(experts)}, DType::kF64);
        Tensor gpacked = poisoned({aux_packed_size(experts)}, DType::kF64);
        OK(aux_sums(cpu(), probs, lse, load, {}, tokens + 5, packed));
        OK(aux_sums(gpu(), gprobs, glse, up(load), {}, tokens + 5, gpacked));
        expect_close("aux_sums", packed, gpacked, 1e-12);
        Tensor losses = Tensor::empty({kAuxLossesSize}, DType::kF64),
               glosses = poisoned({kAuxLossesSize}, DType::kF64);
        OK(aux_losses(cpu(), packed, {k, 0.01, 0.001}, losses));
        OK(aux_losses(gpu(), gpacked, {k, 0.01, 0.001}, glosses));
        expect_close("aux_losses", losses, glosses, 1e-12);
        Tensor da = rand({tokens, experts}, f);
        Tensor gda = up(da);
        OK(aux_losses_backward(cpu(), logits, probs, packed, lse, {}, {k, 0.5, 0.25}, da));
        OK(aux_losses_backward(gpu(), gl, gprobs, gpacked, glse, {}, {k, 0.5, 0.25}, gda));
        expect_close("aux_losses_backward", da, gda, tol);
      }
    }
  }
}

// Sigmoid and softmax routing with every gate option and a selection bias, the per-sequence counts
// and the sequence-wise loss with its gradient, against the CPU. Decisions (indices, counts) bit
// for bit; values to the op's rounding (exp and sums in other orders, as above).
// Group-limited routing (64 experts in 8 groups, 3 kept, top 6) with a selection bias: the same
// experts as the CPU (the group sums are the same double expressions), gates to rounding.
TEST_F(CudaKernelTest, GroupLimitedRouting) {
  const int64_t tokens = 777, experts = 64, k = 6;
  // A group scored by the sum of its 2 best scores, or of its 3 best (node-limited: ceil(K / M)).
  for (int64_t top : {2, 3})
    for (ScoreFunction score : {ScoreFunction::kSoftmax, ScoreFunction::kSigmoid}) {
      Tensor logits = rand({tokens, experts}, DType::kF32, -3, 3);
      Tensor bias = rand({experts}, DType::kF32, -0.05, 0.05);
      RouteOptions opt, gopt;
      opt.score = gopt.score = score;
      opt.groups = gopt.groups = 8;
      opt.topk_groups = gopt.topk_groups = 3;
      opt.group_top = gopt.group_top = top;
      opt.selection_bias = bias;
      Tensor gbias = up(bias);
      gopt.selection_bias = gbias;
      Tensor idx = Tensor::empty({tokens, k}, DType::kI32),
             gate = Tensor::empty({tokens, k}, DType::kF32),
             probs = Tensor::empty({tokens, experts}, DType::kF32),
             lse = Tensor::empty({tokens}, DType::kF32);
      Tensor gidx = poisoned({tokens, k}, DType::kI32), ggate = poisoned({tokens, k}, DType::kF32),
             gprobs = poisoned({tokens, experts}, DType::kF32),
             glse = poisoned({tokens}, DType::kF32);
      OK(topk_route(cpu(), opt, logits, idx, gate, probs, lse));
      OK(topk_route(gpu(), gopt, up(logits), gidx, ggate, gprobs, glse));
      EXPECT_TRUE(testing::bitwise_equal(idx, down(gidx)))
          << "group-limited indices differ (group_top " << top << ")";
      expect_close("topk_route(groups, gate)", gate, ggate, 1e-6);
    }
}

TEST_F(CudaKernelTest, TopkRouteOptionsAndSequenceLoss) {
  for (DType f : {DType::kF32, DType::kF64}) {
    const double tol = f == DType::kF64 ? 1e-14 : 1e-6;
    for (ScoreFunction score : {ScoreFunction::kSoftmax, ScoreFunction::kSigmoid}) {
      for (bool renormalize : {true, false}) {
        const int64_t tokens = 1040, experts = 61, k = 6, sequences = 8;  // 130 tokens each
        Tensor logits = rand({tokens, experts}, f, -3, 3);
        for (int64_t t = 0; t < tokens; t += 7) {  // exact ties: lower index first on both
          Tensor row = Tensor::empty({experts}, DType::kF64);
          for (int64_t e = 0; e < experts; ++e) row.data<double>()[e] = (e % 3) * 0.5;
          ASSERT_TRUE(convert_into(row, logits.view().rows(t, t + 1).reshape({experts})).ok());
        }
        Tensor bias = rand({experts}, f, -0.05, 0.05);
        Tensor gbias = up(bias);
        RouteOptions opt, gopt;
        opt.score = gopt.score = score;
        opt.renormalize = gopt.renormalize = renormalize;
        opt.scaling = gopt.scaling = 2.5;
        opt.selection_bias = bias;
        gopt.selection_bias = gbias;
        const std::string what = str_cat(score == ScoreFunction::kSigmoid ? "sigmoid" : "softmax",
                                         renormalize ? " renormalised" : "");
        Tensor idx = Tensor::empty({tokens, k}, DType::kI32), gate = Tensor::empty({tokens, k}, f),
               probs = Tensor::empty({tokens, experts}, f), lse = Tensor::empty({tokens}, f);
        Tensor gl = up(logits), gidx = poisoned({tokens, k}, DType::kI32),
               ggate = poisoned({tokens, k}, f), gprobs = poisoned({tokens, experts}, f),
               glse = poisoned({tokens}, f);
        OK(topk_route(cpu(), opt, logits, idx, gate, probs, lse));
        OK(topk_route(gpu(), gopt, gl, gidx, ggate, gprobs, glse));
        EXPECT_TRUE(testing::bitwise_equal(idx, down(gidx))) << what << ": indices differ";
        expect_close("topk_route(gate) " + what, gate, ggate, tol);
        expect_close("topk_route(probs) " + what, probs, gprobs, tol);
        expect_close("topk_route(lse) " + what, lse, glse, tol);
        Tensor dg = rand({tokens, k}, f), dl = rand({tokens, experts}, f);
        Tensor gdl = up(dl);
        OK(topk_route_backward(cpu(), opt, logits, dg, gate, idx, dl));
        OK(topk_route_backward(gpu(), gopt, gl, up(dg), ggate, gidx, gdl));
        expect_close("topk_route_backward " + what, dl, gdl, tol);

        Tensor counts = Tensor::empty({sequences, experts}, DType::kI64);
        Tensor gcounts = poisoned({sequences, experts}, DType::kI64);
        OK(sequence_counts(cpu(), idx, counts));
        OK(sequence_counts(gpu(), gidx, gcounts));
        EXPECT_TRUE(testing::bitwise_equal(counts, down(gcounts))) << what << ": counts differ";
        Tensor load = Tensor::empty({experts}, DType::kI64);
        for (int64_t e = 0; e < experts; ++e) load.data<int64_t>()[e] = (e * 37) % 101;
        Tensor packed = Tensor::empty({aux_packed_size(experts)}, DType::kF64);
        Tensor gpacked = poisoned({aux_packed_size(experts)}, DType::kF64);
        OK(aux_sums(cpu(), probs, lse, load, counts, tokens, packed));
        OK(aux_sums(gpu(), gprobs, glse, up(load), gcounts, tokens, gpacked));
        expect_close("aux_sums(sequences) " + what, packed, gpacked, 1e-12);
        const AuxLossWeights w{k, 0.01, 0.001, 0.3, score};
        Tensor losses = Tensor::empty({kAuxLossesSize}, DType::kF64),
               glosses = poisoned({kAuxLossesSize}, DType::kF64);
        OK(aux_losses(cpu(), packed, w, losses));
        OK(aux_losses(gpu(), gpacked, w, glosses));
        expect_close("aux_losses(sequences) " + what, losses, glosses, 1e-12);
        Tensor da = rand({tokens, experts}, f);
        Tensor gda = up(da);
        OK(aux_losses_backward(cpu(), logits, probs, packed, lse, counts, w, da));
        OK(aux_losses_backward(gpu(), gl, gprobs, gpacked, glse, gcounts, w, gda));
        expect_close("aux_losses_backward(sequences) " + what, da, gda, tol);
      }
    }
  }
}

TEST_F(CudaKernelTest, SparseMixerRouteAndBackward) {
  for (DType f : {DType::kF32, DType::kF64}) {
    for (auto mask : {SparseMixerMask::kPaper, SparseMixerMask::kReferenceCode}) {
      for (auto midpoint : {SparseMixerMidpoint::kPaper, SparseMixerMidpoint::kReferenceCode}) {
        for (bool training : {false, true}) {
          const int64_t tokens = 999, experts = 16;
          Tensor logits = rand({tokens, experts}, f, -2, 2);
          SparseMixerRouteArgs a;
          a.params.jitter = 0.3;
          a.params.mask = mask;
          a.params.midpoint = midpoint;
          a.training = training;
          a.rng = CounterRng{17, make_stream(RngTag::kSparseMixer, 1, 4)};
          a.token_offset = 123;
          Tensor idx = Tensor::empty({tokens, 1}, DType::kI32),
                 gate = Tensor::empty({tokens, 1}, f), probs = Tensor::empty({tokens, experts}, f),
                 lse = Tensor::empty({tokens}, f), m = Tensor::empty({tokens, experts}, DType::kU8),
                 sc = Tensor::empty({tokens}, f), am = Tensor::empty({tokens}, DType::kU8);
          Tensor gidx = poisoned({tokens, 1}, DType::kI32), ggate = poisoned({tokens, 1}, f),
                 gprobs = poisoned({tokens, experts}, f), glse = poisoned({tokens}, f),
                 gm = poisoned({tokens, experts}, DType::kU8), gsc = poisoned({tokens}, f),
                 gam = poisoned({tokens}, DType::kU8);
          OK(sparsemixer_route(cpu(), a, logits, {idx, gate, probs, lse, m, sc, am}));
          OK(sparsemixer_route(gpu(), a, up(logits), {gidx, ggate, gprobs, glse, gm, gsc, gam}));
          // The same Philox draws: the same samples, masks and halvings (the Gumbel noise is
          // computed in float by each side's logf, so a sample may differ only on an exact tie
          // of perturbed logits to the last bit: none in these draws).
          EXPECT_TRUE(testing::bitwise_equal(idx, down(gidx))) << "samples differ";
          EXPECT_TRUE(testing::bitwise_equal(m, down(gm))) << "masks differ";
          EXPECT_TRUE(testing::bitwise_equal(am, down(gam)));
          const double tol = f == DType::kF64 ? 1e-14 : 1e-6;
          expect_close("sparsemixer_route(gate)", gate, ggate, tol);
          expect_close("sparsemixer_route(probs)", probs, gprobs, tol);
          expect_close("sparsemixer_route(scale)", sc, gsc, 0);
          for (auto rule : {SparseMixerGateGrad::kReferenceCode, SparseMixerGateGrad::kPaper}) {
            Tensor dg = rand({tokens, 1}, f), dl = rand({tokens, experts}, f);
            Tensor gdl = up(dl);
            OK(sparsemixer_backward(cpu(), rule, dg, idx, probs, m, sc, dl));
            OK(sparsemixer_backward(gpu(), rule, up(dg), gidx, gprobs, gm, gsc, gdl));
            expect_close("sparsemixer_backward", dl, gdl, tol);
          }
        }
      }
    }
  }
}

// Routing indices with skew (expert 0 popular) so that capacity drops happen.
Tensor skewed_idx(int64_t tokens, int64_t k, int64_t experts, uint64_t seed) {
  Tensor idx = Tensor::empty({tokens, k}, DType::kI32);
  CounterRng rng{seed, make_stream(RngTag::kTest, 7, 0)};
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      int32_t e;
      do {
        const uint32_t u = rng.u32(t * 16 + j * 4 + 0) ^ rng.u32(t * 16 + j * 4 + 1, 1);
        e = (u % 3 == 0) ? 0 : static_cast<int32_t>(u % experts);
        rng.seed += 1;
      } while ([&] {
        for (int64_t q = 0; q < j; ++q) {
          if (idx.data<int32_t>()[t * k + q] == e) return true;
        }
        return false;
      }());
      idx.data<int32_t>()[t * k + j] = e;
    }
  }
  return idx;
}

TEST_F(CudaKernelTest, LayoutGathersAndCombine) {
  struct Case {
    int64_t tokens, k, experts, capacity;
  };
  for (Case c : {Case{1, 1, 1, 1}, Case{300, 2, 8, 90}, Case{1000, 2, 8, -1}, Case{777, 4, 16, 0},
                 Case{513, 3, 5, 200}}) {
    if (c.k > c.experts) continue;
    Tensor idx = skewed_idx(c.tokens, c.k, c.experts, static_cast<uint64_t>(c.tokens));
    LayoutArgs a;
    a.num_experts = c.experts;
    a.capacity = c.capacity;
    a.token_offset = 40;
    const int64_t send = c.capacity >= 0 ? c.experts * c.capacity : c.tokens * c.k;
    const Shape tk{c.tokens, c.k};
    Tensor slot = Tensor::empty(tk, DType::kI32), row = Tensor::empty(tk, DType::kI32),
           load = Tensor::empty({c.experts}, DType::kI64),
           kept = Tensor::empty({c.experts}, DType::kI64), st = Tensor::empty({send}, DType::kI32),
           sk = Tensor::empty({send}, DType::kI64), drops = Tensor::zeros({2}, DType::kF64);
    Tensor gslot = poisoned(tk, DType::kI32), grow = poisoned(tk, DType::kI32),
           gload = poisoned({c.experts}, DType::kI64), gkept = poisoned({c.experts}, DType::kI64),
           gst = poisoned({send}, DType::kI32), gsk = poisoned({send}, DType::kI64),
           gdrops = up(drops);
    OK(moe_layout(cpu(), a, idx, {slot, row, load, kept, st, sk, drops}));
    OK(moe_layout(gpu(), a, up(idx), {gslot, grow, gload, gkept, gst, gsk, gdrops}));
    for (auto [name, h, g] : {std::tuple<const char*, Tensor*, Tensor*>{"slot", &slot, &gslot},
                              {"row", &row, &grow},
                              {"load", &load, &gload},
                              {"kept", &kept, &gkept},
                              {"send_token", &st, &gst},
                              {"send_key", &sk, &gsk},
                              {"drops", &drops, &gdrops}}) {
      EXPECT_TRUE(testing::bitwise_equal(*h, down(*g)))
          << "moe_layout " << name << ", T " << c.tokens << " C " << c.capacity;
    }
    if (c.capacity > 0) {
      TensorView keys = sk.view().reshape({c.experts, c.capacity});
      Tensor filled = Tensor::empty({c.experts}, DType::kI32),
             gf = poisoned({c.experts}, DType::kI32);
      OK(block_fill_counts(cpu(), keys, filled));
      OK(block_fill_counts(gpu(), gsk.view().reshape({c.experts, c.capacity}), gf));
      EXPECT_TRUE(testing::bitwise_equal(filled, down(gf)));
    }
    for (DType dt : kActs) {
      const DType f = compute_dtype(dt);
      for (int64_t d : {int64_t{1}, int64_t{13}, int64_t{64}}) {
        // Dispatch: gather token rows into the send buffer (empty slots zero).
        Tensor x = rand({c.tokens, d}, dt);
        Tensor sendb = Tensor::empty({send, d}, dt), gsend = poisoned({send, d}, dt);
        OK(gather_rows(cpu(), x, st, sendb));
        OK(gather_rows(gpu(), up(x), gst, gsend));
        expect_close("gather_rows", sendb, gsend, 0);
        // Its backward: each token sums its K rows.
        Tensor g = rand({send, d}, dt);
        Tensor sum = Tensor::empty({c.tokens, d}, dt), gsum = poisoned({c.tokens, d}, dt);
        OK(gather_sum_rows(cpu(), g, row, sum));
        OK(gather_sum_rows(gpu(), up(g), grow, gsum));
        expect_close("gather_sum_rows", sum, gsum, dt == DType::kBF16 ? -1 : 1e-7);
        // Combine with and without omega, and its backward.
        Tensor y = rand({send, d}, dt), gate = rand(tk, f, 0, 1), omega = rand({d}, f, 0.5, 1.5);
        Tensor gy = up(y), ggate = up(gate), gomega = up(omega);
        for (bool with_omega : {false, true}) {
          const TensorView w = with_omega ? omega.view() : TensorView();
          const TensorView gw = with_omega ? gomega.view() : TensorView();
          Tensor u = Tensor::empty({c.tokens, d}, dt), gu = poisoned({c.tokens, d}, dt);
          OK(combine(cpu(), y, row, gate, w, u));
          OK(combine(gpu(), gy, grow, ggate, gw, gu));
          expect_close("combine", u, gu, dt == DType::kBF16 ? -1 : 1e-6);
          Tensor du = rand({c.tokens, d}, dt);
          Tensor dy = Tensor::empty({send, d}, dt), gdy = poisoned({send, d}, dt);
          Tensor dg = Tensor::empty(tk, f), gdg = poisoned(tk, f);
          Tensor dw = rand({d}, f), gdw = up(dw);
          OK(combine_backward(cpu(), du, y, row, gate, w,
                              {dy, dg, with_omega ? dw.view() : TensorView()}));
          OK(combine_backward(gpu(), up(du), gy, grow, ggate, gw,
                              {gdy, gdg, with_omega ? gdw.view() : TensorView()}));
          expect_close("combine_backward(dy)", dy, gdy, dt == DType::kBF16 ? -1 : 1e-6);
          expect_close("combine_backward(d_gate)", dg, gdg, f == DType::kF64 ? 1e-12 : 1e-5);
          // The same terms summed in the same chunked order: the same bits.
          if (with_omega) expect_close("combine_backward(d_omega)", dw, gdw, 0);
        }
      }
    }
  }
}

// The deduplicated layout from every rank's point of view, on the CPU layout's rows: unique rows,
// counts, send indices and counters equal the CPU's exactly (integers; the counters are sums of
// integers in double). Several scan tiles (T > 256), one token, one rank, K > R.
// A step kept in device memory (base/rng.h DeviceStep: what a CUDA graph of the training step
// reads as it runs) draws on the GPU what the CPU draws with the step on the host and offsets
// that include the step's sequences: dropout masks (token keys), attention's mask (sequence
// keys) and the dispatch layout's keys, bit for bit.
TEST_F(CudaKernelTest, DeviceStepDrawsLikeTheHostStep) {
  constexpr int64_t kStep = 9, kFirstSequence = 4, kSeq = 37;
  Tensor keys = up(Tensor::from_vector<int64_t>({2}, {kStep, kFirstSequence}));
  StatusOr<DeviceStep> step = device_step(gpu(), keys);
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  const CounterRng host{7, make_stream(RngTag::kDropout, 2, kStep)};
  CounterRng device{7, make_stream(RngTag::kDropout, 2, 0)};
  device.device_step = *step;
  for (DType dt : kActs) {
    // Dropout keyed by token: key_base 55 on the device, 55 + 4 x 37 on the host.
    device.keys_per_sequence = kSeq;
    Tensor x = rand({300, 13}, dt);
    Tensor y = Tensor::empty(x.shape(), dt), gy = poisoned(x.shape(), dt);
    OK(dropout_forward(cpu(), x, {}, 55 + kFirstSequence * kSeq, host, 0.3f, y));
    OK(dropout_forward(gpu(), up(x), {}, 55, device, 0.3f, gy));
    expect_close("dropout_forward(device step)", y, gy, 0);
    // Attention's mask keyed by sequence (the GEMM path).
    const testing::ScopedEnv gemm_path("MOMOE_ATTENTION", "gemm");
    device.keys_per_sequence = 1;
    const AttentionArgs ha{2, kSeq, 3, 0.25f, host, 5 + kFirstSequence};
    const AttentionArgs da{2, kSeq, 3, 0.25f, device, 5};
    const int64_t rows = 2 * kSeq, d = 3 * 8;
    Tensor qkv = rand({rows, 3 * d}, dt, -1.5, 1.5);
    Tensor out = Tensor::empty({rows, d}, dt), gout = poisoned({rows, d}, dt);
    const DType f = compute_dtype(dt);
    Tensor lse = Tensor::empty({2, 3, kSeq}, f), glse = poisoned({2, 3, kSeq}, f);
    OK(attention_forward(cpu(), ha, qkv, out, lse));
    OK(attention_forward(gpu(), da, up(qkv), gout, glse));
    expect_close("attention_forward(device step)", out, gout,
                 dt == DType::kBF16 ? -1 : (dt == DType::kF64 ? 1e-12 : 1e-5));
  }
  // The layout's keys: token 0 is 40 + 4 x 37 on the host, 40 moved by the device step.
  Tensor idx = skewed_idx(300, 2, 8, 3);
  LayoutArgs ha(8, 90, 40 + kFirstSequence * kSeq), da(8, 90, 40);
  da.device_step = *step;
  da.tokens_per_sequence = kSeq;
  const int64_t send = 8 * 90;
  Tensor slot = Tensor::empty({300, 2}, DType::kI32), row = Tensor::empty({300, 2}, DType::kI32),
         load = Tensor::empty({8}, DType::kI64), kept = Tensor::empty({8}, DType::kI64),
         st = Tensor::empty({send}, DType::kI32), sk = Tensor::empty({send}, DType::kI64);
  Tensor gslot = poisoned({300, 2}, DType::kI32), grow = poisoned({300, 2}, DType::kI32),
         gload = poisoned({8}, DType::kI64), gkept = poisoned({8}, DType::kI64),
         gst = poisoned({send}, DType::kI32), gsk = poisoned({send}, DType::kI64);
  OK(moe_layout(cpu(), ha, idx, {slot, row, load, kept, st, sk, {}}));
  OK(moe_layout(gpu(), da, up(idx), {gslot, grow, gload, gkept, gst, gsk, {}}));
  EXPECT_TRUE(testing::bitwise_equal(sk, down(gsk))) << "moe_layout send_key (device step)";
}

TEST_F(CudaKernelTest, DedupLayout) {
  struct Case {
    int64_t tokens, k, experts, capacity, ranks;
  };
  for (Case c : {Case{1, 1, 2, 1, 2}, Case{300, 2, 8, 90, 4}, Case{1000, 4, 16, -1, 8},
                 Case{777, 4, 16, 0, 2}, Case{513, 3, 6, 200, 3}, Case{20, 2, 4, -1, 1},
                 Case{1025, 6, 8, -1, 4}}) {
    Tensor idx = skewed_idx(c.tokens, c.k, c.experts, static_cast<uint64_t>(c.tokens) + 9);
    const int64_t send = c.capacity >= 0 ? c.experts * c.capacity : c.tokens * c.k;
    const Shape tk{c.tokens, c.k};
    Tensor slot = Tensor::empty(tk, DType::kI32), row = Tensor::empty(tk, DType::kI32),
           load = Tensor::empty({c.experts}, DType::kI64),
           kept = Tensor::empty({c.experts}, DType::kI64), st = Tensor::empty({send}, DType::kI32),
           sk = Tensor::empty({send}, DType::kI64);
    OK(moe_layout(cpu(), {c.experts, c.capacity, 0}, idx, {slot, row, load, kept, st, sk, {}}));
    const Tensor gidx = up(idx), grow = up(row);
    const int64_t unique = c.tokens * std::min(c.k, c.ranks - 1);
    for (int64_t rank = 0; rank < c.ranks; ++rank) {
      const DedupArgs a{c.experts, c.capacity, c.ranks, rank};
      Tensor ut = Tensor::empty({unique}, DType::kI32), uc = Tensor::empty({c.ranks}, DType::kI64),
             su = Tensor::empty({send}, DType::kI32), stats = Tensor::zeros({2}, DType::kF64);
      stats.data<double>()[0] = 5;  // accumulated, not overwritten
      Tensor gut = poisoned({unique}, DType::kI32), guc = poisoned({c.ranks}, DType::kI64),
             gsu = poisoned({send}, DType::kI32), gstats = up(stats);
      OK(moe_dedup_layout(cpu(), a, idx, row, {ut, uc, su, stats}));
      OK(moe_dedup_layout(gpu(), a, gidx, grow, {gut, guc, gsu, gstats}));
      for (auto [name, h, g] : {std::tuple<const char*, Tensor*, Tensor*>{"uniq_token", &ut, &gut},
                                {"uniq_counts", &uc, &guc},
                                {"send_uniq", &su, &gsu},
                                {"stats", &stats, &gstats}}) {
        EXPECT_TRUE(testing::bitwise_equal(*h, down(*g)))
            << "moe_dedup_layout " << name << ", T " << c.tokens << " K " << c.k << " C "
            << c.capacity << " R " << c.ranks << " rank " << rank;
      }
    }
  }
}

TEST_F(CudaKernelTest, ResidualDynamics) {
  std::vector<ResidualArgs> forms(5);
  forms[1].form = ResidualForm::kMomentum;
  forms[1].a_state = 0.7;
  forms[1].a_out = 1.3;
  forms[2] = forms[1];
  forms[2].a_input = 1.3;
  forms[2].a_out = -1;
  forms[3].form = ResidualForm::kAdam;
  forms[3].a_state = 0.7;
  forms[3].kappa = 0.2;
  forms[3].gamma = 0.8;
  forms[4] = forms[3];
  forms[4].eps_inside_sqrt = true;
  forms[4].kappa = 1;
  forms[4].adam_sign = -1;
  const Shape s{37, 19};
  for (DType dt : kActs) {
    const DType f = compute_dtype(dt);
    for (const ResidualArgs& a : forms) {
      const bool adam = a.form == ResidualForm::kAdam;
      for (bool with_state : {false, true}) {
        Tensor x = rand(s, dt), u = rand(s, dt), p = rand(s, f), m = rand(s, f),
               v = rand(s, f, 0, 0.5);
        Tensor gx = up(x), gu = up(u), gp = up(p), gm = up(m), gv = up(v);
        auto opt = [&](const Tensor& t) { return with_state ? t.view() : TensorView(); };
        auto adam_only = [&](const Tensor& t) { return adam ? t.view() : TensorView(); };
        Tensor out = Tensor::empty(s, dt), pout = Tensor::empty(s, f), mout = Tensor::empty(s, f),
               vout = Tensor::empty(s, f);
        Tensor gout = poisoned(s, dt), gpout = poisoned(s, f), gmout = poisoned(s, f),
               gvout = poisoned(s, f);
        OK(residual_forward(cpu(), a, x, u,
                            {opt(p), adam ? opt(m) : TensorView(), adam ? opt(v) : TensorView()},
                            out, {pout, adam_only(mout), adam_only(vout)}));
        OK(residual_forward(gpu(), a, gx, gu,
                            {opt(gp), adam ? opt(gm) : TensorView(), adam ? opt(gv) : TensorView()},
                            gout, {gpout, adam_only(gmout), adam_only(gvout)}));
        const double tol = dt == DType::kBF16 ? -1 : (dt == DType::kF64 ? 1e-14 : 1e-7);
        expect_close("residual_forward", out, gout, tol);
        expect_close("residual_forward(p)", pout, gpout, f == DType::kF64 ? 1e-14 : 1e-7);
        Tensor dout = rand(s, dt), dp = rand(s, f), dm = rand(s, f), dv = rand(s, f);
        Tensor dx = Tensor::empty(s, dt), du = Tensor::empty(s, dt), dpi = Tensor::empty(s, f),
               dmi = Tensor::empty(s, f), dvi = Tensor::empty(s, f);
        Tensor gdx = poisoned(s, dt), gdu = poisoned(s, dt), gdpi = poisoned(s, f),
               gdmi = poisoned(s, f), gdvi = poisoned(s, f);
        Tensor gdp = up(dp), gdm = up(dm), gdv = up(dv);
        OK(residual_backward(
            cpu(), a, dout, {opt(dp), adam ? opt(dm) : TensorView(), adam ? opt(dv) : TensorView()},
            u, {{}, adam_only(mout), adam_only(vout)},
            {dx, du, {dpi, adam_only(dmi), adam_only(dvi)}}));
        OK(residual_backward(
            gpu(), a, up(dout),
            {opt(gdp), adam ? opt(gdm) : TensorView(), adam ? opt(gdv) : TensorView()}, gu,
            {{}, adam_only(gmout), adam_only(gvout)},
            {gdx, gdu, {gdpi, adam_only(gdmi), adam_only(gdvi)}}));
        expect_close("residual_backward(dx)", dx, gdx, tol);
        expect_close("residual_backward(du)", du, gdu, dt == DType::kBF16 ? -1 : 1e-6);
        expect_close("residual_backward(dp)", dpi, gdpi, f == DType::kF64 ? 1e-14 : 1e-7);
      }
    }
    Tensor x = rand(s, dt), p = rand(s, f);
    Tensor y = Tensor::empty(s, dt), gy = poisoned(s, dt);
    OK(residual_shift_input(cpu(), x, p, 0.35, y));
    OK(residual_shift_input(gpu(), up(x), up(p), 0.35, gy));
    expect_close("residual_shift_input", y, gy, 0);
  }
}

TEST_F(CudaKernelTest, RouterAndLayerStatistics) {
  for (DType f : {DType::kF32, DType::kF64}) {
    const int64_t tokens = 1003, experts = 12;
    Tensor logits = rand({tokens, experts}, f, -2, 2);
    Tensor idx = Tensor::empty({tokens, 2}, DType::kI32), gate = Tensor::empty({tokens, 2}, f),
           probs = Tensor::empty({tokens, experts}, f), lse = Tensor::empty({tokens}, f);
    OK(topk_softmax(cpu(), logits, idx, gate, probs, lse));
    Tensor gprobs = up(probs), ggate = up(gate);
    Tensor out = Tensor::zeros({8}, DType::kF64);
    out.data<double>()[0] = 3;  // statistics accumulate
    Tensor gout = up(out);
    OK(entropy_sum(cpu(), probs, out.view().rows(0, 1)));
    OK(entropy_sum(gpu(), gprobs, gout.view().rows(0, 1)));
    OK(column_sum(cpu(), gate, 1, out.view().rows(1, 2)));
    OK(column_sum(gpu(), ggate, 1, gout.view().rows(1, 2)));
    for (DType dt : kActs) {
      Tensor x = rand({tokens, 33}, dt);
      OK(row_norm_sum(cpu(), x, out.view().rows(2, 3)));
      OK(row_norm_sum(gpu(), up(x), gout.view().rows(2, 3)));
    }
    Tensor shifted = Tensor::empty({tokens * 2}, DType::kI32);
    for (int64_t i = 0; i < tokens * 2; ++i) {
      shifted.data<int32_t>()[i] = idx.data<int32_t>()[i] + (i % 5 == 0 ? 1 : 0);
    }
    OK(count_mismatches(cpu(), idx.view().reshape({tokens * 2}), shifted, out.view().rows(3, 4)));
    OK(count_mismatches(gpu(), up(idx).view().reshape({tokens * 2}), up(shifted),
                        gout.view().rows(3, 4)));
    Tensor counts = Tensor::empty({4}, DType::kI64);
    for (int i = 0; i < 4; ++i) counts.data<int64_t>()[i] = 7 * i + 1;
    OK(accumulate_counts(cpu(), counts, out.view().rows(4, 8)));
    OK(accumulate_counts(gpu(), up(counts), gout.view().rows(4, 8)));
    expect_close("router statistics", out, gout, 1e-13);
    // SparseMixer's statistics from a training route.
    SparseMixerRouteArgs a;
    a.params.jitter = 0.3;
    a.rng = CounterRng{3, make_stream(RngTag::kSparseMixer, 0, 1)};
    Tensor i1 = Tensor::empty({tokens, 1}, DType::kI32), g1 = Tensor::empty({tokens, 1}, f),
           p1 = Tensor::empty({tokens, experts}, f), l1 = Tensor::empty({tokens}, f),
           m1 = Tensor::empty({tokens, experts}, DType::kU8), s1 = Tensor::empty({tokens}, f),
           a1 = Tensor::empty({tokens}, DType::kU8);
    OK(sparsemixer_route(cpu(), a, logits, {i1, g1, p1, l1, m1, s1, a1}));
    Tensor sm = Tensor::zeros({4}, DType::kF64), gsm = up(sm);
    OK(sparsemixer_stats(cpu(), m1, a1, s1, sm));
    OK(sparsemixer_stats(gpu(), up(m1), up(a1), up(s1), gsm));
    expect_close("sparsemixer_stats", sm, gsm, 0);
  }
}

// The GEMM path in the compute dtype (MOMOE_ATTENTION=gemm), every dtype, against the CPU
// reference.
TEST_F(CudaKernelTest, CausalAttention) {
  const testing::ScopedEnv gemm_path("MOMOE_ATTENTION", "gemm");
  using Case = AttentionCase;
  for (DType dt : kActs) {
    const DType f = compute_dtype(dt);
    for (Case c : {Case{1, 1, 1, 4, 0.f}, Case{2, 37, 3, 8, 0.f}, Case{3, 64, 4, 16, 0.1f},
                   Case{1, 130, 2, 5, 0.25f}}) {
      const AttentionArgs a = c.args();
      const int64_t rows = c.batch * c.seq, d = c.heads * c.head_dim;
      Tensor qkv = rand({rows, 3 * d}, dt, -1.5, 1.5);
      Tensor out = Tensor::empty({rows, d}, dt), gout = poisoned({rows, d}, dt);
      Tensor lse = Tensor::empty({c.batch, c.heads, c.seq}, f),
             glse = poisoned({c.batch, c.heads, c.seq}, f);
      Tensor gqkv = up(qkv);
      OK(attention_forward(cpu(), a, qkv, out, lse));
      OK(attention_forward(gpu(), a, gqkv, gout, glse));
      const double tol = dt == DType::kBF16 ? -1 : (dt == DType::kF64 ? 1e-12 : 1e-5);
      expect_close("attention_forward", out, gout, tol);
      expect_close("attention_forward(lse)", lse, glse, f == DType::kF64 ? 1e-12 : 1e-6);
      Tensor dout = rand({rows, d}, dt);
      Tensor dqkv = Tensor::empty({rows, 3 * d}, dt), gdqkv = poisoned({rows, 3 * d}, dt);
      OK(attention_backward(cpu(), a, dout, qkv, out, lse, dqkv));
      OK(attention_backward(gpu(), a, up(dout), gqkv, gout, glse, gdqkv));
      expect_close("attention_backward", dqkv, gdqkv, tol);
    }
  }
}

// The bf16 paths that round P and dS to bf16 before their products (kernels/attention.h's
// cuda_attention): the fused kernels (MOMOE_ATTENTION=fused; kernels/cuda/flash_attention.cu)
// and the GEMM path on bf16 operands (=gemm-bf16; kernels/cuda/attention_bf16.cu), each against
// the exact values of the same inputs, entry by entry within the bound derived from those
// roundings (tests/testing/attention_bound.h; attention_bound_test shows on the host that an
// emulation of this arithmetic lies inside it). Shapes: one position; partial tiles; every
// padded head width of the fused kernels (5 -> 32, 33 -> 64, 128); several query tiles (S 200:
// the diagonal and the tiles below it); dropout; and for the GEMM path a head wider than the
// fused kernels take (160). Every entry is checked, so a head that wrote into its padding or
// its neighbour's columns would show. Then bitwise: the same calls twice give the same bits.
TEST_F(CudaKernelTest, Bf16RoundingAttentionWithinDerivedBound) {
  for (const char* path : {"fused", "gemm-bf16"}) {
    SCOPED_TRACE(path);
    const testing::ScopedEnv attention("MOMOE_ATTENTION", path);
    expect_attention_within_bound(path);
  }
}

// RoPE: both backends form each element in double from the same F-rounded cos and sin in the
// same order, so they differ only where the device's pow, cos or sin (a few ulps, CUDA's
// documented bounds) differ from glibc's: for f32 and bf16 at most one F ulp of a table entry,
// inside the default bounds; for f64 the angle (< S) off by a few ulps moves each element by
// <= S * 8 eps (relative to the pair's norm). In place gives the out-of-place bits.
TEST_F(CudaKernelTest, Rope) {
  struct Case {
    int64_t batch, seq, heads, head_dim;
  };
  for (DType dt : kActs) {
    for (Case c :
         {Case{1, 1, 1, 2}, Case{2, 37, 3, 8}, Case{3, 130, 4, 64}, Case{1, 2048, 2, 128}}) {
      const RopeArgs a{c.batch, c.seq, c.heads, 10000.0};
      const int64_t rows = c.batch * c.seq, d = c.heads * c.head_dim;
      const double tol = dt == DType::kF64 ? 8 * static_cast<double>(c.seq) * testing::kF64Eps : -1;
      Tensor qkv = rand({rows, 3 * d}, dt, -1.5, 1.5);
      Tensor out = Tensor::empty({rows, 3 * d}, dt), gout = poisoned({rows, 3 * d}, dt);
      Tensor gqkv = up(qkv);
      OK(rope_forward(cpu(), a, qkv, out));
      OK(rope_forward(gpu(), a, gqkv, gout));
      expect_close("rope_forward", out, gout, tol);
      OK(rope_forward(gpu(), a, gqkv, gqkv));
      expect_close("rope_forward(in place)", down(gout), gqkv, 0);
      Tensor dout = rand({rows, 3 * d}, dt);
      Tensor dqkv = Tensor::empty({rows, 3 * d}, dt), gdqkv = poisoned({rows, 3 * d}, dt);
      Tensor gdout = up(dout);
      OK(rope_backward(cpu(), a, dout, dqkv));
      OK(rope_backward(gpu(), a, gdout, gdqkv));
      expect_close("rope_backward", dqkv, gdqkv, tol);
      OK(rope_backward(gpu(), a, gdout, gdout));
      expect_close("rope_backward(in place)", down(gdqkv), gdout, 0);
    }
  }
}

TEST_F(CudaKernelTest, AdaptiveClusteringArgmaxAndInit) {
  const int64_t tokens = 501, d = 37, experts = 6;
  std::vector<int32_t> lab(tokens);
  for (int64_t t = 0; t < tokens; ++t) lab[t] = static_cast<int32_t>((t * 7) % 4);  // 4, 5 empty
  lab[10] = 4;                                                                      // cluster 4: 1
  Tensor labels = Tensor::from_vector<int32_t>(Shape{tokens}, lab);
  Tensor glabels = up(labels);
  for (DType dt : kActs) {
    const DType f = compute_dtype(dt);
    Tensor x = rand({tokens, d}, dt, -2, 2);
    Tensor gx = up(x);
    Tensor sums = Tensor::empty({experts, d}, DType::kF64),
           counts = Tensor::empty({experts}, DType::kI64);
    Tensor gsums = poisoned({experts, d}, DType::kF64), gcounts = poisoned({experts}, DType::kI64);
    OK(ac_cluster_sums(cpu(), x, labels, sums, counts));
    OK(ac_cluster_sums(gpu(), gx, glabels, gsums, gcounts));
    EXPECT_TRUE(testing::bitwise_equal(sums, down(gsums))) << "cluster sums (same order)";
    EXPECT_TRUE(testing::bitwise_equal(counts, down(gcounts)));
    Tensor dev = Tensor::empty({experts, d}, DType::kF64),
           gdev = poisoned({experts, d}, DType::kF64);
    OK(ac_cluster_abs_dev(cpu(), x, labels, sums, counts, dev));
    OK(ac_cluster_abs_dev(gpu(), gx, glabels, gsums, gcounts, gdev));
    EXPECT_TRUE(testing::bitwise_equal(dev, down(gdev))) << "abs dev (same order)";
    for (auto norm : {AcNormalization::kPaper, AcNormalization::kReferenceCode}) {
      AcRouterParams params;
      params.normalization = norm;
      params.clip_mult = 1.5;  // some weights clip
      Tensor metric = Tensor::empty({experts, d}, f), gmetric = poisoned({experts, d}, f);
      Tensor summary = Tensor::empty({kAcSummarySize}, DType::kF64),
             gsummary = poisoned({kAcSummarySize}, DType::kF64);
      OK(ac_metric(cpu(), params, dev, counts, metric, summary));
      OK(ac_metric(gpu(), params, gdev, gcounts, gmetric, gsummary));
      expect_close("ac_metric", metric, gmetric, 0);
      expect_close("ac_metric(summary)", summary, gsummary, 0);
      Tensor out = Tensor::empty({tokens, d}, f), gout = poisoned({tokens, d}, f);
      OK(ac_apply_metric(cpu(), x, labels, metric, out));
      OK(ac_apply_metric(gpu(), gx, glabels, gmetric, gout));
      expect_close("ac_apply_metric", out, gout, 0);
      Tensor dout = rand({tokens, d}, f), dx = rand({tokens, d}, dt);
      Tensor gdx = up(dx);
      OK(ac_apply_metric_backward(cpu(), dout, labels, metric, dx));
      OK(ac_apply_metric_backward(gpu(), up(dout), glabels, gmetric, gdx));
      expect_close("ac_apply_metric_backward", dx, gdx, dt == DType::kBF16 ? -1 : 1e-12);
    }
    // Unit-norm expert embeddings: the same double expressions in the same order (no FMA
    // contraction on either side: --fmad=false, -ffp-contract=off), so the same bits; a zero
    // column stays zero.
    {
      const double tol = 0;
      Tensor w = rand({d, experts}, f), dunit = rand({d, experts}, f);
      for (int64_t q = 0; q < d; ++q) {
        if (f == DType::kF32) {
          w.data<float>()[q * experts] = 0;
        } else {
          w.data<double>()[q * experts] = 0;
        }
      }
      Tensor unit = Tensor::empty({d, experts}, f), gunit = poisoned({d, experts}, f);
      Tensor inv = Tensor::empty({experts}, f), ginv = poisoned({experts}, f);
      OK(normalize_columns(cpu(), w, unit, inv));
      OK(normalize_columns(gpu(), up(w), gunit, ginv));
      expect_close("normalize_columns", unit, gunit, tol);
      expect_close("normalize_columns(inv_norm)", inv, ginv, tol);
      Tensor dw = rand({d, experts}, f);
      Tensor gdw = up(dw);
      OK(normalize_columns_backward(cpu(), dunit, unit, inv, dw));
      OK(normalize_columns_backward(gpu(), up(dunit), up(unit), up(inv), gdw));
      expect_close("normalize_columns_backward", dw, gdw, tol);
    }
    // Argmax with exact ties: the first maximum wins on both.
    if (dt != DType::kBF16) {
      Tensor logits = rand({tokens, experts}, f);
      for (int64_t t = 0; t < tokens; t += 3) {
        Tensor row = Tensor::from_vector<double>(Shape{experts}, {0.5, 1, 1, 0, 1, -1});
        ASSERT_TRUE(convert_into(row, logits.view().rows(t, t + 1).reshape({experts})).ok());
      }
      Tensor top = Tensor::empty({tokens}, DType::kI32), gtop = poisoned({tokens}, DType::kI32);
      OK(argmax_rows(cpu(), logits, top));
      OK(argmax_rows(gpu(), up(logits), gtop));
      EXPECT_TRUE(testing::bitwise_equal(top, down(gtop)));
    }
    // Initialisation from the same counters.
    Tensor w = Tensor::empty({1000, 7}, dt), gw = poisoned({1000, 7}, dt);
    const CounterRng rng{4, make_stream(RngTag::kInit, 3, 0)};
    OK(init_normal(cpu(), w, 0.02, rng, 12345));
    OK(init_normal(gpu(), gw, 0.02, rng, 12345));
    expect_close("init_normal", w, gw, dt == DType::kBF16 ? -1 : 1e-6);
    OK(init_constant(cpu(), w, 0.75));
    OK(init_constant(gpu(), gw, 0.75));
    expect_close("init_constant", w, gw, 0);
  }
}

// Many tokens (the grouping sort's multi-tile path), clusters of very different sizes and one
// empty: sums, counts and absolute deviations equal the CPU's bit for bit (same order).
TEST_F(CudaKernelTest, AdaptiveClusteringStatisticsOverManyTokens) {
  const int64_t tokens = 20000, d = 70, experts = 9;
  std::vector<int32_t> lab(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t h = (t * 40503) % 997;
    lab[t] = static_cast<int32_t>(h < 600 ? 0 : h % 8);  // cluster 0 large, cluster 8 empty
  }
  Tensor labels = Tensor::from_vector<int32_t>(Shape{tokens}, lab);
  for (DType dt : kActs) {
    Tensor x = rand({tokens, d}, dt, -2, 2);
    Tensor sums = Tensor::empty({experts, d}, DType::kF64),
           counts = Tensor::empty({experts}, DType::kI64);
    Tensor gsums = poisoned({experts, d}, DType::kF64), gcounts = poisoned({experts}, DType::kI64);
    Tensor gx = up(x), glabels = up(labels);
    OK(ac_cluster_sums(cpu(), x, labels, sums, counts));
    OK(ac_cluster_sums(gpu(), gx, glabels, gsums, gcounts));
    EXPECT_TRUE(testing::bitwise_equal(sums, down(gsums))) << "cluster sums, 20000 tokens";
    EXPECT_TRUE(testing::bitwise_equal(counts, down(gcounts)));
    Tensor dev = Tensor::empty({experts, d}, DType::kF64),
           gdev = poisoned({experts, d}, DType::kF64);
    OK(ac_cluster_abs_dev(cpu(), x, labels, sums, counts, dev));
    OK(ac_cluster_abs_dev(gpu(), gx, glabels, gsums, gcounts, gdev));
    EXPECT_TRUE(testing::bitwise_equal(dev, down(gdev))) << "abs dev, 20000 tokens";
    // Global statistics: sums and counts all-reduced over ranks count other ranks' tokens too;
    // this rank's chunks still follow its own tokens.
    Tensor global = Tensor::empty({experts}, DType::kI64);
    for (int64_t k = 0; k < experts; ++k) global.data<int64_t>()[k] = 4 * counts.data<int64_t>()[k];
    Tensor gdev4 = poisoned({experts, d}, DType::kF64);
    OK(ac_cluster_abs_dev(cpu(), x, labels, sums, global, dev));
    OK(ac_cluster_abs_dev(gpu(), gx, glabels, gsums, up(global), gdev4));
    EXPECT_TRUE(testing::bitwise_equal(dev, down(gdev4))) << "abs dev, global counts";
    OK(ac_cluster_abs_dev(cpu(), x, labels, sums, counts, dev));
    expect_ac_metric_matches(dev, counts);
  }
  // A wider metric: 12 x 500 weights take three levels of the chunked sums.
  Tensor dev = rand({12, 500}, DType::kF64, 0, 50);
  Tensor counts =
      Tensor::from_vector<int64_t>(Shape{12}, {40, 1, 0, 7, 300, 2, 2, 9, 1000, 3, 5, 6});
  expect_ac_metric_matches(dev, counts);
}

// SparseMixer's omega gradient over 6000 slots (94 runs of 64, two levels of the chunked sum),
// some dropped: the GPU adds the runs in parallel, in the order the CPU adds them.
TEST_F(CudaKernelTest, OmegaGradientOverManySlots) {
  const int64_t tokens = 3000, k = 2, d = 40, y_rows = 5000;
  std::vector<int32_t> rows(tokens * k);
  for (int64_t i = 0; i < tokens * k; ++i) {
    rows[i] = i % 11 == 3 ? -1 : static_cast<int32_t>((i * 7919) % y_rows);  // dropped slots
  }
  Tensor row = Tensor::from_vector<int32_t>(Shape{tokens, k}, rows);
  for (DType dt : kActs) {
    const DType f = compute_dtype(dt);
    Tensor du = rand({tokens, d}, dt), y = rand({y_rows, d}, dt), gate = rand({tokens, k}, f, 0, 1);
    Tensor omega = rand({d}, f, 0.5, 1.5), dw = rand({d}, f);
    Tensor dy = Tensor::empty({y_rows, d}, dt), dg = Tensor::empty({tokens, k}, f);
    Tensor gdy = poisoned({y_rows, d}, dt), gdg = poisoned({tokens, k}, f), gdw = up(dw);
    OK(combine_backward(cpu(), du, y, row, gate, omega, {dy, dg, dw}));
    OK(combine_backward(gpu(), up(du), up(y), up(row), up(gate), up(omega), {gdy, gdg, gdw}));
    expect_close("combine_backward(d_omega, 6000 slots)", dw, gdw, 0);
  }
}

// Float -> bf16 rounds to nearest, ties to even, exactly as the CPU does: values exactly halfway
// between two bf16 numbers, just above and below halfway, subnormals, infinities and NaN. A
// truncating conversion fails here even where an op's 1e-2 tolerance would let it pass.
TEST_F(CudaKernelTest, Bf16RoundsToNearestEvenLikeTheCpu) {
  std::vector<float> v;
  for (float base : {1.0f, -1.5f, 3.0f, 1e-3f, -7e4f, 1.17549435e-38f}) {
    const float ulp = std::ldexp(std::fabs(base), -7);  // a bf16 ulp near base (8 bits)
    for (float off : {0.5f, 1.5f, 0.49f, 0.51f, 2.5f, 0.25f}) v.push_back(base + off * ulp);
  }
  for (float x : {0.0f, -0.0f, 3.4e38f, -3.4e38f, 1e-40f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()}) {
    v.push_back(x);
  }
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor src = Tensor::from_vector<float>({n}, v);
  Tensor want = Tensor::empty({n}, DType::kBF16);
  Tensor got = poisoned({n}, DType::kBF16);
  OK(convert(cpu(), src, want));
  OK(convert(gpu(), up(src), got));
  Tensor back = down(got);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(want.data<bf16>()[i].bits, back.data<bf16>()[i].bits)
        << "element " << i << " = " << v[i];
  }
}

// An integer destination is refused by convert on the GPU as on the CPU (it used to return OK
// and leave the destination untouched).
TEST_F(CudaKernelTest, ConvertToAnIntegerDtypeIsRefused) {
  Tensor src = up(rand({5}, DType::kF32));
  Tensor dst = poisoned({5}, DType::kI32);
  const Status s = convert(gpu(), src, dst);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_EQ(convert(cpu(), rand({5}, DType::kF32), Tensor::empty({5}, DType::kI32)).code(),
            StatusCode::kInvalidArgument);
}

// gather_rows on views that start off a word boundary: rows whose size is a multiple of the
// word must not take a wider path than their base allows (a misaligned load faults). bf16 rows
// of 12 bytes from an odd element (2-byte aligned: bytes); bf16 rows of 16 bytes from element 2
// and f32 rows of 16 bytes from element 1 (4-byte aligned: 4-byte words, not 16-byte ones).
TEST_F(CudaKernelTest, GatherRowsFromMisalignedViews) {
  struct Case {
    DType dtype;
    int64_t offset, d;
  };
  for (const Case& c :
       {Case{DType::kBF16, 1, 6}, Case{DType::kBF16, 2, 8}, Case{DType::kF32, 1, 4}}) {
    SCOPED_TRACE(str_cat(dtype_name(c.dtype), " offset ", c.offset, " d ", c.d));
    const int64_t n = 37, m = 50, d = c.d;
    Tensor flat = rand({c.offset + n * d}, c.dtype);
    Tensor gflat = up(flat);
    std::vector<int32_t> idx(m);
    for (int64_t i = 0; i < m; ++i) idx[i] = i % 7 == 3 ? -1 : static_cast<int32_t>((i * 11) % n);
    Tensor index = Tensor::from_vector<int32_t>({m}, idx);
    Tensor dflat = Tensor::empty({c.offset + m * d}, c.dtype);
    Tensor gdflat = poisoned({c.offset + m * d}, c.dtype);
    const auto view = [&](const Tensor& t, int64_t rows) {
      return t.view().rows(c.offset, c.offset + rows * d).reshape({rows, d});
    };
    OK(gather_rows(cpu(), view(flat, n), index, view(dflat, m)));
    OK(gather_rows(gpu(), view(gflat, n), up(index), view(gdflat, m)));
    Tensor got = down(view(gdflat, m));
    Tensor want = Tensor::copy_of(view(dflat, m));
    EXPECT_TRUE(testing::bitwise_equal(want, got));
  }
}

// The AC router's statistics (moe_stats.h): accumulated over calls, the same numbers as the CPU.
TEST_F(CudaKernelTest, AcStatistics) {
  const int64_t experts = 5, d = 9;
  Tensor abs_dev = rand({experts, d}, DType::kF64, 0.0, 2.0);
  Tensor counts = Tensor::from_vector<int64_t>({experts}, {7, 0, 3, 12, 1});
  Tensor local = Tensor::from_vector<int64_t>({experts}, {4, 0, 1, 6, 1});
  Tensor summary = Tensor::from_vector<double>({5}, {2, 0.1, 0.4, 3.5, 1.0});
  const int64_t size = 2 * experts + kAcStatsFixed;
  Tensor out = Tensor::zeros({size}, DType::kF64);
  Tensor gout = up(out);
  for (int call = 0; call < 3; ++call) {
    OK(ac_stats(cpu(), abs_dev, counts, local, summary, out));
    OK(ac_stats(gpu(), up(abs_dev), up(counts), up(local), up(summary), gout));
  }
  expect_close("ac_stats", out, gout, 1e-15);
}

// Shapes past the launch limits: a grid-stride loop over more elements than the grid cap of
// 524,280 blocks covers (n > 134M), and column reductions over more than 65,535 * 256 rows
// (the row chunks are a grid's y dimension; LayerNorm's and RMSNorm's parameter gradients).
TEST_F(CudaKernelTest, LargeShapesPassTheGridLimits) {
  const int64_t n = int64_t{524280} * kThreadsPerBlockForTest + 12345;
  Tensor a = rand({n}, DType::kF32), b = rand({n}, DType::kF32);
  Tensor c = Tensor::empty({n}, DType::kF32);
  {
    Tensor gc = poisoned({n}, DType::kF32);
    OK(add(cpu(), a, b, c));
    OK(add(gpu(), up(a), up(b), gc));
    expect_close("add (134M elements)", c, gc, 0);
  }
  const int64_t rows = int64_t{65535} * 256 + 1000, width = 2;
  Tensor dy = rand({rows, width}, DType::kF32);
  // bias_grad accumulates: both sides start from the same values.
  Tensor db = rand({width}, DType::kF32), gdb = up(db);
  Tensor gdy = up(dy);
  OK(bias_grad(cpu(), dy, db));
  OK(bias_grad(gpu(), gdy, gdb));
  expect_close("bias_grad (16.8M rows)", db, gdb, 1e-6);
  Tensor x = rand({rows, width}, DType::kF32), gamma = rand({width}, DType::kF32);
  Tensor mean = Tensor::empty({rows}, DType::kF32), rstd = Tensor::empty({rows}, DType::kF32);
  Tensor y = Tensor::empty({rows, width}, DType::kF32);
  OK(layernorm_forward(cpu(), x, gamma, Tensor::zeros({width}, DType::kF32), 1e-5, y, mean, rstd));
  Tensor dgamma = Tensor::zeros({width}, DType::kF32), dbeta = Tensor::zeros({width}, DType::kF32);
  Tensor dx = Tensor::empty({rows, width}, DType::kF32);
  Tensor gdgamma = up(dgamma), gdbeta = up(dbeta), gdx = poisoned({rows, width}, DType::kF32);
  OK(layernorm_backward(cpu(), dy, x, gamma, mean, rstd, {dx, dgamma, dbeta}));
  OK(layernorm_backward(gpu(), gdy, up(x), up(gamma), up(mean), up(rstd), {gdx, gdgamma, gdbeta}));
  expect_close("layernorm_backward(dgamma, 16.8M rows)", dgamma, gdgamma, 1e-6);
  expect_close("layernorm_backward(dbeta, 16.8M rows)", dbeta, gdbeta, 1e-6);
  Tensor rdgamma = Tensor::zeros({width}, DType::kF32), gdgamma_r = up(rdgamma);
  Tensor gdx_r = poisoned({rows, width}, DType::kF32);
  OK(rmsnorm_forward(cpu(), x, gamma, 1e-5, y, rstd));
  OK(rmsnorm_backward(cpu(), dy, x, gamma, rstd, {dx, rdgamma}));
  OK(rmsnorm_backward(gpu(), gdy, up(x), up(gamma), up(rstd), {gdx_r, gdgamma_r}));
  expect_close("rmsnorm_backward(dgamma, 16.8M rows)", rdgamma, gdgamma_r, 1e-6);
}

// Views of another device are refused by name, before any memory is touched.
TEST_F(CudaKernelTest, HostViewsOnACudaContextAreRefused) {
  Tensor host = rand({4, 3}, DType::kF32);
  Tensor dev = *gpu().zeros({4, 3}, DType::kF32);
  Status s = add(gpu(), host, dev, dev);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("is on host"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace moe::kernels
