// momoe-compare's grid: parsing (variants, grid files, seeds), the built-in presets, budget checks,
// the summary (steps to a loss, mean +- sample std over seeds) on hand-computed numbers, and the
// runs planned, collected and summarised into files.
#include "core/compare/compare_grid.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/compare/compare_runs.h"
#include "io/file_util.h"
#include "proto/stats_convert.h"
#include "tests/testing/status_expect.h"

namespace moe {
namespace {

using testing::expect_invalid;

TEST(CompareGridTest, ParsesVariantsGridFilesAndSeeds) {
  CompareVariant v = parse_variant("top1+sm  model.moe.top_k=1 config=a.pbtxt train.lr=2").value();
  EXPECT_EQ(v.name, "top1+sm");
  EXPECT_EQ(v.config, "a.pbtxt");
  EXPECT_EQ(v.overrides, (std::vector<std::string>{"model.moe.top_k=1", "train.lr=2"}));
  expect_invalid(parse_variant("").status(), {"empty variant"});
  expect_invalid(parse_variant("a/b model.arch=sg").status(), {"variant name 'a/b'"});
  expect_invalid(parse_variant("smoe model.arch").status(), {"variant smoe", "not KEY=VALUE"});

  const auto grid =
      parse_grid_text("# comment\nsmoe model.arch=sgsg  # plain\n\n  mom model.arch=smsm\n",
                      "g.txt")
          .value();
  ASSERT_EQ(grid.size(), 2u);
  EXPECT_EQ(grid[1].name, "mom");
  EXPECT_EQ(grid[0].overrides, std::vector<std::string>{"model.arch=sgsg"});
  expect_invalid(parse_grid_text("ok a=1\nbad b\n", "g.txt").status(),
                 {"g.txt:2", "not KEY=VALUE"});
  expect_invalid(parse_grid_text("# nothing\n", "g.txt").status(), {"g.txt", "no variant"});

  EXPECT_EQ(parse_seeds("3,1,2").value(), (std::vector<uint64_t>{3, 1, 2}));
  expect_invalid(parse_seeds("1,,2").status(), {"is not a seed"});
  expect_invalid(parse_seeds("1,x").status(), {"'x' is not a seed"});
  expect_invalid(parse_seeds("-1").status(), {"is not a seed"});
  expect_invalid(parse_seeds("2,2").status(), {"seed 2 appears twice"});
}

// A built-in preset as momoe-compare runs it from the source tree.
CompareGrid preset_grid(const std::string& name) {
  return grid_of_preset(compare_preset(name).value(), MOE_CONFIG_DIR);
}

// The papers preset trains each variant under its paper's settings; papers-capacity keeps the
// capacity and the balance loss everywhere.
TEST(CompareGridTest, ThePapersPresetHasEachPapersSettings) {
  for (const char* name : {"papers", "papers-capacity"}) {
    const bool paper = std::string(name) == "papers";
    const CompareGrid grid = preset_grid(name);
    StatusOr<std::vector<RunConfig>> cfgs = resolve_grid(grid, 1);
    ASSERT_TRUE(cfgs.ok()) << cfgs.status().to_string();
    for (size_t i = 0; i < cfgs->size(); ++i) {
      const RunConfig& c = (*cfgs)[i];
      const std::string& variant = grid.variants[i].name;
      SCOPED_TRACE(std::string(name) + " " + variant);
      EXPECT_EQ(c.train.steps, 600);
      EXPECT_EQ(c.train.grad_clip, paper ? 0.0 : 1.0);
      EXPECT_EQ(c.train.schedule, paper ? LrScheduleKind::kConstant : LrScheduleKind::kCosine);
      EXPECT_EQ(c.train.optimizer.weight_decay, 0);
      const bool momentum_family =
          variant == "smoe" || variant == "momentum" || variant == "adam" || variant == "robust";
      for (const BlockPlan& b : c.model.blocks) {
        if (!b.moe) continue;
        const MoeLayerConfig& m = b.moe_cfg;
        EXPECT_EQ(m.dropless, paper);
        EXPECT_EQ(m.balance_loss_coef, paper && momentum_family ? 0.0 : 0.01);
        EXPECT_EQ(m.z_loss_coef, 0);
        if (m.residual == ResidualKind::kAdam) {
          EXPECT_EQ(m.adam.eps_placement,
                    paper ? AdamEpsPlacement::kInsideSqrt : AdamEpsPlacement::kOutsideSqrt);
        }
        if (m.ac.enabled) {
          EXPECT_EQ(m.ac.logits, paper ? AcLogits::kUnitNormEmbeddings : AcLogits::kLinear);
          EXPECT_EQ(m.ac.min_cluster_size, paper ? 0 : 2);
        }
        if (m.sparsemixer.enabled) {
          EXPECT_EQ(m.sparsemixer.jitter, 0.1);
        }
      }
    }
  }
}

// The lines of `a`'s resolved config text that `b` lacks, trimmed ("dropless: true").
std::vector<std::string> lines_only_in(const std::string& a, const std::string& b) {
  auto lines = [](const std::string& text) {
    std::multiset<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      const size_t first = line.find_first_not_of(' ');
      if (first != std::string::npos) out.insert(line.substr(first));
    }
    return out;
  };
  std::multiset<std::string> in_b = lines(b);
  std::vector<std::string> out;
  for (const std::string& line : lines(a)) {
    auto it = in_b.find(line);
    if (it == in_b.end()) {
      out.push_back(line);
    } else {
      in_b.erase(it);
    }
  }
  return out;
}

// Each ablation is its papers variant with one departure put back to momoe's default: the
// resolved configs differ in exactly that setting (field by field, on the full config text).
TEST(CompareGridTest, EachAblationDepartsFromItsPapersVariantInOneSetting) {
  auto resolve = [](const char* name) {
    const CompareGrid grid = preset_grid(name);
    std::map<std::string, RunConfig> out;
    std::vector<RunConfig> cfgs = resolve_grid(grid, 3).value();
    for (size_t i = 0; i < cfgs.size(); ++i) out[grid.variants[i].name] = cfgs[i];
    return out;
  };
  const std::map<std::string, RunConfig> papers = resolve("papers");
  const std::map<std::string, RunConfig> ablations = resolve("papers-ablations");
  // variant -> the lines its papers variant has that the ablation replaces, and their new values.
  const std::map<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>>
      expected = {{"smoe+capacity", {{"dropless: true"}, {"dropless: false"}}},
                  {"momentum+capacity", {{"dropless: true"}, {"dropless: false"}}},
                  {"switch-top1+capacity", {{"dropless: true"}, {"dropless: false"}}},
                  {"sparsemixer-top1+capacity", {{"dropless: true"}, {"dropless: false"}}},
                  {"smoe+balance", {{"balance_loss_coef: 0"}, {"balance_loss_coef: 0.01"}}},
                  {"momentum+balance", {{"balance_loss_coef: 0"}, {"balance_loss_coef: 0.01"}}},
                  {"acmoe+momoe-gate",
                   {{"normalization: REFERENCE_CODE", "min_cluster_size: 0",
                     "logits: UNIT_NORM_EMBEDDINGS"},
                    {"normalization: PAPER", "min_cluster_size: 2", "logits: LINEAR"}}},
                  {"smoe+cosine-clip",
                   {{"kind: CONSTANT", "grad_clip: 0"}, {"kind: COSINE", "grad_clip: 1"}}},
                  {"momentum+cosine-clip",
                   {{"kind: CONSTANT", "grad_clip: 0"}, {"kind: COSINE", "grad_clip: 1"}}},
                  {"adam+cosine-clip",
                   {{"kind: CONSTANT", "grad_clip: 0"}, {"kind: COSINE", "grad_clip: 1"}}},
                  {"adam+momoe-layer",  // `reference_code` resolves to these two
                   {{"eps_placement: INSIDE_SQRT", "kappa: 1"},
                    {"eps_placement: OUTSIDE_SQRT", "kappa: 0"}}}};
  ASSERT_EQ(ablations.size(), expected.size());
  for (const auto& [name, ablation] : ablations) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(expected.count(name)) << "no expectation for this ablation";
    const std::string base = name.substr(0, name.find('+'));
    ASSERT_TRUE(papers.count(base)) << "no papers variant " << base;
    const RunConfig& paper = papers.at(base);
    std::vector<std::string> removed = lines_only_in(paper.text, ablation.text);
    std::vector<std::string> added = lines_only_in(ablation.text, paper.text);
    // Per-block settings repeat once per MoE block: compare the distinct lines.
    for (std::vector<std::string>* lines : {&removed, &added}) {
      std::sort(lines->begin(), lines->end());
      lines->erase(std::unique(lines->begin(), lines->end()), lines->end());
    }
    std::vector<std::string> want_removed = expected.at(name).first;
    std::vector<std::string> want_added = expected.at(name).second;
    std::sort(want_removed.begin(), want_removed.end());
    std::sort(want_added.begin(), want_added.end());
    EXPECT_EQ(removed, want_removed);
    EXPECT_EQ(added, want_added);
    EXPECT_EQ(ablation.train.seed, paper.train.seed);
  }
}

