#include "tests/core/trainer_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/data/text_reader.h"
#include "proto/run_convert.h"

namespace moe::testing {

std::vector<std::string> config_families() {
  std::vector<std::string> names;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(MOE_SOURCE_DIR) + "/configs")) {
    if (e.path().extension() == ".pbtxt") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string family_config_path(const std::string& family) {
  return std::string(MOE_SOURCE_DIR) + "/configs/" + family + ".pbtxt";
}
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string d =
      (fs::temp_directory_path() / ("momoe_" + name + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string write_small_corpus(const std::string& dir, int train_lines) {
  StatusOr<std::string> text = data::read_text_file(std::string(MOE_SOURCE_DIR) + "/data/brown/valid.txt.gz");
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
data { train: ")" + corpus_dir + R"(/train.txt" valid: ")" + corpus_dir + R"(/valid.txt"
       test: ")" + corpus_dir + R"(/test.txt" vocab_max_size: 1500 }
)" + extra;
  return parse_run_config(text, "tiny.pbtxt", overrides, ep);
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
  StatusOr<Tensor> host = model.context().read_back(p.master);
  EXPECT_TRUE(host.ok()) << host.status().to_string();
  const float* v = host->data<float>();
  return std::vector<double>(v, v + p.numel());
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

}  // namespace moe::testing
