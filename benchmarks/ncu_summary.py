#!/usr/bin/env python3
"""Where a profiled run's GPU time went, from Nsight Compute's per-kernel summary
(`ncu --metrics gpu__time_duration.sum --print-summary per-kernel --csv`, as tests/run_gpu.sh's
layer stage writes it): each kernel's total duration (invocations x average), summed over the
launch shapes and template arguments of one kernel name, largest first, with its share.

    ncu_summary.py [--top N] [--json] FILE.csv

Lines before the CSV header (the program's own output, ncu's ==PROF== lines) are skipped. Prints
one line: "total T ms; name a ms (p%, n calls); ..." (or a JSON object with --json). Exit 2 when
the file holds no per-kernel duration rows (a profile that did not run)."""
import argparse
import csv
import json
import re
import sys

UNIT_MS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0,
           "s": 1e3, "second": 1e3}


WRAPPERS = ("Kernel", "Kernel2", "device_kernel")  # library kernels named by their argument


def kernel_name(full):
    """The kernel's name without its namespaces, template arguments and parameters:
    'void moe::<unnamed>::combine_dy_kernel<moe::bf16, float>(const T1 *, ...)' ->
    'combine_dy_kernel'; a library kernel keeps its own name ('nvjet_sm90_tss_...'), and a
    CUTLASS wrapper ('cutlass::Kernel2<cutlass_80_tensorop_...>(...)') its template argument's."""
    name = full[len("void "):] if full.startswith("void ") else full
    name = name.replace("<unnamed>::", "").replace("(anonymous namespace)::", "")
    cut = min([i for i in (name.find("<"), name.find("(")) if i >= 0], default=len(name))
    base = re.sub(r"^.*::", "", name[:cut])
    if base in WRAPPERS and cut < len(name) and name[cut] == "<":
        inner = re.split(r"[,<(>]", name[cut + 1:])[0].strip()
        return re.sub(r"^.*::", "", inner) or base
    return base or full


def read_rows(path):
    """The per-kernel rows of the duration metric: (name, invocations, total ms)."""
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"Process ID"')), None)
    if start is None:
        return []
    rows = []
    for r in csv.DictReader(lines[start:]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = UNIT_MS.get(r.get("Metric Unit", ""))
        try:
            calls = int(r["Invocations"].replace(",", ""))
            average = float(r["Average"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        if unit is None:
            continue
        rows.append((kernel_name(r.get("Kernel Name", "?")), calls, calls * average * unit))
    return rows


def summarize(rows, top):
    by_name = {}
    for name, calls, ms in rows:
        c, t = by_name.get(name, (0, 0.0))
        by_name[name] = (c + calls, t + ms)
    total = sum(t for _, t in by_name.values())
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]
    return {"total_ms": total,
            "kernels": [{"name": n, "ms": t, "share": t / total if total > 0 else 0.0,
                         "calls": c} for n, (c, t) in ranked]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("--top", type=int, default=8)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.top < 1:
        print("ncu_summary.py: --top must be >= 1", file=sys.stderr)
        return 2
    try:
        rows = read_rows(a.file)
    except OSError as e:
        print("ncu_summary.py: cannot read %s: %s" % (a.file, e), file=sys.stderr)
        return 2
    if not rows:
        print("ncu_summary.py: %s holds no per-kernel gpu__time_duration rows (did the profile "
              "run? see its .log)" % a.file, file=sys.stderr)
        return 2
    s = summarize(rows, a.top)
    if a.json:
        print(json.dumps(s))
    else:
        print("total %.2f ms; " % s["total_ms"] + "; ".join(
            "%s %.2f ms (%.1f%%, %d calls)" % (k["name"], k["ms"], 100 * k["share"], k["calls"])
            for k in s["kernels"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