TEST(CompareGridTest, PresetsResolveAndBudgetsMustMatch) {
  for (const char* name :
       {"papers", "papers-capacity", "papers-ablations", "gpu-medium", "modern"}) {
    const CompareGrid grid = preset_grid(name);
    StatusOr<std::vector<RunConfig>> cfgs = resolve_grid(grid, 7);
    ASSERT_TRUE(cfgs.ok()) << name << ": " << cfgs.status().to_string();
    const std::string preset = name;
    EXPECT_EQ(cfgs->size(), preset == "papers-ablations" ? 11u : preset == "modern" ? 8u : 7u);
    EXPECT_EQ(cfgs->front().train.seed, 7u);
  }
  expect_invalid(compare_preset("nope").status(), {"unknown --preset 'nope'", "papers-capacity"});

  CompareGrid grid;
  grid.base_config = TINY_CONFIG;
  grid.variants = {parse_variant("a model.arch=sgsg").value(),
                   parse_variant("b model.arch=smsm train.steps=7").value()};
  expect_invalid(resolve_grid(grid, 1).status(),
                 {"mismatched budgets", "variant a trains", "variant b trains", "train.steps"});
  // The same tokens in other shapes are one budget.
  grid.variants[1] = parse_variant("b model.arch=smsm").value();
  EXPECT_TRUE(resolve_grid(grid, 1).ok());
  grid.variants[1] = parse_variant("b model.no_such_field=1").value();
  expect_invalid(resolve_grid(grid, 1).status(), {"variant b", "no_such_field"});
  grid.variants[1] = parse_variant("a model.arch=smsm").value();
  expect_invalid(resolve_grid(grid, 1).status(), {"'a' appears twice"});
  grid.variants.clear();
  expect_invalid(resolve_grid(grid, 1).status(), {"no variant"});
}

