#!/usr/bin/env bash
# The GPU checks and benches, in one go, on a machine with a CUDA or ROCm GPU and torch.
# Usage: bash benchmarks/gpu_suite.sh OUTDIR [part]   (part: tests-bench | reproducer | all)
# Needs the releases it runs against in $DIAG_CACHE_DIR (no network needed when they are there).
set -uo pipefail
out=${1:?OUTDIR}; part=${2:-all}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
if ! command -v diag >/dev/null 2>&1; then
  python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 || true
fi
if ! command -v diag >/dev/null 2>&1; then
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  diag() { python3 -m diag "$@"; }
fi
python3 -c "import torch; print('torch', torch.__version__, 'hip', torch.version.hip, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" | tee "$out/device.txt"
if [ "$part" = tests-bench ] || [ "$part" = all ]; then
  python3 -m pytest -q -s -p no:cacheprovider -m gpu \
    tests/test_syncs_gpu.py tests/test_allowlist_bench.py tests/test_profiler_gpu.py 2>&1 | tee "$out/gpu_tests.log"
  diag bench repeat-interleave-output-size --sglang 0.5.17 --out "$out/bench_metadata.json"
  diag bench draft-extend-allowlist --param preset=design --out "$out/bench_de_design.json"
  diag bench draft-extend-allowlist --out "$out/bench_de_mtp.json"
  diag bench profiler-controlled-teardown --param gpu=1 --out "$out/bench_profiler.json"
  diag bench profiler-controlled-teardown --quick --param gpu=1 --param heap_objects=1000000 \
    --out "$out/bench_profiler_heap.json"
  diag probe metadata-syncs --sglang 0.5.17 | head -20
fi
if [ "$part" = reproducer ] || [ "$part" = all ]; then
  python3 -m diag.probes.profiler_teardown.reproducer --gpu 1 --tries "${TRIES:-5}" \
    --scenario late-collection --scenario late-collection-thread --scenario never-stopped \
    --scenario stop-twice --scenario controlled-teardown 2>&1 | tee "$out/reproducer.txt"
fi
