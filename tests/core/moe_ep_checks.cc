#include "tests/core/moe_ep_checks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>

#include "base/rng.h"
#include "core/layers/moe_dispatcher.h"
#include "kernels/moe_dispatch.h"
#include "tests/core/moe_layer_test_util.h"
#include "tests/testing/cross_path.h"

namespace moe::testing {
namespace {

constexpr uint64_t kParamSeed = 42;

int rank_of(const comm::Communicator* c) { return c == nullptr ? 0 : c->rank(); }
int size_of(const comm::Communicator* c) { return c == nullptr ? 1 : c->world_size(); }

// t [rows, D] f64 = rows [first_row, first_row + rows) of the global tensor drawn from `seed`.
void fill_global_rows(const TensorView& t, uint64_t seed, int64_t first_row, double lo, double hi) {
  CounterRng rng{seed, make_stream(RngTag::kTest, 0, 0)};
  const int64_t offset = first_row * t.dim(1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<double>()[i] = lo + (hi - lo) * rng.uniform(static_cast<uint64_t>(offset + i));
  }
}

struct TokenRun {
  std::unique_ptr<LayerHarness> h;
  MoeLayerSaved saved;
  RouterStatsInfo stats;
  Tensor out, dx, dp;  // [T, D] output and gradients w.r.t. x and the momentum state p_in
};

// Tokens per sequence when a rank holds `tokens`: the smallest divisor above 1, so that every
// rank holds whole sequences, and the run over all ranks' tokens the same sequences.
int64_t sequence_length(int64_t tokens) {
  for (int64_t s = 2; s < tokens; ++s) {
    if (tokens % s == 0) return s;
  }
  return tokens;
}

// Forward and backward of a layer holding global tokens [first, first + tokens), in sequences of
// seq_len.
TokenRun run_tokens(const MoeLayerConfig& cfg, int64_t first, int64_t tokens, int64_t seq_len,
                    comm::Communicator* ep, comm::Communicator* stats, double aux_scale) {
  TokenRun run;
  run.h = std::make_unique<LayerHarness>(cfg, tokens, kParamSeed, ep);
  LayerHarness& h = *run.h;
  fill_global_rows(h.x, 500, first, -1.5, 1.5);
  fill_global_rows(h.p_in, 600, first, -0.5, 0.5);
  fill_global_rows(h.w_out, 700, first, -1.0, 1.0);
  fill_global_rows(h.w_p, 800, first, -1.0, 1.0);
  for (int64_t t = 0; t < tokens; ++t) {
    h.prev_top1.data<int32_t>()[t] = static_cast<int32_t>(((first + t) * 7 + 3) % cfg.num_experts);
  }
  h.token_offset = first;
  h.seq_len = seq_len;
  h.stats_comm = stats;
  h.aux_scale = aux_scale;
  h.seed = 5;
  h.forward(&run.saved, &run.stats, &run.out);
  Tensor dxb, dm, dv;
  h.backward(&run.dx, &dxb, &run.dp, &dm, &dv);
  return run;
}

Status expect_close(const std::string& what, const TensorView& got, const TensorView& want) {
  ::testing::AssertionResult r = values_within(what, got, want, kEpTolerance);
  return r ? Status::OK() : internal_error(r.message());
}

Status expect_close(const std::string& what, const std::vector<double>& got, const double* want) {
  return expect_close(what,
                      TensorView(const_cast<double*>(got.data()), DType::kF64,
                                 Shape({static_cast<int64_t>(got.size())})),
                      TensorView(const_cast<double*>(want), DType::kF64,
                                 Shape({static_cast<int64_t>(got.size())})));
}

// The routing decisions of this rank's tokens in both runs, compared before any value.
Status expect_same_decisions(const std::string& at, const RouterSaved& mine, const RouterSaved& all,
                             int64_t first, int64_t end) {
  const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> kinds[] = {
      {"experts", {&mine.idx, &all.idx}},
      {"argmax (the next AC layer's clusters)", {&mine.top1, &all.top1}},
      {"SparseMixer sets", {&mine.mask, &all.mask}}};
  for (const auto& [name, pair] : kinds) {
    if (pair.first->numel() == 0 && pair.second->numel() == 0) continue;
    ::testing::AssertionResult r =
        same_decisions(at + name, *pair.first, pair.second->view().rows(first, end));
    if (!r) return internal_error(r.message());
  }
  return Status::OK();
}

// The capacity per source rank of cfg's layer over `tokens` tokens (-1: dropless).
int64_t capacity_of(const MoeLayerConfig& cfg, int64_t tokens) {
  if (cfg.dropless) return -1;
  return static_cast<int64_t>(
      std::ceil(cfg.capacity_factor * static_cast<double>(tokens * cfg.top_k) / cfg.num_experts));
}

// Capacity slots [T * K] by brute force: (t, j) takes position #{(t', j') routed to the same
// expert with j' < j, or j' == j and t' < t} and is dropped (-1) when that is >= C (capacity < 0:
// dropless, never).
std::vector<int32_t> brute_force_slots(const TensorView& idx, int64_t capacity) {
  const int64_t tokens = idx.dim(0), k = idx.dim(1);
  const int32_t* e = idx.data<int32_t>();
  std::vector<int32_t> slots(tokens * k);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      int64_t position = 0;
      for (int64_t t2 = 0; t2 < tokens; ++t2) {
        for (int64_t j2 = 0; j2 < k; ++j2) {
          const bool earlier = j2 < j || (j2 == j && t2 < t);
          position += earlier && e[t2 * k + j2] == e[t * k + j];
        }
      }
      slots[t * k + j] = capacity < 0 || position < capacity ? static_cast<int32_t>(position) : -1;
    }
  }
  return slots;
}