std::vector<std::pair<int64_t, double>> curve(std::vector<double> losses) {
  std::vector<std::pair<int64_t, double>> out;
  for (size_t i = 0; i < losses.size(); ++i) out.emplace_back(static_cast<int64_t>(i), losses[i]);
  return out;
}

TEST(CompareGridTest, StepsToLossUseTheTrailingMean) {
  // Window 2: means 9.5 (steps 0-1), 8.5, 7.5, 6.5: <= 7.5 first after step 3, i.e. 4 steps.
  const auto c = curve({10, 9, 8, 7, 6});
  EXPECT_EQ(steps_to_loss(c, 7.5, 2), 4);
  EXPECT_EQ(steps_to_loss(c, 9.5, 2), 2);
  EXPECT_EQ(steps_to_loss(c, 1.0, 2), -1);
  EXPECT_EQ(steps_to_loss(curve({1}), 5.0, 2), -1);  // fewer steps than the window
}

// The balance table: over the last kBalanceSteps training records (older ones and evaluations
// left out), the mean over layers of the busiest load and the dropped share, and the bias spread
// where a layer has loss-free balancing's bias.
TEST(CompareGridTest, BalanceTableFromTheLastStepsRecords) {
  auto step = [](int64_t s, double busiest, double dropped, std::vector<double> bias) {
    StepStatsInfo i;
    i.step = s;
    i.loss = 5;
    RouterStatsInfo a, b;
    a.max_load = busiest;
    a.dropped_fraction = dropped;
    a.score_bias = bias;
    b.max_load = busiest + 1;
    b.dropped_fraction = 0;
    i.layers = {a, b};
    return i;
  };
  std::vector<StepStatsInfo> s1;
  for (int i = 0; i < 10; ++i) s1.push_back(step(i, 9.0, 0.5, {}));  // older than the window
  for (int64_t i = 10; i < 10 + kBalanceSteps; ++i) s1.push_back(step(i, 1.5, 0.1, {0.25, -0.5}));
  StepStatsInfo eval;
  eval.step = 10 + kBalanceSteps;
  eval.valid_ppl = 50;
  s1.push_back(eval);
  std::vector<StepStatsInfo> s2;
  for (int i = 0; i < 4; ++i) s2.push_back(step(i, 2.5, 0.3, {1.0, 0.0, 0.5}));
  const std::vector<CompareRun> runs = {summarize_run("lf", 1, s1), summarize_run("lf", 2, s2),
                                        summarize_run("plain", 1, {step(0, 1.0, 0, {})})};
  // Seed 1: busiest (1.5 + 2.5) / 2 = 2, dropped (0.1 + 0) / 2 = 5%, spread 0.75 (one layer).
  EXPECT_DOUBLE_EQ(runs[0].busiest, 2.0);
  EXPECT_DOUBLE_EQ(runs[0].dropped, 0.05);
  EXPECT_DOUBLE_EQ(runs[0].bias_spread, 0.75);
  // Seed 2: busiest 3, dropped 15%, spread 1.
  EXPECT_DOUBLE_EQ(runs[1].busiest, 3.0);
  EXPECT_TRUE(std::isnan(runs[2].bias_spread));
  const std::string md = balance_markdown(
      {parse_variant("lf").value(), parse_variant("plain").value(), parse_variant("none").value()},
      runs);
  EXPECT_NE(md.find("| lf | 2.50 +- 0.71 | 10.00 +- 7.07% | 0.8750 +- 0.1768 |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| plain | 1.50 | 0.00% | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("| none | - | - | - |"), std::string::npos) << md;
}

TEST(CompareGridTest, SummaryTablesFromRunRecords) {
  auto step = [](int64_t s, double loss) {
    StepStatsInfo i;
    i.step = s;
    i.loss = loss;
    return i;
  };
  auto eval = [](int64_t s, double ppl, double att) {
    StepStatsInfo i;
    i.step = s;
    i.valid_ppl = ppl;
    i.attacked_valid_ppl = att;
    return i;
  };
  std::vector<StepStatsInfo> s1, s2;
  for (int i = 0; i < 12; ++i) s1.push_back(step(i, 8.0 - 0.25 * i));
  s1.push_back(eval(12, 100.0, 120.0));
  s1.back().valid_word_ppl = 100.0;
  s1.back().valid_bits_per_byte = 1.25;
  s1.back().valid_unknown_fraction = 0.25;
  for (int i = 0; i < 12; ++i) s2.push_back(step(i, 8.0 - 0.5 * i));
  s2.push_back(eval(12, 110.0, 124.0));
  StepStatsInfo skipped = step(12, 1.0);
  skipped.skipped = true;
  s2.push_back(skipped);
  std::vector<CompareRun> runs = {summarize_run("a", 1, s1), summarize_run("a", 2, s2),
                                  summarize_run("b", 1, {})};
  EXPECT_TRUE(runs[0].ok);
  EXPECT_EQ(runs[1].losses.size(), 12u);  // the skipped step is not a loss
  EXPECT_FALSE(runs[2].ok);
  // Seed 1: trailing 10-step means fall below 6.5 first at step 10 (mean of 8-0.25*(1..10) =
  // 6.625 at step 10, 6.375 at step 11: 12 steps); seed 2 reaches it at step 9 (10 steps).
  EXPECT_EQ(steps_to_loss(runs[0].losses, 6.5), 12);
  EXPECT_EQ(steps_to_loss(runs[1].losses, 6.5), 10);
  const std::vector<CompareVariant> variants = {parse_variant("a").value(),
                                                parse_variant("b").value()};
  const std::string md = compare_markdown(variants, runs, {6.5, 5.0});
  // ppl mean 105, sample std sqrt(50) = 7.07; attacked 122 +- 2.83; final losses 5.25 and 2.5.
  EXPECT_NE(
      md.find("| a | 2 | 105.00 +- 7.07 | 122.00 +- 2.83 | 3.88 +- 1.94 | 11 | 12 (1 of 2) |"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("| b | 0 of 1 | - | - | - | not reached | not reached |"), std::string::npos)
      << md;
  EXPECT_EQ(md.find("<unk>"), std::string::npos) << md;  // one known <unk> share: nothing to flag
  std::vector<CompareVariant> with_overrides = variants;
  with_overrides[0].overrides = {"model.arch=sgsg", "data.train=a \"b\".txt"};
  const std::string csv = compare_csv(with_overrides, runs, {6.5});
  EXPECT_EQ(csv.find("variant,seed,ok,valid_ppl,attacked_valid_ppl,final_loss,valid_word_ppl,"
                     "valid_bits_per_byte,valid_unknown_fraction,steps_to_loss_6.5,overrides\n"),
            0u)
      << csv;
  EXPECT_NE(csv.find("a,1,1,100.0000,120.0000,5.25000,100.0000,1.25000,0.250000,12,"
                     "\"model.arch=sgsg data.train=a \"\"b\"\".txt\"\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find("a,2,1,110.0000,124.0000,2.50000,-,-,-,10,\"model.arch"), std::string::npos)
      << csv;
  EXPECT_NE(csv.find("b,1,0,-,-,-,-,-,-,-1,\"\"\n"), std::string::npos) << csv;
  const std::string vmd = variants_markdown(with_overrides);
  EXPECT_NE(vmd.find("| a | `model.arch=sgsg` `data.train=a \"b\".txt` |"), std::string::npos)
      << vmd;
  EXPECT_NE(vmd.find("| b | (the base config) |"), std::string::npos) << vmd;
  EXPECT_EQ(curves_csv(runs).find("variant,seed,step,loss\na,1,0,8.000000\n"), 0u);

  // Variants whose validation texts have different <unk> shares (another tokenizer): the table
  // says that per-word measures do not compare, naming each share.
  std::vector<StepStatsInfo> s3 = s1;
  s3.back().valid_unknown_fraction = 0.0;
  std::vector<CompareRun> mixed = runs;
  mixed.push_back(summarize_run("b", 2, s3));
  const std::string mixed_md = compare_markdown(variants, mixed, {6.5});
  EXPECT_NE(mixed_md.find("Per-word measures do not compare here"), std::string::npos) << mixed_md;
  EXPECT_NE(mixed_md.find("a 25.00%, b 0.00%"), std::string::npos) << mixed_md;

  // runs.csv reads back into the rows the runs give (quoted overrides with commas and quotes).
  with_overrides[1].overrides = {"data.train=x,y"};
  const std::vector<CompareRow> rows =
      parse_runs_csv(compare_csv(with_overrides, runs, {6.5}), "runs.csv").value();
  const std::vector<CompareRow> direct = compare_rows(runs);
  ASSERT_EQ(rows.size(), 3u);
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(rows[i].variant, direct[i].variant);
    EXPECT_EQ(rows[i].seed, direct[i].seed);
    EXPECT_EQ(rows[i].ok, direct[i].ok);
    for (auto [a, b] : {std::pair{rows[i].valid_ppl, direct[i].valid_ppl},
                        {rows[i].attacked_valid_ppl, direct[i].attacked_valid_ppl},
                        {rows[i].final_loss, direct[i].final_loss}}) {
      if (std::isnan(b)) {
        EXPECT_TRUE(std::isnan(a));
      } else {
        EXPECT_NEAR(a, b, 1e-4);
      }
    }
  }
}

TEST(CompareGridTest, RunsCsvIsReadByColumnNameAndBadFilesAreNamed) {
  const std::string csv =
      "seed,variant,ok,valid_ppl,note\r\n"  // another column order, no attacked or loss column
      "3,a,1,12.5,\"x,\"\"y\"\"\"\r\n"
      "\r\n"
      "  \n"
      "4,a,0,-,\n";
  const std::vector<CompareRow> rows = parse_runs_csv(csv, "r.csv").value();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].variant, "a");
  EXPECT_EQ(rows[0].seed, 3u);
  EXPECT_EQ(rows[0].valid_ppl, 12.5);
  EXPECT_TRUE(std::isnan(rows[0].final_loss));
  EXPECT_FALSE(rows[1].ok);
  EXPECT_TRUE(std::isnan(rows[1].valid_ppl));
  const std::string head = "variant,seed,ok,valid_ppl\n";
  expect_invalid(parse_runs_csv("", "r.csv").status(), {"r.csv", "empty"});
  expect_invalid(parse_runs_csv(head, "r.csv").status(), {"r.csv", "no run"});
  expect_invalid(parse_runs_csv("variant,seed,ok\n", "r.csv").status(),
                 {"r.csv", "no 'valid_ppl' column"});
  expect_invalid(parse_runs_csv(head + "a,1,1\n", "r.csv").status(),
                 {"r.csv:2", "3 fields, the header has 4"});
  expect_invalid(parse_runs_csv(head + "a,1,1,12x\n", "r.csv").status(),
                 {"r.csv:2", "valid_ppl '12x' is not a number"});
  expect_invalid(parse_runs_csv(head + "a,1,1,nan\n", "r.csv").status(),
                 {"r.csv:2", "valid_ppl 'nan' is not a number"});
  expect_invalid(parse_runs_csv(head + "a,x,1,12\n", "r.csv").status(),
                 {"r.csv:2", "seed 'x' is not a seed"});
  expect_invalid(parse_runs_csv(head + "a,-1,1,12\n", "r.csv").status(),
                 {"r.csv:2", "seed '-1' is not a seed"});
  expect_invalid(parse_runs_csv(head + "a,1,2,12\n", "r.csv").status(),
                 {"r.csv:2", "ok '2' is not 0 or 1"});
  expect_invalid(parse_runs_csv(head + "\"a,1,1,12\n", "r.csv").status(),
                 {"r.csv:2", "a quote is not closed"});
  expect_invalid(parse_runs_csv(head + "a,1,1,12\na,2,1,13\na,1,0,-\n", "r.csv").status(),
                 {"r.csv:4", "variant a seed 1 appears twice"});
}

