#!/usr/bin/env bash
# Builds .venv-sglang: CPU torch 2.13.0 + the pure-Python/CPU part of SGLang's requirements, so
# tests can import the real `sglang.srt.speculative.eagle_worker_v2` of several releases (each
# release's source tree goes on PYTHONPATH in its own child process; sglang itself is NOT
# installed here). Idempotent: a stamp keyed on the requirement list makes a rerun instant.
# Pins are 0.5.17's (they import 0.5.17, 0.5.18 and 0.5.23); torchvision is replaced by the
# stand-in under tests/standins (its CUDA wheels fail against CPU torch). ~2.5 min, ~2.4 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${DIAG_SGLANG_VENV:-.venv-sglang}
TORCH_REQ="torch==2.13.0"
REQS=(
  numpy orjson psutil pybase64 requests packaging pillow tqdm ipython pydantic einops
  setproctitle starlette aiohttp msgspec "pyzmq>=25.1.2" uvicorn fastapi "triton==3.7.1"
  "transformers==5.12.1" "openai==2.6.1" partial_json_parser "xgrammar==0.2.1"
  "apache-tvm-ffi==0.1.11" sentencepiece compressed-tensors gguf dill
  click wrapt prometheus_client
)
key=$(printf '%s\n' "$TORCH_REQ" "${REQS[@]}" | sha256sum | cut -c1-16)
stamp="$VENV/.diag-stamp-$key"
if [ -f "$stamp" ] && [ -x "$VENV/bin/python" ]; then
  exit 0
fi
start=$(date +%s)
echo "sglang-env: building $VENV (torch 2.13.0 CPU + SGLang CPU requirements; a few minutes)" >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
rm -f "$VENV"/.diag-stamp-*
pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
# torch first, then everything else under a constraint that keeps exactly this torch.
"${pip[@]}" "$TORCH_REQ"
cons="$VENV/diag-constraints.txt"
echo "$TORCH_REQ" >"$cons"
"${pip[@]}" -c "$cons" "${REQS[@]}"
# diag itself (its runtime deps above; textual is not needed inside engine-like processes).
"${pip[@]}" --no-deps -e .
"$VENV/bin/python" -c "import torch, triton, transformers, xgrammar; assert torch.__version__.startswith('2.13.0'), torch.__version__"
touch "$stamp"
echo "sglang-env: ready in $(( $(date +%s) - start )) s" >&2