// Capacity per source rank, by brute force (brute_force_slots).
Status expect_capacity_slots(const MoeLayerConfig& cfg, const TensorView& idx,
                             const DispatchPlan& plan, int64_t dropped_slots) {
  const int64_t tokens = idx.dim(0), k = idx.dim(1);
  const int64_t capacity = capacity_of(cfg, tokens);
  if (plan.capacity != capacity)
    return internal_error("capacity ", plan.capacity, " != ", capacity);
  const std::vector<int32_t> slots = brute_force_slots(idx, capacity);
  int64_t dropped = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t want = slots[t * k + j];
      dropped += want < 0;
      if (plan.slot.data<int32_t>()[t * k + j] != want) {
        return internal_error("slot of (", t, ", ", j, ") is ",
                              plan.slot.data<int32_t>()[t * k + j], ", expected ", want);
      }
    }
  }
  if (dropped_slots != dropped) {
    return internal_error("dropped_slots ", dropped_slots, " != ", dropped);
  }
  return Status::OK();
}

// This rank's dispatch to its peers, counted from its routing alone: the kept assignments to
// experts of other ranks, and the distinct (token, peer rank) pairs among them.
ExchangeCounts expected_exchange(const MoeLayerConfig& cfg, const TensorView& idx, int ranks,
                                 int rank) {
  const int64_t tokens = idx.dim(0), k = idx.dim(1), local = cfg.num_experts / ranks;
  const std::vector<int32_t> slots = brute_force_slots(idx, capacity_of(cfg, tokens));
  ExchangeCounts want;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<bool> reached(ranks, false);
    for (int64_t j = 0; j < k; ++j) {
      const int r = static_cast<int>(idx.data<int32_t>()[t * k + j] / local);
      if (slots[t * k + j] < 0 || r == rank) continue;
      ++want.undeduplicated;
      want.sent += !reached[r];
      reached[r] = true;
    }
  }
  return want;
}

