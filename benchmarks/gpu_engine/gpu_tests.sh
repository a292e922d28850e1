#!/usr/bin/env bash
# The GPU-marked tests on a GPU machine without network, after or without device.sh.
# Carried (all ignored, built here): .carry/gpu/whl (diag's needs beyond the image: pack.sh),
# .carry/pytest/*.whl (pytest, pluggy, iniconfig) and .carry/rel/releases.tar.xz, the .py files
# and dist-info of the releases these tests read (0.5.17, 0.5.18, 0.5.23) from ~/.cache/diag:
#   (cd ~/.cache/diag && find releases/0.5.17 releases/0.5.18 releases/0.5.23 \( -name '*.py' \
#     -o -name .complete -o -path '*dist-info*' \) -type f | tar cf - -T - | xz -9e -T2) \
#     > .carry/rel/releases.tar.xz
# Carry [".carry/gpu/whl", ".carry/rel", ".carry/pytest"] (~32 MB with xz -9e: 12.5 MB of releases;
# with xz -6, 23 MB, the tracked tree's 24 MB took the call over the 64 MiB it carries, and so does
# the whole .carry/gpu). Ran on an H100 at 5742d3a (2026-12-06): 11 passed in 86 s.
# Usage (repo root there): bash benchmarks/gpu_engine/gpu_tests.sh OUTDIR [pytest args...]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUTDIR}; shift
mkdir -p "$out"
S=/tmp/gpu-site; P=/tmp/gpu-pytest; D=/tmp/gpu-diag-cache
[ -d $S/py ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --target $S/py .carry/gpu/whl/*.whl >"$out/pip.log" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $P \
  .carry/pytest/*.whl >>"$out/pip.log" 2>&1 || { echo "gpu_tests.sh: pytest install failed"; exit 2; }
rm -rf $D && mkdir -p $D && tar xJf .carry/rel/releases.tar.xz -C $D \
  || { echo "gpu_tests.sh: no .carry/rel/releases.tar.xz"; exit 2; }
python3 -m pip install -q --no-deps --no-build-isolation --no-cache-dir . >>"$out/pip.log" 2>&1 \
  || { echo "gpu_tests.sh: diag install failed"; tail -5 "$out/pip.log"; exit 2; }
export DIAG_CACHE_DIR=$D PYTHONPATH=$P:$S/py PYTHONUNBUFFERED=1
python3 -c "import torch, diag; print('gpu_tests.sh: torch', torch.__version__, torch.cuda.get_device_name(), '| diag', diag.__version__)"
python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/test_syncs_gpu.py \
  tests/test_allowlist_bench.py tests/test_profiler_gpu.py "$@" 2>&1 | tee "$out/gpu_tests.log"
exit "${PIPESTATUS[0]}"
