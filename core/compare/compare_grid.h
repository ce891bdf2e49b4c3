// momoe-compare's grid: the variants of a comparison (each a name and `--set` overrides of one
// base config, or its own config file), the seeds, and the summary of the finished runs (final
// clean and attacked perplexity, steps to reach given losses, mean and spread over seeds) as
// Markdown and CSV.
//
// A grid file has one variant per line: a name, then whitespace-separated KEY=VALUE overrides;
// `config=PATH` gives the variant its own base config. '#' starts a comment.
//     smoe        model.arch=sgsgsg
//     momentum    model.arch=smsmsm
//     sparsemixer model.arch=sgsgsg model.moe.top_k=1 model.moe.sparsemixer.enabled=true
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "types/run_config.h"
#include "types/step_stats.h"

namespace moe {

struct CompareVariant {
  std::string name;                    // letters, digits, '-', '_', '+', '.'
  std::string config;                  // base config file ("" = the grid's)
  std::vector<std::string> overrides;  // KEY=VALUE, applied after the grid's common overrides
};

struct CompareGrid {
  std::string base_config;
  std::vector<std::string> common;  // overrides for every variant (--set)
  std::vector<CompareVariant> variants;
  std::vector<uint64_t> seeds;
};

// One variant from "NAME KEY=VALUE ..." (a grid-file line or a --variant flag).
StatusOr<CompareVariant> parse_variant(const std::string& spec);
// Every variant of a grid file's text (`source` names it in messages); at least one.
StatusOr<std::vector<CompareVariant>> parse_grid_text(const std::string& text,
                                                      const std::string& source);
// "1,2,3" -> {1, 2, 3}; at least one, no duplicates.
StatusOr<std::vector<uint64_t>> parse_seeds(const std::string& list);

// The built-in grids: "papers" (the seven routing and residual variants of the four papers on a
// quick-start-sized model under the papers' settings: dropless, each paper's balance loss, the AC
// gate of the reference code; about 30 minutes on 2 CPU cores), "papers-capacity" (the same
// variants with capacity 1.25 and the balance loss at 0.01: what changes when experts have a
// capacity), "gpu-medium" (the papers' 6-layer medium models, sized for one GPU; configs/papers
// has each paper's own settings) and "modern" (Mixtral, Qwen2-MoE, Qwen3-MoE and DeepSeek-V3's
// recipes of configs/modern beside MomentumSMoE, AdamSMoE, ACMoE and SparseMixer, all on the block
// of current models at the quick start's size). kInvalidArgument naming the known presets
// otherwise.
struct ComparePreset {
  std::string base_config;  // relative to the source tree's configs/
  std::vector<std::string> common;
  std::vector<CompareVariant> variants;
};
StatusOr<ComparePreset> compare_preset(const std::string& name);
// A preset's grid: its base config and the variants' own configs are named relative to
// `config_dir` (the source tree's configs/); no seeds yet.
CompareGrid grid_of_preset(const ComparePreset& preset, const std::string& config_dir);

// Each variant's resolved config for `seed` (the base, the common overrides, the variant's
// overrides, train.seed). Refuses duplicate names, a variant whose overrides do not apply (naming
// it), and variants trained at different budgets (train.steps x batch_size x seq_len tokens),
// since their numbers would not compare.
StatusOr<std::vector<RunConfig>> resolve_grid(const CompareGrid& grid, uint64_t seed);

// What one finished run reports.
struct CompareRun {
  std::string variant;
  uint64_t seed = 0;
  bool ok = false;
  std::string error;                               // why the run failed
  std::vector<std::pair<int64_t, double>> losses;  // (step, training loss)
  double valid_ppl = NAN, attacked_valid_ppl = NAN;
  double valid_word_ppl = NAN, valid_bits_per_byte = NAN;  // comparable across tokenizers
  double valid_unknown_fraction = NAN;  // ... only at equal <unk> shares of the valid text
  // Balance over the run's last kBalanceSteps training steps (means over steps of the means over
  // MoE layers): the busiest expert's load over the mean load, the share of assignments dropped,
  // and loss-free balancing's bias spread (max - min over experts; NaN without one).
  double busiest = NAN, dropped = NAN, bias_spread = NAN;
};
inline constexpr int64_t kBalanceSteps = 50;

// A run's record from its stats.pb records: the per-step losses and the last evaluation.
CompareRun summarize_run(const std::string& variant, uint64_t seed,
                         const std::vector<StepStatsInfo>& steps);

// The first step at which the mean loss of the last `window` steps is <= target; -1 if never.
int64_t steps_to_loss(const std::vector<std::pair<int64_t, double>>& losses, double target,
                      int window = 10);

// The comparison table (one row per variant, in grid order): runs, clean and attacked valid
// perplexity as mean +- sample standard deviation over seeds (the mean alone for one seed), and
// the mean steps to each target loss (with how many seeds reached it). When the finished runs'
// validation texts have different <unk> shares (variants with other tokenizers or vocabularies),
// a note after the table names them: per-word perplexity and bits per byte do not compare then.
std::string compare_markdown(const std::vector<CompareVariant>& variants,
                             const std::vector<CompareRun>& runs,
                             const std::vector<double>& target_losses);
// One row per run: variant, seed, ok, valid_ppl, attacked_valid_ppl, final_loss, valid_word_ppl,
// valid_bits_per_byte, valid_unknown_fraction, steps_to_loss_<target>..., overrides (the variant's
// KEY=VALUE list and its own config, quoted).
std::string compare_csv(const std::vector<CompareVariant>& variants,
                        const std::vector<CompareRun>& runs,
                        const std::vector<double>& target_losses);
// The balance table (one row per variant, in grid order): the busiest expert over the mean, the
// dropped share and the bias spread of CompareRun, each as mean +- sample standard deviation
// over the variant's finished runs ("-" where a variant has none).
std::string balance_markdown(const std::vector<CompareVariant>& variants,
                             const std::vector<CompareRun>& runs);
// The "## Variants" section of summary.md: each variant's config and overrides.
std::string variants_markdown(const std::vector<CompareVariant>& variants);
// Long format for plotting: variant,seed,step,loss.
std::string curves_csv(const std::vector<CompareRun>& runs);

// One run as runs.csv records it: what a comparison against another grid needs.
struct CompareRow {
  std::string variant;
  uint64_t seed = 0;
  bool ok = false;
  double valid_ppl = NAN, attacked_valid_ppl = NAN, final_loss = NAN;
};
// The rows of a runs.csv written by compare_csv (`source` names the file in messages). Columns are
// found by name; a "-" value reads as NaN. Refuses a file without runs, a (variant, seed) twice,
// and a value that does not read, naming the line and the column.
StatusOr<std::vector<CompareRow>> parse_runs_csv(const std::string& text,
                                                 const std::string& source);
// The rows of the finished runs (ok, its final loss from the curve).
std::vector<CompareRow> compare_rows(const std::vector<CompareRun>& runs);
// The baseline variant a variant compares with: the same name, else the name before its first
// '+' ("smoe+capacity" against "smoe"); "" when the baseline has neither.
std::string baseline_variant(const std::string& name, const std::vector<CompareRow>& baseline);
// The variants that would pair with no finished baseline run at any of `seeds`.
std::vector<std::string> unpaired_variants(const std::vector<std::string>& variants,
                                           const std::vector<uint64_t>& seeds,
                                           const std::vector<CompareRow>& baseline);
// Each variant of a grid against its baseline variant in another grid (`baseline_label` names it).
// Runs pair by seed (both finished with a clean perplexity); per variant: the paired seeds, both
// grids' mean valid perplexity over them, and the mean +- sample standard deviation of the paired
// differences (this - baseline) of the clean and attacked perplexity and the final loss. Variants
// without a baseline variant are listed after the table.
std::string baseline_markdown(const std::vector<CompareRow>& runs,
                              const std::vector<CompareRow>& baseline,
                              const std::string& baseline_label);

}  // namespace moe