// Every tensor of `a` and `b` bit for bit: output, input gradients, parameter gradients.
Status expect_bitwise(const std::string& at, const TokenRun& a, const TokenRun& b) {
  const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> outputs[] = {
      {"output", {&a.out, &b.out}}, {"dL/dx", {&a.dx, &b.dx}}, {"dL/dp", {&a.dp, &b.dp}}};
  for (const auto& [name, pair] : outputs) {
    if (!bitwise_equal(*pair.first, *pair.second)) return internal_error(at, name, " differs");
  }
  const auto& pa = a.h->params->all();
  const auto& pb = b.h->params->all();
  for (size_t i = 0; i < pa.size(); ++i) {
    if (!bitwise_equal(pa[i]->grad, pb[i]->grad)) {
      return internal_error(at, "grad ", pa[i]->name, " differs");
    }
  }
  return Status::OK();
}

Status forward_status(LayerHarness& h) {
  MoeLayerSaved saved;
  MoeLayerInputs in;
  in.x_in = h.x;
  in.x_base = h.x;
  return h.layer->forward(in, &saved).status();
}

}  // namespace

Tensor seeded_routing(int rank, int64_t tokens, int64_t experts, int64_t k) {
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

Tensor skewed_routing(int rank, int ranks, int64_t per_peer) {
  const int64_t base = ranks * per_peer, extra = rank == 1 ? per_peer : 0;
  Tensor idx = Tensor::empty({base + extra, 1}, DType::kI32);
  for (int64_t t = 0; t < base; ++t) idx.data<int32_t>()[t] = static_cast<int32_t>(t % ranks);
  for (int64_t t = base; t < base + extra; ++t) idx.data<int32_t>()[t] = rank;
  return idx;
}

Status check_dispatch_identity(const MoeLayerConfig& cfg, const RoutingFn& routing,
                               comm::Communicator* ep) {
  const int ranks = size_of(ep), rank = rank_of(ep);
  const int64_t d = cfg.d_model, k = cfg.top_k;
  // Every rank's routing, regenerated here; x of rank q stamped q * 1e6 + element index (exact).
  std::vector<Tensor> idx(ranks);
  std::vector<int64_t> first_token(ranks + 1, 0);
  for (int q = 0; q < ranks; ++q) {
    idx[q] = routing(q);
    first_token[q + 1] = first_token[q] + idx[q].dim(0);
  }
  auto stamp = [&](int q, int64_t t, int64_t c) {
    return q * 1e6 + static_cast<double>(t * d + c);
  };
  const int64_t tokens = idx[rank].dim(0);
  Tensor x = Tensor::empty({tokens, d}, DType::kF64);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < d; ++c) x.data<double>()[t * d + c] = stamp(rank, t, c);
  }

  std::unique_ptr<Context> ctx = Context::host();  // this rank's
  MoeDispatcher dispatcher(cfg, ctx.get(), ep);
  DispatchPlan plan;
  MOE_RETURN_IF_ERROR(dispatcher.plan(idx[rank], first_token[rank], {}, &plan));
  MOE_ASSIGN_OR_RETURN(Tensor rows, dispatcher.dispatch(x, plan));
  MOE_ASSIGN_OR_RETURN(Tensor send, dispatcher.gather_back(rows, plan));  // identity experts
  Tensor ones = Tensor::empty({tokens, k}, DType::kF64);
  for (int64_t i = 0; i < ones.numel(); ++i) ones.data<double>()[i] = 1.0;
  Tensor u = Tensor::empty({tokens, d}, DType::kF64);
  MOE_RETURN_IF_ERROR(kernels::combine(*ctx, send, plan.row, ones, TensorView(), u));
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (u.data<double>()[i] != k * x.data<double>()[i]) {
      return internal_error("element ", i, ": combine gives ", u.data<double>()[i],
                            ", K x = ", k * x.data<double>()[i]);
    }
  }

  // The received rows, block by block (source rank q = b / E_l, local expert l = b % E_l): that
  // rank's assignments to the expert in slot order (first choices in token order, then second
  // choices, ...), with their keys; in capacity mode the rest of each block of C rows is padding
  // (zero rows, key -1).
  const int64_t local = cfg.num_experts / ranks;
  const kernels::ExpertBlocks& blocks = plan.blocks;
  if (blocks.blocks() != ranks * local || blocks.rows() != rows.dim(0)) {
    return internal_error("blocks ", blocks.blocks(), " x ", blocks.rows(), " rows for ",
                          rows.dim(0), " received rows");
  }
  for (int q = 0; q < ranks; ++q) {
    for (int64_t l = 0; l < local; ++l) {
      const int64_t b = q * local + l;
      const int32_t expert = static_cast<int32_t>(rank * local + l);
      auto [row, end] = blocks.block_rows(b);
      const int64_t tq = idx[q].dim(0);
      int64_t n = 0;
      for (int64_t j = 0; j < k; ++j) {
        for (int64_t t = 0; t < tq; ++t) {
          if (idx[q].data<int32_t>()[t * k + j] != expert) continue;
          if (row >= end) return internal_error("block ", b, " has fewer rows than the histogram");
          for (int64_t c = 0; c < d; ++c) {
            if (rows.data<double>()[row * d + c] != stamp(q, t, c)) {
              return internal_error("block ", b, " row ", row, " is not token ", t, " of rank ", q);
            }
          }
          const int64_t key = plan.recv_key.data<int64_t>()[row];
          if (key != (first_token[q] + t) * k + j) {
            return internal_error("row ", row, " has key ", key, ", expected ",
                                  (first_token[q] + t) * k + j);
          }
          ++row;
          ++n;
        }
      }
      if (kernels::filled_rows(blocks, b) != n) {
        return internal_error("block ", b, " reports ", kernels::filled_rows(blocks, b),
                              " filled rows, the histogram ", n);
      }
      for (; row < end; ++row) {  // capacity padding
        if (plan.recv_key.data<int64_t>()[row] != -1) {
          return internal_error("padding row ", row, " of block ", b, " has a key");
        }
        for (int64_t c = 0; c < d; ++c) {
          if (rows.data<double>()[row * d + c] != 0)
            return internal_error("padding row ", row, " is not zero");
        }
      }
    }
  }
  return Status::OK();
}

