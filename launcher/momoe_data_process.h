// momoe-data as a child process, for executables that cannot run SentencePiece themselves
// (core/data/tokenizer.h "Where SentencePiece runs"): `momoe-data prepare` for momoe-train on text
// with a SentencePiece tokenizer and momoe-eval on a SentencePiece checkpoint; `momoe-data
// tokenize` over pipes for momoe-generate.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "core/data/prepare.h"
#include "io/child_process.h"

namespace moe::data {

// Registers run_prepare_process as this process's PrepareElsewhere (core/data/prepare.h), so that
// the trainer can prepare a SentencePiece corpus: every executable that trains calls it first.
void use_momoe_data_for_sentencepiece();

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

// `momoe-data tokenize --model FILE (--encode | --decode) [--fingerprint HEX]`, line-oriented on
// its stdin and stdout, one answer line (flushed) per request line:
//   --encode: a line of text -> the ids Tokenizer::encode gives for it (its pieces, then the
//             end-of-line id; nothing for a blank line), separated by single spaces;
//   --decode: ids separated by spaces -> Tokenizer::decode of them (end-of-line ids become
//             newlines), escaped to one line by escape_line.
// Input it refuses (text that is not UTF-8, an id that is not the model's) ends it with exit 2
// and its message on stderr.
std::string escape_line(std::string_view text);  // '\\' -> "\\\\", '\n' -> "\\n"
// The inverse; kInvalidArgument for a lone '\\' or an unknown escape.
StatusOr<std::string> unescape_line(std::string_view line);

// A `momoe-data tokenize` child of this process, for one mode. Not thread-safe.
class TokenizeProcess {
 public:
  enum class Mode { kEncode, kDecode };
  // Starts it on `model_path` (a tokenizer.model); it refuses a model whose fingerprint is not
  // `fingerprint` (tokenizer.h). kInternal when it cannot be started.
  static StatusOr<std::unique_ptr<TokenizeProcess>> start(const std::string& model_path, Mode mode,
                                                          uint64_t fingerprint);
  // kEncode: the ids of one line of text (no '\n' in it).
  StatusOr<std::vector<int32_t>> encode_line(std::string_view line);
  // kDecode: the text of `ids`.
  StatusOr<std::string> decode(const std::vector<int32_t>& ids);
  // Closes its input and waits for it: OK when it exited 0.
  Status finish();

 private:
  explicit TokenizeProcess(std::unique_ptr<io::ChildProcess> child) : child_(std::move(child)) {}
  // The answer to `request`; when the child has ended instead, why (its message is on stderr).
  StatusOr<std::string> ask(std::string_view request);
  Status ended();

  std::unique_ptr<io::ChildProcess> child_;
};

}  // namespace moe::data
