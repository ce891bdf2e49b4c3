// The SentencePiece backend (tokenizer.h "Where SentencePiece runs"): Debian's libsentencepiece
// behind the SentencePieceBackend interface. Linked only into executables that do not load the
// system libprotobuf (momoe-data, the data tests), which call register_sentencepiece() first.
#pragma once

namespace moe::data {

// Registers the backend for this process (idempotent).
void register_sentencepiece();

}  // namespace moe::data
