// The SentencePiece backend (tokenizer.h "Where SentencePiece runs"): Debian's libsentencepiece
// behind the SentencePieceBackend interface. Linked only into executables that do not load the
// system libprotobuf (momoe-data, the data tests), which call register_sentencepiece() first.
// A model trains in a child process (forked): the library has neither a progress callback nor a
// way to interrupt it, and a stop must end it at once; the parent reads the trainer's log for
// progress (SentencePieceMonitor) and kills the child when told to stop.
#pragma once

namespace moe::data {

// Registers the backend for this process (idempotent).
void register_sentencepiece();

}  // namespace moe::data