Status check_layer_matches_single_rank(const MoeLayerConfig& cfg, int64_t tokens,
                                       comm::Communicator* ep, int64_t* dropped_slots) {
  const int ranks = size_of(ep), rank = rank_of(ep);
  const int64_t seq_len = sequence_length(tokens);
  TokenRun mine = run_tokens(cfg, rank * tokens, tokens, seq_len, ep, nullptr, 1.0);
  if (dropped_slots != nullptr) *dropped_slots = mine.stats.dropped_slots;
  if (!cfg.dropless) {
    Status s = expect_capacity_slots(cfg, mine.saved.router.idx, mine.saved.plan,
                                     mine.stats.dropped_slots);
    if (!s.ok()) return internal_error("EP rank ", rank, ": ", s.message());
  }
  std::map<std::string, std::vector<double>> expert_grad_sum;  // over the R single-rank layers
  for (int q = 0; q < ranks; ++q) {
    TokenRun single = run_tokens(cfg, q * tokens, tokens, seq_len, nullptr, nullptr, 1.0);
    const auto& ep_params = mine.h->params->all();
    const auto& single_params = single.h->params->all();
    for (size_t i = 0; i < single_params.size(); ++i) {
      const Parameter& p = *single_params[i];
      if (p.kind == ParamKind::kExpert) {
        std::vector<double>& sum = expert_grad_sum[p.name];
        sum.resize(p.grad.numel(), 0.0);
        for (int64_t j = 0; j < p.grad.numel(); ++j) sum[j] += p.grad.data<double>()[j];
      } else if (q == rank) {
        MOE_RETURN_IF_ERROR(
            expect_close(str_cat("rank ", rank, " grad ", p.name), ep_params[i]->grad, p.grad));
      }
    }
    if (q != rank) continue;
    const std::string at = str_cat("rank ", rank, " of ", ranks, ": ");
    // Decisions first (the router runs on the same tokens in both: bit equality by design).
    if (!bitwise_equal(mine.saved.router.idx, single.saved.router.idx)) {
      return internal_error(
          at, "routing differs from the single-rank layer's: ",
          count_flips(mine.saved.router.idx, single.saved.router.idx).to_string());
    }
    if (!bitwise_equal(mine.saved.plan.slot, single.saved.plan.slot)) {
      return internal_error(at, "capacity slots differ from the single-rank layer's: ",
                            count_flips(mine.saved.plan.slot, single.saved.plan.slot).to_string());
    }
    MOE_RETURN_IF_ERROR(expect_close(at + "output", mine.out, single.out));
    MOE_RETURN_IF_ERROR(expect_close(at + "dL/dx", mine.dx, single.dx));
    MOE_RETURN_IF_ERROR(expect_close(at + "dL/dp", mine.dp, single.dp));
  }
  for (const auto& p : mine.h->params->all()) {
    if (p->kind != ParamKind::kExpert) continue;
    const int64_t per_expert = p->numel() / p->shape[0];
    const std::vector<double> got = to_vector<double>(p->grad);
    MOE_RETURN_IF_ERROR(
        expect_close(str_cat("rank ", rank, " expert grad ", p->name), got,
                     expert_grad_sum.at(p->name).data() + p->first_expert * per_expert));
  }
  return Status::OK();
}

