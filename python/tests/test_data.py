"""read_split on a dataset written byte by byte from docs/data_format.md, and the refusal of a
dataset tokenized with another tokenizer than the model's: a TokenizerMismatchError naming both
tokenizers and how to prepare the text with the model's, which the command line prints (no
traceback) before exiting 2."""

import json
import struct

import numpy as np
import pytest

import momoe_torch
from momoe_torch import TokenizerMismatchError, read_split
from momoe_torch import __main__ as cli

DATASET_FP = 0x1111222233334444
MODEL_FP = 0x5555666677778888


def write_dataset(folder, ids, fingerprint=DATASET_FP):
    """A dataset with one valid shard holding `ids` (word tokenizer of 100 tokens)."""
    folder.mkdir()
    header = b"MOETOK01" + struct.pack("<IIQQ", 2, 64, fingerprint, len(ids))
    header += b"\0" * (64 - len(header))
    (folder / "valid-00000.tok").write_bytes(header + np.asarray(ids, dtype="<i4").tobytes())
    index = {
        "tokenizer": {"kind": "word", "vocab": "vocab.txt", "vocab_fingerprint": hex(fingerprint),
                      "vocab_size": 100},
        "splits": {"valid": {"tokens": len(ids), "shards": [{"file": "valid-00000.tok"}]}},
    }
    (folder / "index.json").write_text(json.dumps(index))
    return str(folder)


def model_tokenizer(kind="word", fingerprint=MODEL_FP):
    files = ["vocab.txt"] if kind == "word" else ["tokenizer.model", "tokenizer.json"]
    return {"kind": kind, "size": 200, "fingerprint": f"0x{fingerprint:016x}", "files": files}


def test_the_model_tokenizer_reads(tmp_path):
    d = write_dataset(tmp_path / "ds", [5, 6, 7])
    ids = read_split(d, "valid", tokenizer=model_tokenizer(fingerprint=DATASET_FP))
    assert ids.tolist() == [5, 6, 7]
    assert read_split(d, "valid", fingerprint=hex(DATASET_FP)).tolist() == [5, 6, 7]


def test_another_tokenizer_is_refused_naming_both(tmp_path):
    d = write_dataset(tmp_path / "ds", [5, 6, 7])
    with pytest.raises(TokenizerMismatchError) as e:
        read_split(d, "valid", tokenizer=model_tokenizer(), model_dir="exports/quick")
    message = str(e.value)
    assert isinstance(e.value, ValueError)  # callers catching ValueError still do
    assert f"{d} was tokenized with another tokenizer than the model's" in message
    assert "the word tokenizer of 100 tokens (fingerprint 0x1111222233334444" in message
    assert f"{d}/vocab.txt" in message
    assert "the word tokenizer of 200 tokens (fingerprint 0x5555666677778888" in message
    assert "momoe-data prepare --vocab exports/quick/vocab.txt" in message
    # The fingerprint alone (the older call) is refused the same way.
    with pytest.raises(TokenizerMismatchError):
        read_split(d, "valid", fingerprint=hex(MODEL_FP))


def test_a_sentencepiece_model_points_to_its_model_file(tmp_path):
    d = write_dataset(tmp_path / "ds", [5, 6, 7])
    with pytest.raises(TokenizerMismatchError) as e:
        read_split(d, "valid", tokenizer=model_tokenizer("sentencepiece"), model_dir="m")
    assert "the sentencepiece tokenizer of 200 tokens" in str(e.value)
    assert "m/tokenizer.model" in str(e.value)
    assert "--tokenizer sentencepiece --sp-model m/tokenizer.model" in str(e.value)


def test_the_command_line_prints_it_and_exits_2(tmp_path, monkeypatch, capsys):
    d = write_dataset(tmp_path / "ds", [5, 6, 7])

    class Exported:  # what the command needs of a loaded model before it reads the data
        cfg = {"tokenizer": model_tokenizer(), "eval_batch_size": 1}

    monkeypatch.setattr(cli, "load", lambda *args, **kwargs: Exported())
    assert cli.main(["--model", "exports/quick", "--dataset", d]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python3 -m momoe_torch: ")
    assert "another tokenizer than the model's" in err
    assert "Traceback" not in err
    assert momoe_torch.TokenizerMismatchError is TokenizerMismatchError
