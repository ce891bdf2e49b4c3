// Formatting of step statistics for momoe-stats: the per-layer summary table, CSV, JSON lines,
// a one-line step summary, and the PNG plots (drawn by plot_stats.py with matplotlib).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "types/step_stats.h"

namespace moe {

// A resumed run appends records for steps it had already written before it was stopped (the steps
// after the last checkpoint are trained again). Keeps the last record of each step (training and
// evaluation records separately, and a step's subset and whole-split evaluations apart), in step
// order.
std::vector<StepStatsInfo> latest_per_step(std::vector<StepStatsInfo> steps);

// Mean over the last `window` training steps of each layer's statistics, plus the last
// evaluation's perplexities.
std::string summary_table(const std::vector<StepStatsInfo>& steps, int64_t window);
std::string step_line(const StepStatsInfo& s);
// One row per training step and MoE layer, then the evaluation columns (empty there); one row per
// evaluation with its columns (the training ones empty).
Status write_csv(const std::vector<StepStatsInfo>& steps, const std::string& path);
Status write_json_lines(const std::vector<StepStatsInfo>& steps, const std::string& path);
// Runs python3 plot_stats.py JSON PNG (MOMOE_PLOT_SCRIPT overrides the script's location).
Status plot(const std::string& json_path, const std::string& png_path);

}  // namespace moe
