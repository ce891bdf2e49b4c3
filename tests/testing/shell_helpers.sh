# Helpers the shell tests source (tests/launcher/*.sh, tests/benchmarks/*.sh, tests/mutation/):
#   source "$(dirname "$0")/../testing/shell_helpers.sh"
# Each helper fails the test with a message that names what was expected.
# shellcheck shell=bash

# fail MESSAGE...: "FAIL: MESSAGE" (with " [$FAIL_CONTEXT]" after FAIL when set) on stderr, exit 1.
fail() {
  echo "FAIL${FAIL_CONTEXT:+ [$FAIL_CONTEXT]}: $*" >&2
  exit 1
}

# expect_in FILE NEEDLE: FILE contains NEEDLE (a fixed string); else prints FILE and fails.
expect_in() {
  grep -qF -- "$2" "$1" || { cat "$1"; fail "'$2' not in $1"; }
}

# expect_code CODE NEEDLE COMMAND...: COMMAND exits CODE and its output (stdout, stderr) mentions
# NEEDLE. Its stdout and stderr are kept in $EXPECT_DIR/out and $EXPECT_DIR/err (EXPECT_DIR:
# the test's scratch directory, which it must set).
expect_code() {
  local code=$1 needle=$2 rc
  shift 2
  "$@" > "$EXPECT_DIR/out" 2> "$EXPECT_DIR/err"
  rc=$?
  [ "$rc" -eq "$code" ] ||
    { cat "$EXPECT_DIR/out" "$EXPECT_DIR/err"; fail "'$*' exited $rc, expected $code"; }
  cat "$EXPECT_DIR/out" "$EXPECT_DIR/err" | grep -qF -- "$needle" ||
    { cat "$EXPECT_DIR/out" "$EXPECT_DIR/err"; fail "'$*' did not mention '$needle'"; }
}

# expect_file PATH [WHAT]: PATH exists (a file or a directory); else lists the directory above it
# and fails naming PATH (and WHAT it should be).
expect_file() {
  [ -e "$1" ] || { ls -la "$(dirname "$1")" 2>&1; fail "$1 is missing${2:+ ($2)}"; }
}

# expect_no_file PATH [WHY]: PATH does not exist; else fails naming it (and WHY it must not).
expect_no_file() {
  [ ! -e "$1" ] || fail "$1 exists${2:+ ($2)}"
}

# install_pinned_venv VENV REQUIREMENTS [VENV_FLAGS...]: a Python virtual environment at VENV
# holding exactly the pins of REQUIREMENTS (pip reaches PyPI), made once under a lock
# (concurrent tests wait) and remade when the pins change; it is complete only once its stamp (a
# copy of the pins) is written. VENV_FLAGS go to `$VENV_PYTHON -m venv` (VENV_PYTHON: python3 on
# PATH unless set; --system-site-packages with Debian's /usr/bin/python3 uses its torch and
# numpy). A failed install removes VENV and fails.
install_pinned_venv() {
  local venv=$1 requirements=$2 log
  shift 2
  exec 9> "$venv.lock"
  flock 9 || fail "cannot lock $venv.lock"
  if ! cmp -s "$requirements" "$venv/installed-requirements.txt"; then
    # The install's log, made only when there is an install (a test killed while waiting for
    # the lock, or finding the pins installed, leaves nothing behind).
    log=$(mktemp "${TMPDIR:-/tmp}/momoe_venv.XXXXXX")
    rm -rf "$venv"
    if ! "${VENV_PYTHON:-python3}" -m venv "$@" "$venv" > "$log" 2>&1; then
      cat "$log"
      rm -f "$log"
      fail "${VENV_PYTHON:-python3} -m venv $venv failed (Debian: apt-get install python3-venv)"
    fi
    if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$requirements" \
        > "$log" 2>&1; then
      cat "$log"
      rm -rf "$venv" "$log"
      fail "pip could not install $requirements into $venv"
    fi
    cp "$requirements" "$venv/installed-requirements.txt"
    rm -f "$log"
  fi
  exec 9>&-
}
