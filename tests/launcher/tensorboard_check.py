"""Reads a run directory's TensorBoard event files with TensorBoard's own reader (EventAccumulator
of the pinned tensorboard package) and checks every scalar against RUN_DIR/metrics.jsonl.

Usage: tensorboard_check.py RUN_DIR [DAMAGED_DIR]

The expected scalars come from metrics.jsonl by the tags that README.md documents, written out
here independently of the C++ (types/step_stats_scalars.cc): every record at its own step (the
steps done: a training step's record says N after its N-th step). The live branch is
metrics.jsonl's own rule (proto/stats_convert.h live_records): a rollback_to marker R drops the
records before it of steps after R. TensorBoard must arrive at the same
scalars by itself, from the SessionLog START event of the resumed run's event file.

With DAMAGED_DIR (a copy of the event files, one byte of the first file's step-2 record flipped by
this script), TensorBoard must load without raising, keep the first file's records before the
damaged one, skip the rest of that file (its CRC check fails), and read the second file whole.
"""

import glob
import json
import math
import os
import sys

import numpy as np
from tensorboard.backend.event_processing import event_accumulator, event_file_loader
from tensorboard.compat.proto import event_pb2

PHASES = ("data", "forward", "backward", "exchange", "grad_sync", "optimizer")
EVAL_KEYS = ("valid_ppl", "test_ppl", "attacked_valid_ppl", "attacked_test_ppl", "attack_rate",
             "valid_word_ppl", "test_word_ppl", "valid_bits_per_byte", "test_bits_per_byte",
             "valid_unknown_fraction", "test_unknown_fraction")


def fail(msg):
    print("FAIL [tensorboard_check]: " + msg, file=sys.stderr)
    sys.exit(1)


def is_training(r):
    return "rollback_to" not in r and "loss" in r


def scalars_of(r):
    """(step, {tag: value}) of one metrics.jsonl record, by the documented tags."""
    out = {}
    if is_training(r):
        out["train/loss"] = r["loss"]
        out["train/perplexity"] = None if r["loss"] is None else math.exp(r["loss"])
        for key in ("aux_loss", "learning_rate", "grad_norm", "tokens_per_second", "step_seconds"):
            out["train/" + key] = r[key]
        out["train/skipped"] = 1.0 if r["skipped"] else 0.0
        for phase in PHASES:
            if "phase_seconds" in r:
                out["time/" + phase] = r["phase_seconds"][phase]
        for key, tag in (("peak_tensor_bytes", "memory/peak_tensor_gib"),
                         ("peak_rss_bytes", "memory/peak_rss_gib")):
            if key in r:
                out[tag] = r[key] / 2.0**30
        for layer in r["layers"]:
            b = "block%d/" % layer["block"]
            out[b + "balance_loss"] = layer["balance_loss"]
            out[b + "z_loss"] = layer["z_loss"]
            out[b + "seq_balance_loss"] = layer["seq_balance_loss"]
            out[b + "drop_rate"] = layer["dropped_fraction"]
            out[b + "max_load"] = layer["max_load"]
            out[b + "entropy"] = layer["mean_entropy"]
            out[b + "probe_flip_rate"] = layer["probe_flip_rate"]
            total = sum(layer["expert_load"])
            for e, n in enumerate(layer["expert_load"]):
                out[b + "expert_load/%d" % e] = n / total if total > 0 else 0.0
            if "score_bias" in layer:
                out[b + "score_bias_spread"] = layer["score_bias_spread"]
                for e, v in enumerate(layer["score_bias"]):
                    out[b + "score_bias/%d" % e] = v
        return r["step"], out
    prefix = "eval_subset/" if r.get("eval_sequences", 0) > 0 else "eval/"
    for key in EVAL_KEYS:
        if key in r:
            out[prefix + key] = r[key]
    if "eval_seconds" in r:
        out[prefix + "seconds"] = r["eval_seconds"]
    return r["step"], out


def read_metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def live(records):
    """metrics.jsonl's live branch: each rollback marker drops what the abandoned branch wrote."""
    kept = []
    for r in records:
        if "rollback_to" in r:
            to = r["rollback_to"]
            kept = [k for k in kept if k["step"] <= to]
        else:
            kept.append(r)
    return kept


def expected_scalars(records):
    """{tag: [(step, value), ...]} in record order."""
    out = {}
    for r in records:
        step, values = scalars_of(r)
        for tag, value in values.items():
            out.setdefault(tag, []).append((step, value))
    return out


def same_value(want, got):
    if want is None:  # NaN or infinity in the record (JSON has neither)
        return not math.isfinite(got)
    with np.errstate(over="ignore"):
        return np.float32(want) == np.float32(got)


