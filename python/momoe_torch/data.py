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


def dataset_fingerprint(dataset_dir):
    """The tokenizer fingerprint a dataset was prepared with (an int), from its index.json."""
    with open(os.path.join(dataset_dir, "index.json"), encoding="utf-8") as f:
        tok = json.load(f).get("tokenizer", {})
    value = tok.get("vocab_fingerprint", tok.get("fingerprint"))
    return None if value is None else int(str(value), 16)


def read_split(dataset_dir, split="valid", fingerprint=None):
    """The whole token stream of `split` (train, valid or test): its shards, in order. With
    `fingerprint` (config.json's tokenizer.fingerprint), a dataset prepared with another tokenizer
    is refused: its ids would mean other tokens."""
    with open(os.path.join(dataset_dir, "index.json"), encoding="utf-8") as f:
        index = json.load(f)
    if fingerprint is not None:
        want = int(str(fingerprint), 16)
        have = dataset_fingerprint(dataset_dir)
        if have != want:
            raise ValueError(
                f"{dataset_dir} was tokenized with tokenizer fingerprint "
                f"{'unknown' if have is None else hex(have)}, the model's is {hex(want)}: prepare it "
                "with the model's vocab.txt (momoe-data prepare --vocab) or tokenizer.model")
    splits = index.get("splits", {})
    if split not in splits:
        raise ValueError(f"{dataset_dir}: no split {split!r} (it has {sorted(splits)})")
    parts = [read_token_file(os.path.join(dataset_dir, s["file"])) for s in splits[split]["shards"]]
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    if ids.size != int(splits[split]["tokens"]):
        raise ValueError(f"{dataset_dir}: split {split} has {ids.size} ids, index.json says "
                         f"{splits[split]['tokens']}")
    return ids
