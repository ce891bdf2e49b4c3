// The MoE layer's token exchange across an EP group on the Local backend (ranks as threads):
// identities that need no tolerance (dispatch then combine with unit gates and identity experts
// returns K x the input; every rank receives exactly the rows an independent histogram predicts),
// the layer at EP = R against R independent single-rank layers, capacity per source rank, and a
// token-count mismatch reported on every rank instead of a hang.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>

#include "comm/local_communicator.h"
#include "kernels/moe_dispatch.h"
#include "tests/core/moe_layer_test_util.h"

namespace moe::testing {
namespace {

// Rank r's routing: idx[t, k] drawn from the rank's own counter stream, K distinct experts.
Tensor routing(int rank, int64_t tokens, int64_t experts, int64_t k) {
  Tensor idx = Tensor::empty({tokens, k}, DType::kI32);
  CounterRng rng{77, make_stream(RngTag::kTest, static_cast<uint64_t>(rank), 0)};
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      int32_t e;
      bool fresh;
      uint64_t draw = static_cast<uint64_t>(t * 16 + j * 4);
      do {
        e = static_cast<int32_t>(rng.u32(draw++) % experts);
        fresh = true;
        for (int64_t i = 0; i < j; ++i) fresh &= idx.data<int32_t>()[t * k + i] != e;
      } while (!fresh);
      idx.data<int32_t>()[t * k + j] = e;
    }
  }
  return idx;
}

class DispatchIdentityTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(DispatchIdentityTest, CombineOfDispatchIsKTimesTheInputAndCountsMatchTheHistogram) {
  const auto [ranks, dropless] = GetParam();
  const int64_t tokens = 13, experts = 8, k = 2, d = 5;
  MoeLayerConfig cfg = small_config();
  cfg.num_experts = experts;
  cfg.top_k = k;
  cfg.d_model = d;
  cfg.dropless = dropless;
  cfg.capacity_factor = 8.0;  // C >= any load: nothing dropped, so the identity is exact
  Status s = comm::run_local_ranks(ranks, [&](comm::Communicator& c) -> Status {
    MoeDispatcher dispatcher(cfg, &c);
    Tensor idx = routing(c.rank(), tokens, experts, k);
    DispatchPlan plan;
    MOE_RETURN_IF_ERROR(dispatcher.plan(idx, c.rank() * tokens, &plan));
    Tensor x = Tensor::empty({tokens, d}, DType::kF64);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = c.rank() * 1000 + i;  // stamped
    Tensor compact, send;
    MOE_RETURN_IF_ERROR(dispatcher.dispatch(x, plan, &compact));
    MOE_RETURN_IF_ERROR(dispatcher.gather_back(compact, plan, &send));  // identity experts
    Tensor ones = Tensor::empty({tokens, k}, DType::kF64);
    for (int64_t i = 0; i < ones.numel(); ++i) ones.data<double>()[i] = 1.0;
    Tensor u = Tensor::empty({tokens, d}, DType::kF64);
    MOE_RETURN_IF_ERROR(kernels::combine(send, plan.row, ones, TensorView(), u));
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (u.data<double>()[i] != k * x.data<double>()[i]) {
        return internal_error("element ", i, ": ", u.data<double>()[i], " != ", k, " x ", x.data<double>()[i]);
      }
    }
    // Rows received per local expert = assignments to it from every rank (recomputed here).
    const int64_t local = experts / ranks;
    for (int64_t l = 0; l < local; ++l) {
      int64_t want = 0;
      for (int r = 0; r < ranks; ++r) {
        Tensor other = routing(r, tokens, experts, k);
        for (int64_t i = 0; i < other.numel(); ++i) want += other.data<int32_t>()[i] == c.rank() * local + l;
      }
      const int64_t got = plan.expert_offsets[l + 1] - plan.expert_offsets[l];
      if (got != want) return internal_error("local expert ", l, ": received ", got, " rows, histogram says ", want);
    }
    // Every received row carries its source: a stamp between 1000 * r and 1000 * r + T * d.
    for (int64_t row = 0; row < compact.dim(0); ++row) {
      const double v = compact.data<double>()[row * d];
      if (v < 0 || v >= 1000.0 * ranks) return internal_error("row ", row, " holds ", v);
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

INSTANTIATE_TEST_SUITE_P(RanksAndModes, DispatchIdentityTest,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Bool()));

struct LayerRun {
  std::vector<Tensor> out, dx;               // per rank
  std::map<std::string, std::vector<double>> grads;  // global tensors, summed over ranks
};

// Each of `ranks` ranks holds `tokens` tokens (token_offset r * tokens) and runs forward and
// backward; comm == false runs them as independent single-rank layers over all experts.
LayerRun run_layer(const MoeLayerConfig& cfg, int ranks, int64_t tokens, bool use_comm) {
  LayerRun run;
  run.out.resize(ranks);
  run.dx.resize(ranks);
  std::mutex mu;
  auto body = [&](int rank, comm::Communicator* c) -> Status {
    LayerHarness h(cfg, tokens, 42, c);
    fill_uniform(h.x, 500 + rank, -1.5, 1.5);  // this rank's tokens
    fill_uniform(h.p_in, 600 + rank, -0.5, 0.5);
    fill_uniform(h.w_out, 700 + rank);
    fill_uniform(h.w_p, 800 + rank);
    h.seed = 5;
    MoeLayerSaved saved;
    Tensor out;
    // The harness keys dropout and SparseMixer draws by token_offset + t (the same in both runs).
    h.forward(&saved, nullptr, &out);
    Tensor dx, dxb, dp, dm, dv;
    h.backward(&dx, &dxb, &dp, &dm, &dv);
    std::lock_guard<std::mutex> lock(mu);
    run.out[rank] = std::move(out);
    run.dx[rank] = std::move(dx);
    for (const auto& p : h.params->all()) {
      const int64_t per = p->kind == ParamKind::kExpert ? p->value.numel() / p->value.dim(0) : 0;
      std::vector<double>& g = run.grads[p->name];
      g.resize(p->kind == ParamKind::kExpert ? p->global_experts * per : p->value.numel(), 0.0);
      const int64_t base = p->kind == ParamKind::kExpert ? p->first_expert * per : 0;
      for (int64_t i = 0; i < p->grad.numel(); ++i) g[base + i] += p->grad.data<double>()[i];
    }
    return Status::OK();
  };
  if (use_comm) {
    Status s = comm::run_local_ranks(ranks, [&](comm::Communicator& c) { return body(c.rank(), &c); });
    EXPECT_TRUE(s.ok()) << s.to_string();
  } else {
    for (int r = 0; r < ranks; ++r) EXPECT_TRUE(body(r, nullptr).ok());
  }
  return run;
}

class LayerEpTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// EP = R equals R independent single-rank layers holding every expert: each rank's tokens meet
// the same experts either way (capacity is per source rank in both), outputs and input gradients
// match per rank, and the EP shards' gradients equal the sum of the single-rank gradients.
TEST_P(LayerEpTest, MatchesIndependentSingleRankLayers) {
  const auto [variant, ranks] = GetParam();
  MoeLayerConfig cfg = small_config();
  cfg.balance_scope = BalanceScope::kLocal;  // per-rank losses in both runs
  if (variant == "capacity_drops") cfg.capacity_factor = 0.6;
  if (variant == "dropless_momentum") {
    cfg.dropless = true;
    cfg.residual = ResidualKind::kHeavyBall;
  }
  if (variant == "dropout") {
    cfg.expert_dropout = 0.3;
    cfg.output_dropout = 0.2;
  }
  if (variant == "sparsemixer") {
    cfg.top_k = 1;
    cfg.sparsemixer.enabled = true;
    cfg.sparsemixer.jitter = 0.5;
  }
  if (variant == "ac_local") cfg.ac.enabled = true;
  const int64_t tokens = 9;
  LayerRun ep = run_layer(cfg, ranks, tokens, true);
  LayerRun single = run_layer(cfg, ranks, tokens, false);
  for (int r = 0; r < ranks; ++r) {
    EXPECT_LT(max_abs_diff(ep.out[r], single.out[r]), 1e-12) << variant << " rank " << r;
    EXPECT_LT(max_abs_diff(ep.dx[r], single.dx[r]), 1e-12) << variant << " rank " << r;
  }
  for (const auto& [name, g] : single.grads) {
    const std::vector<double>& e = ep.grads.at(name);
    ASSERT_EQ(e.size(), g.size());
    double worst = 0;
    for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(e[i] - g[i]));
    EXPECT_LT(worst, 1e-12) << variant << " " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, LayerEpTest,
    ::testing::Combine(::testing::Values("plain", "capacity_drops", "dropless_momentum", "dropout",
                                         "sparsemixer", "ac_local"),
                       ::testing::Values(2, 4)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
      return std::get<0>(info.param) + "_ep" + std::to_string(std::get<1>(info.param));
    });

TEST(LayerEpTest, MismatchedTokenCountsFailOnEveryRank) {
  MoeLayerConfig cfg = small_config();
  Status s = comm::run_local_ranks(2, [&](comm::Communicator& c) -> Status {
    LayerHarness h(cfg, c.rank() == 0 ? 8 : 12, 1, &c);
    MoeLayerSaved saved;
    MoeLayerInputs in;
    in.x_in = h.x;
    in.x_base = h.x;
    Tensor out = Tensor::empty(h.x.shape(), DType::kF64), p = Tensor::empty(h.x.shape(), DType::kF64);
    MoeLayerOutputs o;
    o.out = out;
    o.p_out = p;
    return h.layer->forward(in, o, &saved, nullptr);
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("uses capacity"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace moe::testing
