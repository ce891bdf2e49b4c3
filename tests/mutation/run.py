#!/usr/bin/env python3
"""Mutation testing: do the tests catch a wrong formula?

Each mutant of tests/mutation/mutants.txt changes a few lines of one source file the way a real
bug would. For each, this script writes the mutated file into a copy of the source tree, rebuilds
the targets the mutant names, and runs the command that should catch it: a non-zero exit kills
the mutant, exit 0 lets it survive. Before any mutant it runs every selected command on the
unmutated copy, which must pass (a kill means nothing if the test fails anyway).

The copy and its build live in WORK (default $BUILD_DIR/mutation, else build/mutation), kept
between runs so that a rerun rebuilds only what changed; the working tree is never modified.

Usage: tests/mutation/run.py [ID ...] [--rotate N] [--list] [--work DIR] [--jobs N]
                             [--timeout S] [--report FILE] [--source DIR] [--mutants FILE]
  --rotate N  N consecutive mutants of the list, starting at a place chosen by this checkout's
              commit (the same commit runs the same subset, so a failure reproduces; other
              commits start elsewhere, so that CI covers the list over time).
  --timeout S  the limit of each build and each check (default 900 s; a check past it kills).
  --source, --mutants  another checkout and list (default: this one's, and its mutants.txt).
Exit: 0 every selected mutant killed; 1 one survived, does not build, the baseline fails, or a
tool (git, cmake) failed; 2 bad arguments or a mutants file that does not match the sources;
128 + N stopped by signal N (SIGHUP, SIGINT, SIGQUIT, SIGTERM), the copy restored first.
"""

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIELDS = ("file", "what", "build", "run")


class Mutant:
    def __init__(self, ident, line):
        self.id = ident
        self.line = line  # where it starts in mutants.txt, for error messages
        self.fields = {}
        self.old = []  # lines to find (compared without their leading and trailing blanks)
        self.new = []  # replacement lines, indented like the first line found

    def __getattr__(self, name):
        if name in FIELDS:
            return self.fields[name]
        raise AttributeError(name)


def fail_input(message):
    print(f"mutation: {message}", file=sys.stderr)
    sys.exit(2)


def parse_mutants(path):
    """The mutants of path (exit 2 on a malformed entry)."""
    mutants, current = [], None
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            where = f"{os.path.basename(path)}:{number}"
            if not line.strip() or line.startswith("#"):
                continue
            m = re.fullmatch(r"\[([a-z0-9][a-z0-9-]*)\]", line)
            if m:
                if any(x.id == m.group(1) for x in mutants):
                    fail_input(f"{where}: mutant '{m.group(1)}' is listed twice")
                current = Mutant(m.group(1), number)
                mutants.append(current)
                continue
            if current is None:
                fail_input(f"{where}: expected a '[mutant-id]' line first")
            if line.startswith("- ") or line == "-":
                if current.new:
                    fail_input(f"{where}: '-' lines must come before the '+' lines")
                current.old.append(line[2:].strip())
            elif line.startswith("+ ") or line == "+":
                current.new.append(line[2:].rstrip())
            else:
                key, sep, value = line.partition(":")
                if not sep or key not in FIELDS:
                    fail_input(f"{where}: expected one of {', '.join(FIELDS)}, '- old', '+ new'")
                current.fields[key] = value.strip()
    for m in mutants:
        missing = [k for k in FIELDS if not m.fields.get(k)]
        if missing or not m.old:
            fail_input(f"mutant '{m.id}' (line {m.line}) lacks {', '.join(missing) or '- lines'}")
    return mutants


def locate(mutant, text):
    """The line index where mutant.old starts in text (exactly one match), or an error string."""
    lines = text.split("\n")
    n = len(mutant.old)
    hits = [i for i in range(len(lines) - n + 1)
            if all(lines[i + j].strip() == mutant.old[j] for j in range(n))]
    if len(hits) != 1:
        return None, (f"mutant '{mutant.id}': its '-' lines occur {len(hits)} times in "
                      f"{mutant.file} (need exactly once): update tests/mutation/mutants.txt")
    return hits[0], None


