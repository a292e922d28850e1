#!/usr/bin/env bash
# Sets up everything the test suite needs (idempotent, cached) and runs it.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export DIAG_CACHE_DIR=${DIAG_CACHE_DIR:-$HOME/.cache/diag}

# --- system packages (tmux for the real-terminal TUI test, prometheus for the fleet test)
need_apt=()
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing ${need_apt[*]} (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "test.sh: ${need_apt[*]} missing and cannot be installed here; those tests will skip" >&2
  fi
fi

# --- the test virtualenv: torch 2.13.0 (CPU build) and diag with its test extra
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check torch==2.13.0 -e '.[test]'
# an editable install gets no bytecode where PYTHONDONTWRITEBYTECODE is set (these machines, many
# container images): compile it as `pip install .` does, or every run compiles ~60 modules again
.venv/bin/python -m compileall -q diag probes fixes tui >/dev/null

# --- the SGLang-requirements environment for tests that import real SGLang modules
bash scripts/sglang-env.sh
# --- ... plus what the real server needs (the `engine` lane: tests/test_engine_server.py)
bash scripts/engine-env.sh

# --- lint, then the suite
.venv/bin/ruff check diag probes fixes tui tests benchmarks
bash scripts/lint-imports.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
