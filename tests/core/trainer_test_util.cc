#include "tests/core/trainer_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "core/data/text_reader.h"
#include "proto/run_convert.h"
#include "tests/testing/cross_path.h"

namespace moe::testing {

std::string source_root() {
  const char* env = std::getenv("MOMOE_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(MOE_SOURCE_DIR);
}

std::vector<std::string> config_families(const std::string& folder) {
  std::vector<std::string> names;
  const std::string prefix = folder.empty() ? "" : folder + "/";
  for (const auto& e : std::filesystem::directory_iterator(source_root() + "/configs/" + folder)) {
    if (e.path().extension() == ".pbtxt") names.push_back(prefix + e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string family_config_path(const std::string& family) {
  return source_root() + "/configs/" + family + ".pbtxt";
}
namespace fs = std::filesystem;

namespace {

// Every directory fresh_dir made in this process, removed when the process exits normally: after
// the last test, whether it passed or failed (tests also remove theirs as they go, to bound the
// disk they use; a removal skipped by a failed assertion is caught here).
class MadeDirectories {
 public:
  ~MadeDirectories() {
    for (const std::string& d : dirs_) {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  }
  void add(const std::string& d) {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::find(dirs_.begin(), dirs_.end(), d) == dirs_.end()) dirs_.push_back(d);
  }

 private:
  std::mutex mu_;
  std::vector<std::string> dirs_;
};

MadeDirectories& made_directories() {
  static MadeDirectories dirs;
  return dirs;
}

}  // namespace

std::string fresh_dir(const std::string& name) {
  std::string leaf = "momoe_" + name + "_" + std::to_string(::getpid());
  std::replace(leaf.begin(), leaf.end(), '/', '_');  // a family such as "modern/mixtral"
  const std::string d = (fs::temp_directory_path() / leaf).string();
  made_directories().add(d);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string write_small_corpus(const std::string& dir, int train_lines) {
  StatusOr<std::string> text = data::read_text_file(source_root() + "/data/brown/valid.txt.gz");
  if (!text.ok()) return "";
  std::istringstream in(*text);
  std::string line;
  std::ofstream train(dir + "/train.txt"), valid(dir + "/valid.txt"), test(dir + "/test.txt");
  int n = 0;
  while (std::getline(in, line) && n < train_lines + 400) {
    (n < train_lines ? train : n < train_lines + 200 ? valid : test) << line << "\n";
    ++n;
  }
  return "data { train: \"" + dir + "/train.txt\" valid: \"" + dir + "/valid.txt\" test: \"" + dir +
         "/test.txt\" vocab_max_size: 1500 }\n";
}

StatusOr<RunConfig> small_family_config(const std::string& family, const std::string& corpus_dir,
                                        int64_t steps, const std::vector<std::string>& extra) {
  std::vector<std::string> set = {"model.d_model=32",
                                  "model.n_heads=2",
                                  "model.seq_len=16",
                                  "model.d_ff=48",
                                  "model.moe.d_expert=32",
                                  "model.moe.num_experts=4",
                                  "train.batch_size=8",
                                  "train.steps=" + std::to_string(steps),
                                  "train.eval_every=0",
                                  "train.checkpoint_every=0",
                                  "train.probe_every=10",
                                  "train.schedule.warmup_steps=10",
                                  "data.train=" + corpus_dir + "/train.txt",
                                  "data.valid=" + corpus_dir + "/valid.txt",
                                  "data.test=" + corpus_dir + "/test.txt",
                                  "data.vocab_max_size=1500"};
  // Routing that needs more experts than the small size's 4: top 6 of 16 in groups of 4
  // (DeepSeek-V3), top 8 of 16 (Qwen3-MoE).
  if (family == "modern/deepseek-v3") {
    set.insert(set.end(),
               {"model.moe.num_experts=16", "model.moe.d_expert=16", "model.moe.d_shared=16"});
  }
  if (family == "modern/qwen3-moe") {
    set.insert(set.end(), {"model.moe.num_experts=16", "model.moe.d_expert=16"});
  }
  set.insert(set.end(), extra.begin(), extra.end());
  return load_run_config(family_config_path(family), set, 0);
}

StatusOr<RunConfig> tiny_config(const std::string& corpus_dir, const std::string& extra,
                                const std::vector<std::string>& overrides, int ep) {
  const std::string text = R"(
model {
  d_model: 32 n_heads: 2 seq_len: 16 arch: "sgsmsr" dropout: 0.1
  moe { num_experts: 4 top_k: 2 d_expert: 32 capacity_factor: 2.0 balance_loss_coef: 0.01 z_loss_coef: 0.001 }
}
train {
  steps: 40 batch_size: 8 optimizer { lr: 3e-3 } schedule { warmup_steps: 5 }
  eval_sequences: 64 probe_every: 5 probe_sequences: 2 seed: 7
}
data { train: ")" + corpus_dir +
                           R"(/train.txt" valid: ")" + corpus_dir + R"(/valid.txt"
       test: ")" + corpus_dir +
                           R"(/test.txt" vocab_max_size: 1500 }
)" + extra;
  // MOMOE_TEST_DEVICE=CUDA (tests/run_gpu.sh) reruns the layout tests with GPU ranks.
  std::vector<std::string> all = overrides;
  if (const char* device = std::getenv("MOMOE_TEST_DEVICE"); device != nullptr && *device != '\0') {
    all.insert(all.begin(), std::string("train.device=") + device);
  }
  return parse_run_config(text, "tiny.pbtxt", all, ep);
}

TrainerOptions quiet_options(const std::string& run_dir, bool resume) {
  TrainerOptions o;
  o.run_dir = run_dir;
  o.resume = resume;
  o.progress = nullptr;
  o.context.guard_host_access = true;
  return o;
}

double step_loss(Trainer& t) {
  StatusOr<StepStatsInfo> s = t.step();
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? s->loss : std::nan("");
}

std::vector<double> parameter_values(TransformerLM& model, const Parameter& p) {
  if (p.master.numel() != p.numel()) {
    ADD_FAILURE() << p.name << ": its master is sharded (read it with trainer_masters)";
    return std::vector<double>(p.numel(), std::nan(""));
  }
  StatusOr<Tensor> host = model.context().read_back(p.master);
  EXPECT_TRUE(host.ok()) << host.status().to_string();
  const float* v = host->data<float>();
  return std::vector<double>(v, v + p.numel());
}

std::vector<std::vector<double>> trainer_masters(Trainer& t) {
  const ParameterSet& params = t.model().params();
  std::vector<std::vector<double>> out;
  Tensor whole[2];
  for (ParamKind kind : {ParamKind::kDense, ParamKind::kExpert}) {
    StatusOr<Tensor> m = t.optimizer().whole_masters(kind);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (m.ok()) whole[kind == ParamKind::kDense ? 0 : 1] = std::move(*m);
  }
  for (const auto& p : params.all()) {
    const Tensor& arena = whole[p->kind == ParamKind::kDense ? 0 : 1];
    if (arena.numel() < p->arena_offset + p->numel()) {
      out.emplace_back(p->numel(), std::nan(""));
      continue;
    }
    const float* v = arena.data<float>() + p->arena_offset;
    out.emplace_back(v, v + p->numel());
  }
  return out;
}

std::vector<double> parameter_working_values(TransformerLM& model, const Parameter& p) {
  StatusOr<Tensor> host = model.context().read_back(p.value);
  EXPECT_TRUE(host.ok()) << host.status().to_string();
  if (!host.ok()) return {};
  std::vector<double> out(p.numel());
  for (int64_t i = 0; i < p.numel(); ++i) {
    out[i] = host->dtype() == DType::kBF16 ? static_cast<float>(host->data<bf16>()[i])
                                           : host->data<float>()[i];
  }
  return out;
}

std::vector<double> flat_parameters(TransformerLM& model) {
  std::vector<double> out;
  for (const auto& p : model.params().all()) {
    const std::vector<double> v = parameter_values(model, *p);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

void set_parameter(TransformerLM& model, const std::string& name, int64_t index, float value) {
  Parameter* p = model.params().find(name);
  ASSERT_NE(p, nullptr) << name;
  Context& ctx = model.context();
  StatusOr<Tensor> host = ctx.read_back(p->master);
  ASSERT_TRUE(host.ok());
  host->data<float>()[index] = value;
  ASSERT_TRUE(ctx.copy(*host, p->master).ok());
  ASSERT_TRUE(model.params().refresh_working().ok());
  ASSERT_TRUE(ctx.synchronize().ok());
}

void TrainingRecord::add(const StepStatsInfo& s) {
  losses.push_back(s.loss);
  grad_norms.push_back(s.grad_norm);
  steps.push_back(s.layers);
}

void TrainingRecord::append(const TrainingRecord& later) {
  losses.insert(losses.end(), later.losses.begin(), later.losses.end());
  grad_norms.insert(grad_norms.end(), later.grad_norms.begin(), later.grad_norms.end());
  steps.insert(steps.end(), later.steps.begin(), later.steps.end());
}

TrainingScale training_scale(const RunConfig& cfg, int64_t vocab) {
  TrainingScale s;
  s.eps = kF32Eps;
  s.depth = forward_depth(cfg.model).total;
  s.tokens = cfg.train.batch_size * cfg.model.seq_len;
  s.vocab = vocab;
  const OptimizerConfig& o = cfg.train.optimizer;
  s.lr = o.lr;
  // |m_hat / sqrt(v_hat)| <= (1 - b1) / sqrt((1 - b2)(1 - b1^2 / b2)) (Cauchy-Schwarz on the
  // moving averages; the bias corrections only lower it).
  s.adam_step = o.kind == OptimizerKind::kAdamW
                    ? (1 - o.beta1) / std::sqrt((1 - o.beta2) * (1 - o.beta1 * o.beta1 / o.beta2))
                    : 0.0;
  return s;
}

namespace {

int64_t count_difference(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  int64_t moved = 0;
  for (size_t e = 0; e < std::max(a.size(), b.size()); ++e) {
    moved += std::abs((e < a.size() ? a[e] : 0) - (e < b.size() ? b[e] : 0));
  }
  return (moved + 1) / 2;  // a token that moves lowers one count and raises another
}

// Tokens whose decisions differ in one layer and step, at least: the largest difference any
// counter shows.
int64_t moved_tokens(const RouterStatsInfo& a, const RouterStatsInfo& b) {
  const int64_t counters[] = {count_difference(a.expert_load, b.expert_load),
                              count_difference(a.cluster_size, b.cluster_size),
                              std::abs(a.dropped_slots - b.dropped_slots),
                              std::abs(a.fully_dropped_tokens - b.fully_dropped_tokens),
                              std::abs(a.single_expert_tokens - b.single_expert_tokens),
                              std::abs(a.non_argmax_tokens - b.non_argmax_tokens),
                              std::abs(a.halved_tokens - b.halved_tokens),
                              std::abs(a.tiny_clusters - b.tiny_clusters)};
  return *std::max_element(std::begin(counters), std::end(counters));
}

}  // namespace

RoutingDifference routing_difference(const TrainingRecord& a, const TrainingRecord& b) {
  RoutingDifference d;
  for (size_t step = 0; step < std::min(a.steps.size(), b.steps.size()); ++step) {
    int64_t moved = 0;
    for (size_t l = 0; l < std::min(a.steps[step].size(), b.steps[step].size()); ++l) {
      moved += moved_tokens(a.steps[step][l], b.steps[step][l]);
    }
    if (moved > 0 && d.first < 0) d.first = static_cast<int64_t>(step);
    d.moved += moved;
    d.moved_by_step.push_back(d.moved);
  }
  return d;
}

double expect_same_training(const TrainingRecord& a, const TrainingRecord& b,
                            const TrainingScale& scale, const std::string& what) {
  EXPECT_EQ(a.losses.size(), b.losses.size()) << what;
  EXPECT_EQ(a.steps.size(), b.steps.size()) << what;
  const size_t steps = std::min({a.losses.size(), b.losses.size(), a.steps.size(), b.steps.size()});
  for (size_t step = 0; step < steps; ++step) {
    EXPECT_EQ(a.steps[step].size(), b.steps[step].size()) << what << " step " << step;
    for (size_t l = 0; l < std::min(a.steps[step].size(), b.steps[step].size()); ++l) {
      EXPECT_EQ(a.steps[step][l].tokens, b.steps[step][l].tokens)
          << what << " step " << step << " layer " << l;
      EXPECT_EQ(a.steps[step][l].slots, b.steps[step][l].slots)
          << what << " step " << step << " layer " << l;
    }
  }
  const RoutingDifference d = routing_difference(a, b);
  EXPECT_LE(d.moved, 8 * static_cast<int64_t>(steps))
      << what << ": " << d.moved << " tokens routed differently from step " << d.first
      << " on (near-ties are rare; a bug moves many)";
  double worst = 0;
  for (size_t i = 0; i < steps; ++i) {
    const double loss = a.losses[i];
    double bound = loss_tolerance(scale.eps, scale.depth * static_cast<double>(i + 1), loss);
    const int64_t moved = i < d.moved_by_step.size() ? d.moved_by_step[i] : 0;
    bound += static_cast<double>(moved) * 2 * std::log(static_cast<double>(scale.vocab)) /
             static_cast<double>(scale.tokens);
    const double diff = std::fabs(a.losses[i] - b.losses[i]);
    worst = std::max(worst, diff / std::fabs(loss));
    EXPECT_LE(diff, bound) << what << " step " << i << ": " << a.losses[i] << " vs " << b.losses[i]
                           << (moved > 0 ? " (after a routing flip)" : "");
    if (moved == 0 && i < a.grad_norms.size() && i < b.grad_norms.size()) {
      const double gn = a.grad_norms[i];
      EXPECT_LE(std::fabs(gn - b.grad_norms[i]),
                rounding_tolerance(scale.eps, 2.0 * scale.depth * static_cast<double>(i + 1), gn))
          << what << " step " << i << ": gradient norm " << gn << " vs " << b.grad_norms[i];
    }
  }
  return worst;
}

void expect_parameters_close(const std::vector<double>& a, const std::vector<double>& b,
                             const RoutingDifference& d, const TrainingScale& scale, int64_t steps,
                             const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  std::vector<double> diff(a.size());
  for (size_t i = 0; i < a.size(); ++i) diff[i] = std::fabs(a[i] - b[i]);
  if (diff.empty()) return;
  const double hard = 2.0 * static_cast<double>(steps) * scale.adam_step * scale.lr;
  int64_t past_a_step = 0;
  for (size_t i = 0; i < diff.size(); ++i) {
    if (std::isnan(diff[i]) || (scale.adam_step > 0 && diff[i] > hard)) {
      ADD_FAILURE() << what << ": entry " << i << " differs by " << diff[i] << " (" << a[i]
                    << " vs " << b[i] << "; bound " << hard << ")";
      return;
    }
    past_a_step += diff[i] > scale.lr;
  }
  const auto n = static_cast<int64_t>(diff.size());
  const int64_t allowed = std::max<int64_t>(4, d.moved == 0 ? n / 32 : n / 4);
  EXPECT_LE(past_a_step, allowed) << what << ": " << past_a_step << " of " << n
                                  << " entries part by more than one step (lr " << scale.lr << ")";
  if (d.moved == 0 && scale.adam_step > 0) {
    std::nth_element(diff.begin(), diff.begin() + n / 2, diff.end());
    EXPECT_LE(diff[n / 2], hard * scale.eps * scale.depth)
        << what << ": the median entry differs by " << diff[n / 2];
  }
}

}  // namespace moe::testing
