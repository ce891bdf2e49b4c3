#!/usr/bin/env bash
# The test command: installs missing Debian packages (those only the tests need while the build
# compiles), configures, builds (warnings are errors),
# and runs every CPU test, the single-process ones and those under mpirun (-np 2 and -np 4), with
# the BLAS kernel momoe picks for this CPU. Then it runs the BLAS-sensitive tests (label blas:
# every test that compares two computation paths or results across shapes, ranks, thread counts
# or layouts, export_test's PyTorch comparison included) again under each OpenBLAS kernel of
# BLAS_KERNELS that this CPU can run, and names the ones it cannot; a kernel whose arithmetic is
# that of a kernel already run (the same bits on every product of momoe-bench blas-fingerprint's
# sweep: OpenBLAS builds Zen from Haswell's code) is named with it and not run again. Each phase
# says which kernel it ran and why.
# Then the host sanitizer phase (tests/sanitize.sh): the unit tests of the ground floor, the CPU
# kernels, the data pipeline and the MoE layer under ASan and UBSan.
# Last, mutation testing (tests/mutation/run.py): a rotating subset of the formula mutants in
# tests/mutation/mutants.txt must each fail the tests that guard them.
# Usage: tests/run.sh [extra ctest args]. Environment: BUILD_DIR (default build), JOBS,
# BLAS_KERNELS (default "Prescott Haswell SkylakeX Cooperlake Zen"; empty: none),
# MOMOE_MUTANTS (default 3: that many mutants, chosen by the commit; "all"; "none" or 0),
# MOMOE_SANITIZE (default 1; 0 skips the sanitizer phase, and the summary says so),
# BLAS_SAME_ARITHMETIC (default skip; run: a kernel's phase runs even when its fingerprint is
# one already run).
set -euo pipefail
cd "$(dirname "$0")/.."
mutants=${MOMOE_MUTANTS:-3}
case "$mutants" in
  all | none) ;;
  0) mutants=none ;;
  *[!0-9]* | "") echo "MOMOE_MUTANTS must be a count, all or none, not '$mutants'" >&2; exit 2 ;;
esac
export CMAKE_ARGS="${CMAKE_ARGS:-} -DMOE_WERROR=ON"
# PyTorch's OpenMP threads (the Python references of export_test, transformers_export_test and
# others) spin between parallel regions by default: with two tests on two cores, the spinning
# takes the other test's CPU. Waiting passively changes no result (the same threads split the
# same work) and cut export_reference.py's CPU time from 37 to 22 s on the 2-core Xeon. momoe
# itself uses no OpenMP.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# The packages the build needs first; those only the tests run (PyTorch the largest) install
# while it compiles.
scripts/install_deps.sh build
install_log=$(mktemp)
scripts/install_deps.sh test > "$install_log" 2>&1 &
installing=$!
set +e
MOE_SKIP_INSTALL=1 scripts/build.sh
built=$?
wait "$installing"
installed=$?
set -e
if [ "$installed" -ne 0 ]; then
  cat "$install_log"
  echo "installing the test packages failed (exit $installed): scripts/install_deps.sh test" >&2
fi
head -1 "$install_log"
rm -f "$install_log"
[ "$built" -eq 0 ] || exit "$built"
[ "$installed" -eq 0 ] || exit 1
root=$PWD
cd "${BUILD_DIR:-build}"
jobs=${JOBS:-$(nproc)}
kernels=${BLAS_KERNELS-Prescott Haswell SkylakeX Cooperlake Zen}
# A kernel forced by the caller's environment would apply to every phase: the default phase
# runs what momoe picks, and the forced kernel gets a phase of its own.
# OpenBLAS reads core names in any case: compare them in lower case.
lower() { echo "$1" | tr '[:upper:]' '[:lower:]'; }
preset=${OPENBLAS_CORETYPE:-}
if [ -n "$preset" ]; then
  echo "== the environment sets OPENBLAS_CORETYPE=$preset: momoe honours it in a run, so the" \
       "BLAS-sensitive tests run under it too; the default phase runs momoe's own pick"
  case " $(lower "$kernels") " in *" $(lower "$preset") "*) ;; *) kernels="$kernels $preset" ;; esac
