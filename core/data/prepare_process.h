// `momoe-data prepare` as a child process, for executables that cannot run SentencePiece
// themselves (tokenizer.h "Where SentencePiece runs"): momoe-train on text with a SentencePiece
// tokenizer, momoe-eval on a SentencePiece checkpoint.
#pragma once

#include "core/base/status.h"
#include "core/data/prepare.h"

namespace moe::data {

// The momoe-data executable: $MOMOE_DATA when set, else the one beside this executable (or in
// ../launcher/, the build tree's layout for momoe-bench), else "momoe-data" on the PATH.
std::string momoe_data_path();

// Runs `momoe-data prepare` for `spec` (its progress and messages go to this process's stderr)
// and waits. When spec.stop_requested says yes (this process was signalled), the child gets
// SIGTERM and stops at its next batch (a preparation resumes later). Errors: kInvalidArgument
// when it refused its input (exit 2), kAborted when it was stopped (exit 3, or ended by the
// SIGTERM sent), kInternal otherwise (it failed, or could not be started).
// quiet: without its progress bar and summary (errors still show).
Status run_prepare_process(const PrepareSpec& spec, bool quiet = false);

}  // namespace moe::data