TEST(CompareGridTest, BaselineDifferencesArePairedBySeed) {
  auto row = [](const std::string& v, uint64_t seed, double ppl, double att, double loss,
                bool ok = true) {
    CompareRow r;
    r.variant = v;
    r.seed = seed;
    r.ok = ok;
    r.valid_ppl = ppl;
    r.attacked_valid_ppl = att;
    r.final_loss = loss;
    return r;
  };
  const std::vector<CompareRow> baseline = {
      row("smoe", 1, 100, 130, 5.0),    row("smoe", 2, 110, 140, 5.1),
      row("smoe", 3, 120, 150, 5.2),    row("smoe", 5, NAN, NAN, NAN, false),
      row("momentum", 1, 90, 120, 4.9), row("momentum", 2, 95, 125, 4.95),
      row("adam", 1, 80, 100, 4.0),     row("adam+layer", 1, 70, 90, 3.5)};
  const std::vector<CompareRow> runs = {
      // smoe+capacity: seed 3 is not in this grid, seed 4 not in the baseline, seed 5 failed
      // there: pairs 1 and 2.
      row("smoe+capacity", 1, 104, 131, 5.05), row("smoe+capacity", 2, 112, 143, 5.05),
      row("smoe+capacity", 4, 500, 500, 9.0), row("smoe+capacity", 5, 500, 500, 9.0),
      // momentum: the same name; its second seed failed here, so one pair.
      row("momentum", 1, 87, 121, 4.8), row("momentum", 2, NAN, NAN, NAN, false),
      // adam+layer is in the baseline under its own name: that one, not adam.
      row("adam+layer", 1, 71, 91, 3.5), row("acmoe+gate", 1, 1, 1, 1)};
  const std::string md = baseline_markdown(runs, baseline, "runs/papers");
  // Differences +4 and +2: mean +3, sample std sqrt(2) = 1.41; attacked +1 and +3: +2 +- 1.41;
  // loss +0.05 and -0.05: +0.000 +- 0.071.
  EXPECT_NE(md.find("| smoe+capacity | smoe | 1,2 | 108.00 +- 5.66 | 105.00 +- 7.07 | +3.00 +- "
                    "1.41 | +2.00 +- 1.41 | +0.000 +- 0.071 |"),
            std::string::npos)
      << md;
  // One seed: the mean alone (no "+- 0.00", which would claim a measured spread).
  EXPECT_NE(md.find("| momentum | momentum | 1 | 87.00 | 90.00 | -3.00 | +1.00 | -0.100 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| adam+layer | adam+layer | 1 | 71.00 | 70.00 | +1.00 | "), std::string::npos)
      << md;
  EXPECT_EQ(md.find("| acmoe+gate |"), std::string::npos) << md;
  EXPECT_NE(md.find("No variant of the same name (or the name before its '+') in runs/papers: "
                    "acmoe+gate"),
            std::string::npos)
      << md;

  EXPECT_EQ(baseline_variant("smoe+capacity+x", baseline), "smoe");
  EXPECT_EQ(baseline_variant("adam+layer", baseline), "adam+layer");
  EXPECT_EQ(baseline_variant("robust", baseline), "");
  // Before training: which variants would pair with nothing at the grid's seeds.
  EXPECT_EQ(unpaired_variants({"smoe+capacity", "momentum", "robust"}, {2, 9}, baseline),
            (std::vector<std::string>{"robust"}));
  EXPECT_EQ(unpaired_variants({"smoe+capacity", "momentum"}, {5, 9}, baseline),
            (std::vector<std::string>{"smoe+capacity", "momentum"}));  // seed 5 failed there
}

