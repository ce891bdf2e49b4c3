// `momoe-data prepare`: text (plain, .gz or .zst; files or folders of them) tokenized once into a
// prepared dataset (dataset.h) that training reads without holding the corpus in memory.
//
// Each input file is read in chunks of whole lines (text_stream.h), validated (UTF-8, naming the
// file, line and byte offset), and tokenized in parallel; the word vocabulary is built from the
// training split first (a pass that only counts), unless one is given. The ids of each split go,
// in order, into shards of about `shard_tokens` tokens (a shard closes at the first chunk end past
// it), each written under a temporary name and renamed when complete.
//
// Resumable: DIR/prepare.json records the plan (inputs with their sizes and times, options) and,
// after every batch of chunks, a resume point: the shards closed so far, the shard being written
// (its temporary file flushed to disk; its token count, CRC and text counts) and the input
// position after it. Running the same preparation again continues from there, inside the open
// shard (and does nothing when DIR/index.json is complete); a plan that differs (other inputs, a
// changed file, other options) is refused by name. The result is the same as an uninterrupted
// preparation, file for file. A stop (stop_requested, or the progress callback) is seen between
// pieces of about 1 MiB of text, so within a fraction of a second.
//
// A preparation that fails otherwise (bad text: invalid UTF-8, an input with no tokens) before it
// has written anything worth resuming (a shard's tokens, or a vocabulary or SentencePiece model
// built from the training text) removes its files and the folders it made, so the same command
// starts afresh once the input is fixed (a fixed file is another plan, which the folder would
// refuse); one that had keeps it and its error says so. The error says which.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/data/dataset.h"
#include "core/data/tokenizer.h"

namespace moe::data {

struct PrepareSpec {
  std::string out_dir;
  // Files or folders; a folder stands for every regular file under it (recursively, following
  // links to folders, hidden names skipped), in byte-wise path order. train is required; valid and
  // test are optional.
  std::vector<std::string> train, valid, test;
  std::string tokenizer = "word";  // "word" or "sentencepiece"
  // The word tokenizer: the vocabulary's options, or a saved vocabulary (Vocabulary::save).
  VocabOptions vocab;
  std::string vocab_path;
  // SentencePiece: an existing model (.model), or one trained on the training split.
  std::string sp_model_path;
  SentencePieceOptions sp;
  int threads = 0;                          // tokenizing threads; 0 = every core
  int64_t shard_tokens = int64_t{1} << 26;  // 64 Mi tokens = 256 MiB per shard
  int64_t chunk_bytes = int64_t{1} << 24;   // 16 MiB of text per chunk
  // Chunks are tokenized one after another, each in pieces of about this much text (whole lines;
  // the ids do not depend on it) on every thread, asking stop_requested between pieces: a stop
  // keeps every chunk before it, whatever the thread count.
  int64_t piece_bytes = int64_t{1} << 20;
  // Asked between pieces of about 1 MiB of text (from the tokenizing threads, so thread-safe),
  // while a SentencePiece model trains, and, prepared elsewhere, while the other process runs: true
  // stops the preparation as an interruption (kAborted; it resumes later). Optional.
  std::function<bool()> stop_requested;
};

struct PrepareProgress {
  std::string phase;  // "vocabulary", "sentencepiece", "train", "valid", "test"
  // Input on disk whose text is done (counted; tokenized and written), of bytes_total: the
  // vocabulary's pass over the training split, or tokenizing, over every split in turn (so 100%
  // comes once, when the last split is done). Compressed input is measured by the compression
  // ratio so far (the decompressor reads ahead of the text handed out).
  int64_t bytes_done = 0;
  int64_t bytes_total = 0;
  int64_t tokens = 0;          // tokens written in this split (0 while counting)
  double seconds = 0;          // since the phase began (this invocation)
  int64_t bytes_at_start = 0;  // bytes_done when this invocation began the phase (a resume)
  SentencePieceTrainProgress sentencepiece;  // phase "sentencepiece" (no bytes): what it did
};

// The inputs as files: each path itself, or the regular files under a folder. Errors name the
// path: kNotFound, kInvalidArgument (a FIFO, device or socket; an empty folder).
StatusOr<std::vector<std::string>> expand_inputs(const std::vector<std::string>& paths);

// Prepares spec.out_dir. `progress` (optional) is called after every batch of chunks (about every
// 100 ms while a SentencePiece model trains); returning false interrupts the preparation
// (kAborted, "stopped: ... written and kept; rerun the same command to continue ..."), as a signal
// does in momoe-data. Errors: those of the text reader and the vocabulary (naming the
// file, and saying what became of out_dir: see above), kInvalidArgument for a bad spec,
// kFailedPrecondition when out_dir holds another preparation or other files.
StatusOr<DatasetIndex> prepare_dataset(
    const PrepareSpec& spec, const std::function<bool(const PrepareProgress&)>& progress = nullptr);

// A preparation in another process, for a process that cannot run SentencePiece itself
// (tokenizer.h "Where SentencePiece runs"). The executable registers one: the launchers' runs
// `momoe-data prepare` (launcher/momoe_data_process.h); core code never names an executable.
// It returns the preparation's outcome (kAborted when spec.stop_requested stopped it).
using PrepareElsewhere = Status (*)(const PrepareSpec& spec, bool quiet);
void register_prepare_elsewhere(PrepareElsewhere prepare);

// Prepares spec.out_dir in this process when it can (a word tokenizer, or SentencePiece
// registered here), else with the registered PrepareElsewhere; kFailedPrecondition, saying so,
// when neither can.
Status prepare_here_or_elsewhere(const PrepareSpec& spec, bool quiet = false);

}  // namespace moe::data