Status check_dedup_matches_plain(const MoeLayerConfig& cfg, int64_t tokens, comm::Communicator* ep,
                                 ExchangeCounts* counts) {
  const int ranks = size_of(ep), rank = rank_of(ep);
  const int64_t seq_len = sequence_length(tokens);
  MoeLayerConfig plain_cfg = cfg;
  plain_cfg.max_ep_ranks = 0;
  TokenRun dedup = run_tokens(cfg, rank * tokens, tokens, seq_len, ep, nullptr, 1.0);
  TokenRun plain = run_tokens(plain_cfg, rank * tokens, tokens, seq_len, ep, nullptr, 1.0);
  const std::string at = str_cat("rank ", rank, " of ", ranks, ": ");
  if (dedup.saved.plan.unique.active() != (ranks > 1)) {
    return internal_error(at, "the dispatch ", ranks > 1 ? "did not deduplicate" : "deduplicated",
                          " (max_ep_ranks ", cfg.max_ep_ranks, ")");
  }
  MOE_RETURN_IF_ERROR(expect_bitwise(at + "with deduplication, ", dedup, plain));
  // The counters: counted only by the deduplicating dispatch, D f64 values per row.
  const RouterStatsInfo& got = dedup.stats;
  const ExchangeCounts want =
      ranks > 1 ? expected_exchange(cfg, dedup.saved.router.idx, ranks, rank) : ExchangeCounts();
  const int64_t row_bytes = ranks > 1 ? cfg.d_model * 8 : 0;
  if (got.dispatch_rows_sent != want.sent ||
      got.dispatch_rows_undeduplicated != want.undeduplicated ||
      got.dispatch_row_bytes != row_bytes) {
    return internal_error(at, "counted ", got.dispatch_rows_sent, " rows sent of ",
                          got.dispatch_rows_undeduplicated, " (", got.dispatch_row_bytes,
                          " bytes each), expected ", want.sent, " of ", want.undeduplicated, " (",
                          row_bytes, ")");
  }
  const RouterStatsInfo& none = plain.stats;
  if (none.dispatch_rows_sent != 0 || none.dispatch_rows_undeduplicated != 0 ||
      none.dispatch_row_bytes != 0) {
    return internal_error(at, "the dispatch without deduplication counted its exchange");
  }
  if (got.dropped_slots != none.dropped_slots) {
    return internal_error(at, "dropped ", got.dropped_slots, " != ", none.dropped_slots);
  }
  if (counts != nullptr) *counts = want;
  // And the deduplicating layer at EP = R against R single-rank layers, as without it.
  return check_layer_matches_single_rank(cfg, tokens, ep, nullptr);
}