// The runs of a grid, planned, read back and summarised (core/compare/compare_runs.h).
class CompareRunsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/momoe_compare_runs.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(CompareRunsTest, PlanOrdersRunsAndOverrides) {
  CompareGrid grid;
  grid.base_config = "base.pbtxt";
  grid.common = {"train.steps=5"};
  grid.variants = {parse_variant("cpu model.arch=sg").value(),
                   parse_variant("gpu config=g.pbtxt train.device=CUDA").value()};
  grid.seeds = {7, 3};
  const std::vector<GridRun> runs = plan_grid_runs(grid, "out", {{"gpu", true}}, 4);
  ASSERT_EQ(runs.size(), 4u);  // variant-major, seeds in the grid's order
  EXPECT_EQ(runs[0].variant, "cpu");
  EXPECT_EQ(runs[0].seed, 7u);
  EXPECT_EQ(runs[1].seed, 3u);
  EXPECT_EQ(runs[2].variant, "gpu");
  EXPECT_EQ(runs[0].run_dir, "out/runs/cpu-seed7");
  EXPECT_EQ(runs[0].log, "out/runs/cpu-seed7.log");
  EXPECT_EQ(runs[0].config, "base.pbtxt");
  EXPECT_EQ(runs[2].config, "g.pbtxt");
  EXPECT_FALSE(runs[0].gpu);
  EXPECT_TRUE(runs[2].gpu);
  // A CPU run's thread slice first (so the grid's own setting wins), the seed last.
  EXPECT_EQ(runs[0].sets, (std::vector<std::string>{"parallel.threads=4", "train.steps=5",
                                                    "model.arch=sg", "train.seed=7"}));
  EXPECT_EQ(runs[3].sets,
            (std::vector<std::string>{"train.steps=5", "train.device=CUDA", "train.seed=3"}));
}

