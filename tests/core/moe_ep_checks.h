// Checks of the MoE layer's expert-parallel (EP) path that run on any communicator backend: the
// Local test (ranks as threads) and the MPI test (ranks as processes) share them. Each check runs
// on one rank, is collective over `ep`, and returns OK or an internal error naming the first
// mismatch. Expectations never come from the EP path itself: every rank regenerates what every
// other rank routes from seeds, and reruns the layer at EP = 1 (no communicator, every expert)
// over the same tokens.
//
// Data layout: rank r of R holds global tokens [r*T, (r+1)*T) (token_offset = r*T), drawn from
// one global stream per tensor, so R ranks together hold exactly what one rank holding all R*T
// tokens would; the tokens form sequences of the smallest divisor of T above 1. Every layer has the
// same global parameters (LayerHarness draws global expert tensors and keeps its shard).
//
// Equality (tests/testing/cross_path.h): the layouts differ in summation order only (expert GEMM
// rows, gradient sums over ranks, AC cluster sums), so the routing decisions (experts, capacity
// slots, SparseMixer sets) are compared first and must be equal, then the values agree within
// kEpTolerance (cross_path.h's kF64LayerTolerance).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "comm/communicator.h"
#include "tests/testing/cross_path.h"
#include "types/moe_config.h"

namespace moe::testing {

inline constexpr double kEpTolerance = kF64LayerTolerance;

// Rank r's routing idx [T, K] i32 with K distinct experts per token, from a stream keyed by r.
Tensor seeded_routing(int rank, int64_t tokens, int64_t experts, int64_t k);
// K = 1, E = R routing whose exchange is uniform on some ranks and not on others: rank q sends
// `per_peer` tokens to every rank, and rank 1 sends `per_peer` more to itself (T_1 is larger).
// Only meaningful in dropless mode (capacity needs one T everywhere).
Tensor skewed_routing(int rank, int ranks, int64_t per_peer);

using RoutingFn = std::function<Tensor(int rank)>;

// Dispatcher identities (cfg must drop nothing): with identity experts and unit gates,
// combine(gather_back(dispatch(x))) == K x exactly; the rows each local expert receives equal the
// histogram of every rank's routing; and every received row is one its source rank sent.
// ep may be null (one rank).
Status check_dispatch_identity(const MoeLayerConfig& cfg, const RoutingFn& routing,
                               comm::Communicator* ep);

// The layer at EP = R (R = ep's size, 1 if null) against R independent single-rank layers holding
// the same T tokens each: this rank's output, input gradient, routing and capacity slots equal
// those of the single-rank layer over its tokens; its dense (router) gradients equal that layer's;
// its expert-shard gradients equal the same slice of the sum of all R single-rank gradients. In
// capacity mode the dropped (t, k) also equal an independent count (capacity per source rank).
// `dropped_slots` (may be null) receives this rank's dropped assignments.
Status check_layer_matches_single_rank(const MoeLayerConfig& cfg, int64_t tokens,
                                       comm::Communicator* ep, int64_t* dropped_slots);

// The rows one rank's forward dispatch moves to its peers.
struct ExchangeCounts {
  int64_t sent = 0;            // distinct (token, peer rank) pairs among the kept assignments
  int64_t undeduplicated = 0;  // kept assignments to experts of peer ranks
};

// The deduplicating dispatch (cfg.max_ep_ranks > 0) against the same layer without it, at the same
// EP size: output, input gradients and every parameter gradient bit for bit (the expert rows are
// the same rows, and the backward is unchanged); the statistics' exchange counters equal
// ExchangeCounts counted from this rank's routing alone (capacity slots by brute force), and the
// layer without deduplication counts nothing; then check_layer_matches_single_rank with
// deduplication. `counts` (may be null) receives this rank's expected counts.
Status check_dedup_matches_plain(const MoeLayerConfig& cfg, int64_t tokens, comm::Communicator* ep,
                                 ExchangeCounts* counts);

// Global statistics (cfg.ac.global_stats, BalanceScope::kGlobal) with stats_comm = ep: the layer
// at EP = R equals ONE rank processing all R*T tokens: the AC metric, the aux losses (the
// sequence-wise one a mean over every rank's sequences), this rank's rows of the output and input
// gradient, its expert-shard gradients, and the sum over ranks of the router gradients (each rank
// passes aux_scale = 1/R, as the trainer does). cfg must drop nothing.
Status check_global_matches_all_tokens(const MoeLayerConfig& cfg, int64_t tokens,
                                       comm::Communicator& ep);

// A forward where the last rank holds a different token count (so a different capacity) must give
// kInvalidArgument naming the capacity on every rank; a matched forward afterwards must succeed.
Status check_capacity_mismatch_reported(comm::Communicator& ep);

// Named configurations (all f64-harness sized: D = 4, F = 5, E = 4).
std::vector<std::string> single_rank_variants();  // for check_layer_matches_single_rank
std::vector<std::string> global_variants();       // for check_global_matches_all_tokens
MoeLayerConfig ep_variant(const std::string& name);
// For check_dedup_matches_plain: E = 8, top-k k, capacity factor 1 (assignments dropped) or
// dropless, max_ep_ranks = 2.
MoeLayerConfig dedup_variant(bool dropless, int64_t k);

}  // namespace moe::testing
