"""Token ids of a prepared momoe dataset (`momoe-data prepare`, docs/data_format.md)."""

import json
import os
import struct

import numpy as np

_MAGIC = b"MOETOK01"
_HEADER = 64


def read_token_file(path):
    """The int32 ids of one shard (token file version 2: a 64-byte header, then the ids)."""
    with open(path, "rb") as f:
        header = f.read(_HEADER)
    if len(header) < _HEADER or header[:8] != _MAGIC:
        raise ValueError(f"{path}: not a momoe token file (magic {header[:8]!r})")
    version, size = struct.unpack("<II", header[8:16])
    if version != 2 or size != _HEADER:
        raise ValueError(f"{path}: token file version {version} (header {size} bytes); expected 2")
    (count,) = struct.unpack("<Q", header[24:32])
    ids = np.fromfile(path, dtype="<i4", offset=_HEADER)
    if ids.size != count:
        raise ValueError(f"{path}: {ids.size} ids, the header says {count}")
    return ids


class TokenizerMismatchError(ValueError):
    """A dataset tokenized with another tokenizer than the model's: its ids would mean other
    tokens. The message names both tokenizers (kind, size, fingerprint, files) and how to prepare
    the text with the model's."""


def dataset_fingerprint(dataset_dir):
    """The tokenizer fingerprint a dataset was prepared with (an int), from its index.json."""
    with open(os.path.join(dataset_dir, "index.json"), encoding="utf-8") as f:
        tok = json.load(f).get("tokenizer", {})
    value = tok.get("vocab_fingerprint", tok.get("fingerprint"))
    return None if value is None else int(str(value), 16)


def _describe(kind, size, fingerprint, files):
    """'the word tokenizer of 2000 tokens (fingerprint 0x..., data/x/vocab.txt)'."""
    where = ", ".join(files)
    return (f"the {kind or 'unknown'} tokenizer of {size if size is not None else '?'} tokens "
            f"(fingerprint {'unknown' if fingerprint is None else hex(fingerprint)}"
            f"{', ' + where if where else ''})")


def _mismatch_message(dataset_dir, index_tokenizer, model_tokenizer, model_dir):
    """Both tokenizers and what to do, for TokenizerMismatchError."""
    have = dataset_fingerprint(dataset_dir)
    want = int(str(model_tokenizer["fingerprint"]), 16)
    dataset_files = [os.path.join(dataset_dir, index_tokenizer["vocab"])] if "vocab" in index_tokenizer else []
    model_files = [os.path.join(model_dir or "MODEL", f) for f in model_tokenizer.get("files", [])]
    kind = model_tokenizer.get("kind")
    if kind == "sentencepiece":
        how = f"--tokenizer sentencepiece --sp-model {os.path.join(model_dir or 'MODEL', 'tokenizer.model')}"
    else:
        how = f"--vocab {os.path.join(model_dir or 'MODEL', 'vocab.txt')}"
    return (f"{dataset_dir} was tokenized with another tokenizer than the model's, so its ids "
            f"would mean other tokens: the dataset has "
            f"{_describe(index_tokenizer.get('kind'), index_tokenizer.get('vocab_size'), have, dataset_files)}, "
            f"the model {_describe(kind, model_tokenizer.get('size'), want, model_files)}. "
            f"Prepare the text again with the model's tokenizer (momoe-data prepare {how} "
            f"--train TEXT --valid TEXT --out NEW_DIR) and evaluate on NEW_DIR")


def read_split(dataset_dir, split="valid", fingerprint=None, tokenizer=None, model_dir=None):
    """The whole token stream of `split` (train, valid or test): its shards, in order. With the
    model's tokenizer (`tokenizer`, config.json's "tokenizer" object; or its `fingerprint` alone),
    a dataset prepared with another tokenizer is refused with TokenizerMismatchError: its ids
    would mean other tokens. `model_dir`: the export's folder, for the message's paths."""
    with open(os.path.join(dataset_dir, "index.json"), encoding="utf-8") as f:
        index = json.load(f)
    if tokenizer is None and fingerprint is not None:
        tokenizer = {"fingerprint": fingerprint}
    if tokenizer is not None:
        if dataset_fingerprint(dataset_dir) != int(str(tokenizer["fingerprint"]), 16):
            raise TokenizerMismatchError(
                _mismatch_message(dataset_dir, index.get("tokenizer", {}), tokenizer, model_dir))
    splits = index.get("splits", {})
    if split not in splits:
        raise ValueError(f"{dataset_dir}: no split {split!r} (it has {sorted(splits)})")
    parts = [read_token_file(os.path.join(dataset_dir, s["file"])) for s in splits[split]["shards"]]
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    if ids.size != int(splits[split]["tokens"]):
        raise ValueError(f"{dataset_dir}: split {split} has {ids.size} ids, index.json says "
                         f"{splits[split]['tokens']}")
    return ids
