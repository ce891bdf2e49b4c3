// Small helpers for progress lines (the trainer's step line and evaluations, momoe-eval,
// momoe-data): durations for people and the progress interval. No dependency beyond the
// standard library, so every executable may use them (momoe-data must not pull in protobuf:
// core/data/sentencepiece_backend.h says why).
#pragma once

#include <string>

namespace moe {

// "1h2m3s", "4m5s", "7s"; "?" for a negative, non-finite or absurdly large value.
std::string format_duration(double seconds);
// "21.27%" for 0.2127 (two decimals); "?" for a non-finite value.
std::string format_percent(double fraction);
// Seconds between progress lines of long evaluations: $MOMOE_PROGRESS_SECONDS when set (>= 0),
// else `fallback`.
double progress_interval_seconds(double fallback);

}  // namespace moe