MoeLayerConfig dedup_variant(bool dropless, int64_t k) {
  MoeLayerConfig cfg = small_config();
  cfg.num_experts = 8;
  cfg.top_k = k;
  cfg.dropless = dropless;
  cfg.capacity_factor = 1.0;  // C = ceil(T K / E): the popular experts drop assignments
  // Node-limited over 4 groups of 2 (aligned with EP 1, 2 and 4) keeping all 4: the routing of
  // the same layer without the option (no group is excluded), with the deduplicating dispatch,
  // on a config the check accepts.
  cfg.expert_groups = 4;
  cfg.max_ep_ranks = 4;
  return cfg;
}

Status check_global_matches_all_tokens(const MoeLayerConfig& cfg, int64_t tokens,
                                       comm::Communicator& ep) {
  const int ranks = ep.world_size(), rank = ep.rank();
  const int64_t seq_len = sequence_length(tokens);
  TokenRun mine = run_tokens(cfg, rank * tokens, tokens, seq_len, &ep, &ep, 1.0 / ranks);
  TokenRun all = run_tokens(cfg, 0, ranks * tokens, seq_len, nullptr, nullptr, 1.0);
  const std::string at = str_cat("rank ", rank, " of ", ranks, ": ");
  if (mine.stats.dropped_slots != 0 || all.stats.dropped_slots != 0) {
    return internal_error(at, "the configuration drops tokens");
  }
  const int64_t first = rank * tokens, end = first + tokens;
  MOE_RETURN_IF_ERROR(expect_same_decisions(at, mine.saved.router, all.saved.router, first, end));
  if (cfg.ac.enabled) {
    if (!mine.saved.router.ac_applied || !all.saved.router.ac_applied) {
      return internal_error(at, "the AC transform was not applied");
    }
    MOE_RETURN_IF_ERROR(
        expect_close(at + "AC metric", mine.saved.router.metric, all.saved.router.metric));
  }
  if (!(std::fabs(aux_loss(mine.saved) - aux_loss(all.saved)) <= kEpTolerance)) {
    return internal_error(at, "aux loss ", aux_loss(mine.saved), " != ", aux_loss(all.saved));
  }
  const double seq_mine = mine.saved.aux.data<double>()[3],
               seq_all = all.saved.aux.data<double>()[3];
  if (!(std::fabs(seq_mine - seq_all) <= kEpTolerance)) {
    return internal_error(at, "sequence loss ", seq_mine, " != ", seq_all);
  }
  MOE_RETURN_IF_ERROR(expect_close(at + "output", mine.out, all.out.view().rows(first, end)));
  MOE_RETURN_IF_ERROR(expect_close(at + "dL/dx", mine.dx, all.dx.view().rows(first, end)));
  MOE_RETURN_IF_ERROR(expect_close(at + "dL/dp", mine.dp, all.dp.view().rows(first, end)));
  const auto& ep_params = mine.h->params->all();
  const auto& all_params = all.h->params->all();
  for (size_t i = 0; i < all_params.size(); ++i) {
    const Parameter& p = *ep_params[i];
    if (p.kind == ParamKind::kExpert) {
      const int64_t per_expert = p.numel() / p.shape[0];
      const std::vector<double> got = to_vector<double>(p.grad);
      MOE_RETURN_IF_ERROR(
          expect_close(at + "expert grad " + p.name, got,
                       all_params[i]->grad.data<double>() + p.first_expert * per_expert));
    } else {
      Tensor sum = Tensor::copy_of(p.grad);  // dense: each rank holds its tokens' share
      MOE_RETURN_IF_ERROR(ep.all_reduce(sum, sum, comm::ReduceOp::kSum));
      MOE_RETURN_IF_ERROR(expect_close(at + "summed grad " + p.name, sum, all_params[i]->grad));
    }
  }
  return Status::OK();
}

