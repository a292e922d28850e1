#!/usr/bin/env bash
# Extends the SGLang environment (scripts/sglang-env.sh; DIAG_SGLANG_VENV, default .venv-sglang)
# with what `python -m sglang.launch_server` needs beyond the importable modules, for the
# `engine` test lane and benchmarks/engine_overhead.py: the server fails to import without
# uvloop, jsonschema, soundfile and python-multipart (FastAPI form routes). Idempotent: a stamp
# keyed on the list makes a rerun instant. Registries only; nothing else is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${DIAG_SGLANG_VENV:-.venv-sglang}
REQS=(uvloop jsonschema soundfile python-multipart)
key=$(printf '%s\n' "${REQS[@]}" | sha256sum | cut -c1-16)
stamp="$VENV/.diag-engine-stamp-$key"
if [ -f "$stamp" ] && [ -x "$VENV/bin/python" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || { echo "engine-env: $VENV missing (run scripts/sglang-env.sh)" >&2; exit 3; }
start=$(date +%s)
rm -f "$VENV"/.diag-engine-stamp-*
cons="$VENV/diag-constraints.txt"
[ -f "$cons" ] || echo "torch==2.13.0" >"$cons"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -c "$cons" "${REQS[@]}"
"$VENV/bin/python" -c "import uvloop, jsonschema, soundfile, multipart, tokenizers, safetensors"
touch "$stamp"
echo "engine-env: ready in $(( $(date +%s) - start )) s" >&2
