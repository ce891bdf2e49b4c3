#include "tests/core/trainer_test_util.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/data/text_reader.h"
#include "proto/run_convert.h"

namespace moe::testing {
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
  return o;
}

std::vector<double> flat_parameters(TransformerLM& model) {
  std::vector<double> out;
  for (const auto& p : model.params().all()) {
    const float* v = p->value.data<float>();
    out.insert(out.end(), v, v + p->value.numel());
  }
  return out;
}

}  // namespace moe::testing
