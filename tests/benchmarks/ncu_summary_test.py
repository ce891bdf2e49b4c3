#!/usr/bin/env python3
"""benchmarks/ncu_summary.py on a hand-made Nsight Compute per-kernel CSV: the program's own lines
before the header are skipped, totals are invocations x average in each row's unit (thousands
separators read), kernels are named without namespaces, templates and parameters (a CUTLASS
wrapper by its template argument), rows of other metrics are ignored, the largest come first
with their shares, and a file without duration rows exits 2. Usage: ncu_summary_test.py SOURCE_DIR"""
import json
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(sys.argv[1], "benchmarks", "ncu_summary.py")
HEADER = ('"Process ID","Process Name","Host Name","Kernel Name","Block Size","Grid Size",'
          '"Device","CC","Invocations","Section Name","Metric Name","Metric Unit","Minimum",'
          '"Maximum","Average"')


def row(name, calls, unit, average, metric="gpu__time_duration.sum"):
    return ('"1","momoe-bench","h","%s","(256, 1, 1)","(8, 1, 1)","0","9.0","%s","s","%s","%s",'
            '"0","0","%s"' % (name, calls, metric, unit, average))


CSV = "\n".join([
    '{"bench": "env", "host": "vm"}',
    "==PROF== Connected to process 1",
    HEADER,
    # combine_dy: two template instances, 2 x 1,500 us + 1 x 1 ms = 4 ms
    row("void moe::<unnamed>::combine_dy_kernel<moe::bf16, float>(const T1 *, long)", 2, "us",
        "1,500.00"),
    row("void moe::<unnamed>::combine_dy_kernel<float, float>(const T1 *, long)", 1, "ms", "1.00"),
    # a CUTLASS wrapper: 3 x 2,000,000 ns = 6 ms
    row("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_grouped_128x64_64x3_align8>"
        "(T1::Params)", 3, "ns", "2,000,000.00"),
    # a library kernel: 10 x 100 us = 1 ms
    row("nvjet_sm90_tss_128x128_64x6_2x1_v_badd_NTT", 10, "us", "100.00"),
    # another metric: ignored
    row("void moe::<unnamed>::combine_kernel<float, float>(const T1 *)", 1, "byte", "99",
        metric="dram__bytes.sum"),
])

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "profile.csv")
    with open(path, "w") as f:
        f.write(CSV + "\n")
    r = run("--json", path)
    check(r.returncode == 0, "exit %d: %s" % (r.returncode, r.stderr))
    s = json.loads(r.stdout)
    check(abs(s["total_ms"] - 11.0) < 1e-9, "total %r" % s["total_ms"])
    names = [k["name"] for k in s["kernels"]]
    check(names == ["cutlass_80_tensorop_bf16_s16816gemm_bf16_grouped_128x64_64x3_align8",
                    "combine_dy_kernel", "nvjet_sm90_tss_128x128_64x6_2x1_v_badd_NTT"],
          "order and names %r" % names)
    ms = [round(k["ms"], 9) for k in s["kernels"]]
    check(ms == [6.0, 4.0, 1.0], "times %r" % ms)
    check([k["calls"] for k in s["kernels"]] == [3, 3, 10], "calls %r" % s["kernels"])
    check(abs(s["kernels"][0]["share"] - 6.0 / 11.0) < 1e-12, "share %r" % s["kernels"][0])
    r = run("--top", "1", path)
    check(r.returncode == 0 and r.stdout.startswith("total 11.00 ms; cutlass_80_tensorop")
          and "combine_dy" not in r.stdout, "--top 1 line %r" % r.stdout)
    empty = os.path.join(tmp, "empty.csv")
    with open(empty, "w") as f:
        f.write("==PROF== no kernels were profiled\n")
    r = run(empty)
    check(r.returncode == 2 and "no per-kernel" in r.stderr, "empty file: %r" % (r,))
    r = run(os.path.join(tmp, "missing.csv"))
    check(r.returncode == 2 and "cannot read" in r.stderr, "missing file: %r" % (r,))

if failures:
    sys.exit("%d check(s) failed" % len(failures))
print("ncu_summary_test: all checks passed")