def load_tensorboard(directory):
    acc = event_accumulator.EventAccumulator(directory, size_guidance={event_accumulator.SCALARS: 0})
    try:
        acc.Reload()
    except Exception as e:  # pylint: disable=broad-except
        fail("TensorBoard raised %r reading %s" % (e, directory))
    # A tag whose every point was purged stays listed, with no points (the display shows none).
    return {tag: [(s.step, s.value) for s in acc.Scalars(tag)]
            for tag in acc.Tags()["scalars"] if acc.Scalars(tag)}


def compare(want, got, what):
    if set(want) != set(got):
        fail("%s: tags differ: only in metrics.jsonl %s, only in TensorBoard %s"
             % (what, sorted(set(want) - set(got))[:10], sorted(set(got) - set(want))[:10]))
    count = 0
    for tag in sorted(want):
        w, g = want[tag], got[tag]
        if [s for s, _ in w] != [s for s, _ in g]:
            fail("%s: %s: steps %s in metrics.jsonl, %s in TensorBoard"
                 % (what, tag, [s for s, _ in w], [s for s, _ in g]))
        for (step, a), (_, b) in zip(w, g):
            if not same_value(a, b):
                fail("%s: %s at step %d: %r in metrics.jsonl, %r in TensorBoard"
                     % (what, tag, step, a, b))
            count += 1
    return count


def event_files(directory):
    files = sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")))
    if len(files) != 2:
        fail("expected 2 event files (run A, the resumed run B) in %s, found %s" % (directory, files))
    return files


def check_file_heads(files, start_steps):
    """Each file opens with the file_version and a SessionLog START at its first step."""
    for path, start in zip(files, start_steps):
        events = list(event_file_loader.EventFileLoader(path).Load())
        if len(events) < 2:
            fail("TensorBoard read %d events from %s" % (len(events), path))
        if events[0].file_version != "brain.Event:2":
            fail("%s: the first event is not the file_version: %s" % (path, events[0]))
        log = events[1].session_log
        if not events[1].HasField("session_log") or log.status != log.START or \
                events[1].step != start:
            fail("%s: the second event is not a SessionLog START at step %d: %s"
                 % (path, start, events[1]))


def damage(files, damaged_dir):
    """Copies the event files into damaged_dir, flipping a byte of the first file's step-2 event."""
    for i, path in enumerate(files):
        with open(path, "rb") as f:
            data = bytearray(f.read())
        if i == 0:
            offset, found = 0, False
            while offset < len(data):
                length = int.from_bytes(data[offset:offset + 8], "little")
                event = event_pb2.Event.FromString(
                    bytes(data[offset + 12:offset + 12 + length]))
                if event.HasField("summary") and event.step == 2:
                    data[offset + 12 + length // 2] ^= 0x20
                    found = True
                    break
                offset += 16 + length
            if not found:
                fail("no step-2 summary event in %s" % path)
        with open(os.path.join(damaged_dir, os.path.basename(path)), "wb") as f:
            f.write(data)


def main():
    run_dir = sys.argv[1]
    records = read_metrics(run_dir)
    markers = [i for i, r in enumerate(records) if "rollback_to" in r]
    if len(markers) != 1:
        fail("expected one rollback marker in metrics.jsonl, found %d" % len(markers))
    run_a, run_b = records[:markers[0]], records[markers[0] + 1:]
    rollback_to = records[markers[0]]["rollback_to"]
    files = event_files(run_dir)
    check_file_heads(files, [1, rollback_to + 1])

    want = expected_scalars(live(records))
    got = load_tensorboard(run_dir)
    # Not vacuous: run B repeated steps that run A had written (TensorBoard dropped run A's).
    repeated = {r["step"] for r in run_a if is_training(r)} & \
        {r["step"] for r in run_b if is_training(r)}
    needed = ("train/loss", "time/forward", "memory/peak_tensor_gib", "block1/expert_load/0",
              "eval/valid_ppl", "eval_subset/valid_ppl")
    if not repeated or len(want.get("train/loss", [])) < 8 or not all(t in want for t in needed):
        fail("the runs do not cover what the check needs (repeated steps %s, tags %s)"
             % (sorted(repeated), sorted(want)))
    count = compare(want, got, run_dir)
    print("tensorboard_check: %d tags, %d scalars equal to metrics.jsonl's (steps %s repeated "
          "after the rollback, run A's dropped)"
          % (len(want), count, sorted(repeated)))

    if len(sys.argv) > 2:
        damaged_dir = sys.argv[2]
        damage(files, damaged_dir)
        # TensorBoard keeps run A's events before the damaged record (step 1) and all of run B's.
        kept_a = [r for r in run_a if is_training(r) and r["step"] < 2]
        want_damaged = expected_scalars(kept_a + run_b)
        got_damaged = load_tensorboard(damaged_dir)
        count = compare(want_damaged, got_damaged, damaged_dir + " (a byte of step 2 flipped)")
        print("tensorboard_check: with a flipped byte, TensorBoard skipped the damaged record and "
              "the rest of its file, and read the other %d scalars" % count)


if __name__ == "__main__":
    main()