Status check_capacity_mismatch_reported(comm::Communicator& ep) {
  const MoeLayerConfig cfg = small_config();  // C = ceil(4 * T * 2 / 4) = 2 T
  const bool odd = ep.rank() == ep.world_size() - 1;
  LayerHarness mismatched(cfg, odd ? 12 : 8, 1, &ep);
  Status s = forward_status(mismatched);
  if (s.ok()) return internal_error("rank ", ep.rank(), ": token counts 8 and 12 were accepted");
  if (s.code() != StatusCode::kInvalidArgument ||
      s.message().find("capacity") == std::string::npos) {
    return internal_error("rank ", ep.rank(),
                          ": expected kInvalidArgument naming the capacity, got ", s.to_string());
  }
  LayerHarness matched(cfg, 8, 1, &ep);  // the group is still in step
  return forward_status(matched);
}

std::vector<std::string> single_rank_variants() {
  return {"plain",
          "heavy_ball",
          "robust",
          "dropless",
          "capacity_drops",
          "dropout",
          "sparsemixer",
          "ac_local",
          "swiglu_bias_free_dropout",
          "sigmoid_seq",
          "shared_swiglu_dropout",
          "shared_gated_dropout",
          "node_limited",
          "node_limited_dropless"};
}

std::vector<std::string> global_variants() {
  return {"ac_global", "ac_global_dropless", "global_dropout_heavy_ball", "global_sparsemixer",
          "global_sigmoid_seq"};
}

MoeLayerConfig ep_variant(const std::string& name) {
  MoeLayerConfig cfg = small_config();  // capacity factor 4: C = 2 T, nothing dropped
  const bool global = name.find("global") != std::string::npos;
  cfg.balance_scope = global ? BalanceScope::kGlobal : BalanceScope::kLocal;
  if (name.find("heavy_ball") != std::string::npos) cfg.residual = ResidualKind::kHeavyBall;
  if (name == "robust") cfg.residual = ResidualKind::kRobust;
  if (name.find("dropless") != std::string::npos) cfg.dropless = true;
  if (name == "capacity_drops") cfg.capacity_factor = 0.6;
  if (name.find("dropout") != std::string::npos) {
    cfg.expert_dropout = 0.3;
    cfg.output_dropout = 0.2;
  }
  if (name.find("sparsemixer") != std::string::npos) {
    cfg.top_k = 1;
    cfg.sparsemixer.enabled = true;
    cfg.sparsemixer.jitter = 0.5;
  }
  if (name.find("swiglu") != std::string::npos) cfg.activation = ExpertActivation::kSwiglu;
  if (name.find("bias_free") != std::string::npos) cfg.linear_bias = false;
  if (name.find("groups") != std::string::npos) {
    cfg.score_function = ScoreFunction::kSigmoid;
    cfg.expert_groups = 2;
    cfg.topk_groups = 1;
  }
  if (name.find("node_limited") != std::string::npos) {
    // Two groups, one kept: a token's two experts on one rank at EP 2, on two of four at EP 4.
    cfg.expert_groups = 2;
    cfg.max_ep_ranks = 1;
  }
  if (name.find("shared") != std::string::npos) {
    // Shared experts: computed where the token is, their dropout keyed by the global token.
    cfg.shared_experts = 2;
    cfg.d_shared = 3;
    cfg.shared_expert_gate = name.find("gated") != std::string::npos;  // Qwen2-MoE's gate
  }
  if (name.find("sigmoid_seq") != std::string::npos) {
    // DeepSeek-V3's routing: sigmoid scores, scaled gates and the sequence-wise balance loss.
    cfg.score_function = ScoreFunction::kSigmoid;
    cfg.routed_scaling = 2.5;
    cfg.seq_balance_loss_coef = 0.3;
  }
  if (name.find("ac_") == 0) {
    cfg.ac.enabled = true;
    cfg.ac.global_stats = global;
  }
  return cfg;
}

}  // namespace moe::testing