TEST_F(CompareRunsTest, CollectsFinishedAndFailedRunsAndWritesTheSummary) {
  CompareGrid grid;
  grid.base_config = "base.pbtxt";
  grid.variants = {parse_variant("smoe model.arch=sg").value()};
  grid.seeds = {1, 2};
  const std::vector<GridRun> runs = plan_grid_runs(grid, dir_, {}, 1);
  ASSERT_TRUE(std::filesystem::create_directories(runs[0].run_dir));
  {
    StatsFileWriter w;
    std::string note;
    ASSERT_TRUE(w.open(runs[0].run_dir + "/stats.pb", &note).ok());
    for (int s = 0; s < 3; ++s) {
      StepStatsInfo i;
      i.step = s;
      i.loss = 6.0 - s;
      ASSERT_TRUE(w.append(i).ok());
    }
    StepStatsInfo e;
    e.step = 3;
    e.valid_ppl = 50.0;
    e.attacked_valid_ppl = 60.0;
    ASSERT_TRUE(w.append(e).ok());
  }
  std::ofstream(runs[1].log) << "[momoe r0 E 00:00:00] INVALID_ARGUMENT: train.steps = 0\n";
  const CompareRun ok = collect_grid_run(runs[0], 0);
  EXPECT_TRUE(ok.ok);
  EXPECT_EQ(ok.losses.size(), 3u);
  EXPECT_DOUBLE_EQ(ok.valid_ppl, 50.0);
  // A run that exited non-zero is failed, with its log's last error line, even without stats.
  const CompareRun failed = collect_grid_run(runs[1], 2);
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.seed, 2u);
  EXPECT_NE(failed.error.find("train.steps = 0"), std::string::npos) << failed.error;

  const CompareTables t = write_comparison(dir_, grid, {ok, failed}, {5.0}, {}).value();
  EXPECT_TRUE(t.against.empty());  // no baseline
  for (const char* f : {"summary.md", "runs.csv", "curves.csv"}) {
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/" + f)) << f;
  }
  const std::vector<CompareRow> rows =
      parse_runs_csv(io::read_file(dir_ + "/runs.csv").value(), "runs.csv").value();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].ok);
  EXPECT_DOUBLE_EQ(rows[0].valid_ppl, 50.0);
  EXPECT_FALSE(rows[1].ok);
  // Against a baseline (itself): the summary gains the paired section.
  const CompareTables with =
      write_comparison(dir_, grid, {ok, failed}, {5.0}, {"base", compare_rows({ok, failed})})
          .value();
  EXPECT_FALSE(with.against.empty());
  EXPECT_NE(io::read_file(dir_ + "/summary.md").value().find("## Against base"), std::string::npos);
}

}  // namespace
}  // namespace moe