def mutate(mutant, text):
    start, error = locate(mutant, text)
    if error:
        fail_input(error)
    lines = text.split("\n")
    indent = re.match(r"\s*", lines[start]).group(0)
    new = [indent + x if x else "" for x in mutant.new]
    return "\n".join(lines[:start] + new + lines[start + len(mutant.old):])


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def write_if_different(path, text):
    if os.path.exists(path) and read(path) == text:
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def sync_copy(src, work):
    """Makes src hold this checkout's files (tracked and untracked, not ignored; nothing under
    work): writes those that differ, stamped now (so that make rebuilds what was built from them,
    a mutation left by a killed run included), keeps the others' time stamps (so the build stays
    incremental), and removes the rest."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    inside = os.path.relpath(work, ROOT)
    wanted = {p for p in listed if p and os.path.isfile(os.path.join(ROOT, p))
              and not (p + os.sep).startswith(inside + os.sep)}
    for rel in wanted:
        a, b = os.path.join(ROOT, rel), os.path.join(src, rel)
        if os.path.exists(b):
            with open(a, "rb") as fa, open(b, "rb") as fb:
                if fa.read() == fb.read():
                    continue
        os.makedirs(os.path.dirname(b), exist_ok=True)
        shutil.copyfile(a, b)  # a new time stamp: never older than what was built from b
        shutil.copymode(a, b)
    for dirpath, _, files in os.walk(src):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), src)
            if rel not in wanted:
                os.remove(os.path.join(dirpath, name))


def run_logged(cmd, cwd, log, timeout=None):
    """Runs cmd (a shell line), appending its output to log; returns (exit code, seconds).
    A timeout kills the command's process group and returns 124. The command's TMPDIR is a
    fresh directory removed afterwards: a mutant that aborts a test (or a timeout's kill) skips
    the test's own clean-up, and what it made must not stay in the system's /tmp."""
    t0 = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="momoe_mutation_tmp_")
    with open(log, "a", encoding="utf-8") as out:
        try:
            return run_in(cmd, cwd, out, timeout, dict(os.environ, TMPDIR=scratch)), \
                time.monotonic() - t0
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def run_in(cmd, cwd, out, timeout, env):
    """run_logged's command itself: its exit code, 124 after a timeout's kill."""
    out.write(f"$ {cmd}\n")
    out.flush()
    p = subprocess.Popen(cmd, shell=True, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True, env=env)
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return 124
    except BaseException:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise


def first_failure(log):
    """The first failed test the log names (gtest or ctest), else None."""
    with open(log, encoding="utf-8", errors="replace") as f:
        text = f.read()
    for pattern in (r"\[  FAILED  \] (\S+)", r"^\s*\d+ - (\S+) \(Failed\)", r"^(FAIL\S*: .*)$"):
        m = re.search(pattern, text, re.M)
        if m:
            return m.group(1)
    return None


def tail(log, n=15):
    with open(log, encoding="utf-8", errors="replace") as f:
        return "".join(f.readlines()[-n:])


def build(build_dir, targets, jobs, log, timeout):
    names = " ".join(shlex.quote(t) for t in sorted(set(targets)))
    return run_logged(f"cmake --build . -j {jobs} --target {names}", build_dir, log, timeout)


def select(mutants, args):
    if args.ids and args.rotate is not None:
        fail_input("name mutants or --rotate, not both")
    if args.ids:
        known = {m.id for m in mutants}
        unknown = [i for i in args.ids if i not in known]
        if unknown:
            fail_input(f"no mutant named {', '.join(unknown)} (see --list)")
        return [m for m in mutants if m.id in args.ids], "named"
    if args.rotate is not None:
        if args.rotate < 1:
            fail_input("--rotate needs a positive count")
        # The commit's hash, not its count: a shallow clone (CI's) has a count of 1.
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout.strip()
        n = min(args.rotate, len(mutants))
        first = int(commit[:12], 16) % len(mutants)
        chosen = [mutants[(first + i) % len(mutants)] for i in range(n)]
        return chosen, f"rotation at commit {commit[:10]}: {n} of {len(mutants)}"
    return mutants, "all"


def main():
    global ROOT
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ids", nargs="*")
    parser.add_argument("--rotate", type=int)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--work")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--report")
    parser.add_argument("--source", default=ROOT)
    parser.add_argument("--mutants")
    args = parser.parse_args()
    ROOT = os.path.abspath(args.source)
    mutants_file = args.mutants or os.path.join(ROOT, "tests", "mutation", "mutants.txt")
    # A stopped run still restores the mutated file (the finally below).
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
        signal.signal(sig, lambda number, _: sys.exit(128 + number))

    mutants = parse_mutants(mutants_file)
    for m in mutants:  # every mutant must apply to the sources as they are
        path = os.path.join(ROOT, m.file)
        if not os.path.isfile(path):
            fail_input(f"mutant '{m.id}': no file {m.file}")
        _, error = locate(m, read(path))
        if error:
            fail_input(error)
    if args.list:
        for m in mutants:
            print(f"{m.id:32} {m.file}\n{'':32} {m.what}\n{'':32} caught by: {m.run}")
        return 0
    chosen, how = select(mutants, args)

    work = os.path.abspath(args.work or os.path.join(
        ROOT, os.environ.get("BUILD_DIR", "build"), "mutation"))
    src, build_dir, logs = (os.path.join(work, x) for x in ("src", "build", "logs"))
    os.makedirs(logs, exist_ok=True)
    print(f"mutation: {len(chosen)} mutants ({how}): {' '.join(m.id for m in chosen)}")
    print(f"mutation: copy and build in {work}")
    sync_copy(src, work)
    setup_log = os.path.join(logs, "setup.log")
    open(setup_log, "w").close()
    # The CPU build only: the CUDA kernels share the formulas' headers but cannot run here.
    # Unoptimised (-O0): it compiles in under half the time, the checks are small, and the
    # results are the same bits (no -ffast-math, no fused multiply-add without -march).
    # Configured every time (incremental: seconds), so a failed or older configuration heals.
    # A new copy builds with Ninja where installed (as scripts/build.sh); an existing one keeps
    # the generator it was made with.
    if not os.environ.get("CMAKE_GENERATOR") and shutil.which("ninja"):
        os.environ["CMAKE_GENERATOR"] = "Ninja"
    rc, _ = run_logged(f"cmake -S {shlex.quote(src)} -B {shlex.quote(build_dir)} "
                       "-DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS=-O0 -DMOE_WITH_CUDA=OFF "
                       "-DMOE_BUILD_BENCHMARKS=OFF -DMOE_WERROR=OFF", ROOT, setup_log)
    if rc != 0:
        print(f"mutation: configuring the copy failed:\n{tail(setup_log)}", file=sys.stderr)
        return 1
    targets = [t for m in chosen for t in m.build.split()]
    rc, seconds = build(build_dir, targets, args.jobs, setup_log, args.timeout)
    if rc != 0:
        print(f"mutation: the unmutated copy does not build:\n{tail(setup_log)}", file=sys.stderr)
        return 1
    print(f"mutation: built {len(set(targets))} targets in {seconds:.0f} s")
    for cmd in dict.fromkeys(m.run for m in chosen):
        rc, seconds = run_logged(cmd, build_dir, setup_log, args.timeout)
        if rc != 0:
            print(f"mutation: the unmutated copy fails `{cmd}` (exit {rc}); a kill would mean "
                  f"nothing:\n{tail(setup_log)}", file=sys.stderr)
            return 1
        print(f"mutation: baseline passes in {seconds:.1f} s: {cmd}")

    rows = []
    for m in chosen:
        path = os.path.join(src, m.file)
        original = read(path)
        log = os.path.join(logs, f"{m.id}.log")
        open(log, "w").close()
        try:
            write_if_different(path, mutate(m, original))
            rc, build_s = build(build_dir, m.build.split(), args.jobs, log, args.timeout)
            if rc != 0:
                verdict, by, run_s = "DOES NOT BUILD", "", 0.0
            else:
                rc, run_s = run_logged(m.run, build_dir, log, args.timeout)
                verdict = "survived" if rc == 0 else "killed"
                by = "" if rc == 0 else (first_failure(log) or
                                         ("timeout" if rc == 124 else f"exit {rc}"))
        finally:
            write_if_different(path, original)
        rows.append((m, verdict, by, build_s, run_s))
        print(f"mutation: {m.id}: {verdict}{' by ' + by if by else ''} "
              f"(build {build_s:.0f} s, tests {run_s:.1f} s)", flush=True)
        if verdict != "killed":
            print(f"  {m.what}\n  {m.file}; `{m.run}`; log {log}:\n{tail(log)}")

    table = ["| mutant | what | verdict | caught by | build s | tests s |",
             "|---|---|---|---|---|---|"]
    for m, verdict, by, build_s, run_s in rows:
        table.append(f"| {m.id} | {m.what} | {verdict} | {by} | {build_s:.0f} | {run_s:.1f} |")
    print("\n".join(table))
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            f.write("\n".join(table) + "\n")
    bad = [m.id for m, verdict, *_ in rows if verdict != "killed"]
    if bad:
        print(f"mutation: not killed: {' '.join(bad)}", file=sys.stderr)
        return 1
    print(f"mutation: all {len(rows)} killed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