fi
unset OPENBLAS_CORETYPE MOMOE_BLAS
# export_test keeps its trained checkpoints and float64 reference results here for the later
# phases (each phase still compares its own momoe-eval against the reference).
MOMOE_EXPORT_TEST_CACHE=$(mktemp -d "${TMPDIR:-/tmp}/momoe_export_cache.XXXXXX")
export MOMOE_EXPORT_TEST_CACHE
trap 'rm -rf "$MOMOE_EXPORT_TEST_CACHE"' EXIT

failed=()
summary=()
# A label that matches no test is an error (a renamed label would pass a whole phase), unless
# the caller narrows the run with ctest arguments of their own.
no_tests=(--no-tests=error)
[ $# -eq 0 ] || no_tests=()
# run_phase NAME WHY CTEST-ARGS...: one ctest run; its "N% tests passed" line joins the summary
# with the reason the phase ran.
run_phase() {
  local name=$1 why=$2
  shift 2
  local log
  log=$(mktemp)
  set +e
  ctest --output-on-failure "${no_tests[@]}" -j "$jobs" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  set -e
  summary+=("$name: $(grep -E 'tests passed' "$log" | tail -1 || echo 'no summary') ($why)")
  rm -f "$log"
  [ "$rc" -eq 0 ] || failed+=("$name")
}

bench=benchmarks/momoe-bench
picked=""
if [ -x "$bench" ]; then
  env_line=$("$bench" env)
  echo "$env_line"
  picked=$(echo "$env_line" | sed -n 's/.*"blas_kernel": "\([^"]*\)".*/\1/p')
fi
# fingerprint: the loaded kernel's arithmetic (kernels/cpu/blas_fingerprint.h), or "" when
# momoe-bench cannot say (then the phase runs).
fingerprint() {
  "$bench" blas-fingerprint 2> /dev/null | sed -n 's/.*"fingerprint": "\([0-9a-f]*\)".*/\1/p'
}
# The kernel each fingerprint was tested under.
declare -A tested_as=()
why="momoe's pick from this CPU's features"
echo "== every CPU test, OpenBLAS kernel ${picked:-unknown} ($why):"
run_phase "default kernel${picked:+ ($picked)}" "$why" -L 'cpu|mpi' "$@"
if [ -x "$bench" ]; then
  fp=$(fingerprint) || fp=""
  [ -z "$fp" ] || tested_as[$fp]=${picked:-the default kernel}
fi

if [ ! -x "$bench" ]; then
  echo "== no momoe-bench (MOE_BUILD_BENCHMARKS=OFF): cannot ask which OpenBLAS kernels this CPU runs; the BLAS-kernel phases are not run"
else
  for kernel in $kernels; do
    if [ "$(lower "$kernel")" = "$(lower "$picked")" ]; then
      echo "== OPENBLAS_CORETYPE=$kernel: the kernel momoe picks here; ran above"
      continue
    fi
    # momoe-bench env refuses a kernel this CPU cannot run with exit 2 (and the reason); any
    # other failure is a failure.
    set +e
    why=$(OPENBLAS_CORETYPE=$kernel "$bench" env 2>&1 >/dev/null)
    rc=$?
    set -e
    if [ "$rc" -eq 2 ]; then
      echo "== OPENBLAS_CORETYPE=$kernel: not run on this CPU: ${why#*] }"
      summary+=("$kernel: not run (this CPU cannot run it)")
      continue
    elif [ "$rc" -ne 0 ]; then
      echo "== OPENBLAS_CORETYPE=$kernel: momoe-bench env failed (exit $rc): $why" >&2
      failed+=("$kernel (momoe-bench env)")
      continue
    fi
    fp=$(OPENBLAS_CORETYPE=$kernel fingerprint) || fp=""
    if [ -n "$fp" ] && [ -n "${tested_as[$fp]:-}" ] && [ "${BLAS_SAME_ARITHMETIC:-skip}" != run ]; then
      echo "== OPENBLAS_CORETYPE=$kernel: not run: on this CPU it computes every product of" \
           "momoe-bench blas-fingerprint to the bits ${tested_as[$fp]} does (fingerprint $fp)," \
           "and ${tested_as[$fp]}'s phase ran (BLAS_SAME_ARITHMETIC=run runs it anyway)"
      summary+=("$kernel: not run (the arithmetic of ${tested_as[$fp]} on this CPU: fingerprint $fp)")
      continue
    fi
    [ -z "$fp" ] || tested_as[$fp]=$kernel
    if [ "$(lower "$kernel")" = "$(lower "$preset")" ]; then
      why="set by this environment's OPENBLAS_CORETYPE, which momoe honours"
    else
      why="another kernel this CPU runs (a user's OPENBLAS_CORETYPE, or another machine's pick)"
    fi
    why="$why; fingerprint ${fp:-unknown}"
    echo "== the BLAS-sensitive tests (label blas) under OPENBLAS_CORETYPE=$kernel ($why):"
    OPENBLAS_CORETYPE=$kernel run_phase "$kernel" "$why" -L blas "$@"
  done
fi

# Host sanitizers: a second build (build-sanitize/) of the unit-test subset that tests/sanitize.sh
# names, with AddressSanitizer and UndefinedBehaviorSanitizer.
if [ $# -gt 0 ]; then
  echo "== sanitizers: not run (the caller narrowed the run with ctest arguments)"
elif [ "${MOMOE_SANITIZE:-1}" = 0 ]; then
  echo "== sanitizers: not run (MOMOE_SANITIZE=0)"
  summary+=("sanitizers: not run (MOMOE_SANITIZE=0)")
else
  echo "== the unit-test subset under AddressSanitizer and UndefinedBehaviorSanitizer:"
  set +e
  JOBS=$jobs SANITIZE_BUILD_DIR="$root/build-sanitize" "$root/tests/sanitize.sh" 2>&1 | tail -40
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -eq 0 ]; then
    summary+=("sanitizers: passed (ASan + UBSan, tests/sanitize.sh's subset)")
  else
    summary+=("sanitizers: FAILED (exit $rc)")
    failed+=("sanitizers")
  fi
fi

# Mutation testing: the copy's build costs about two minutes on two cores, each mutant seconds.
if [ $# -gt 0 ]; then
  echo "== mutation testing: not run (the caller narrowed the run with ctest arguments)"
elif [ "$mutants" = none ]; then
  echo "== mutation testing: not run (MOMOE_MUTANTS=none)"
  summary+=("mutation: not run (MOMOE_MUTANTS=none)")
else
  select=()
  [ "$mutants" = all ] || select=(--rotate "$mutants")
  echo "== mutation testing (tests/mutation/run.py ${select[*]}):"
  log=$(mktemp)
  set +e
  python3 "$root/tests/mutation/run.py" "${select[@]}" --source "$root" --work "$PWD/mutation" \
    --jobs "$jobs" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  verdict=$(grep -E '^mutation: (all [0-9]+ killed|not killed:)' "$log" | tail -1 || true)
  verdict=${verdict#mutation: }
  chosen=$(sed -n 's/^mutation: \([0-9]* mutants ([^)]*)\).*/\1/p' "$log")
  summary+=("mutation: ${verdict:-exit $rc} (${chosen:-none chosen})")
  rm -f "$log"
  [ "$rc" -eq 0 ] || failed+=("mutation")
fi

echo "== summary"
for line in "${summary[@]}"; do echo "  $line"; done
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED under: ${failed[*]}" >&2
  exit 1
fi
echo "all phases passed"
