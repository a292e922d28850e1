#!/usr/bin/env bash
# The GPU engine lane on a GPU machine without network: set up from what pack.sh built (carried
# as .carry/gpu), then run lane.py. Usage (from the repo root there):
#   bash benchmarks/gpu_engine/device.sh OUTDIR [lane.py args...]   (OUTDIR gets lane.json,
#   summary.txt, logs.tgz and caches.tgz; a caches.tgz left in .carry/gpu/ is restored first)
# LANE_COMMIT=<sha>, given literally, is recorded as the run's commit (the device's copy of the
# tree may carry an older .git: `git log` there is not the tree's commit).
# Stand-ins (tests/engine_standins_cuda, each says why): sgl_kernel (pure-torch operators: no
# sglang-kernel wheel for this torch), import-only flash_mla and cutlass (imported on CUDA, never
# called for a Llama/EAGLE model on the triton backend), flashinfer.sampling's two renorms
# (non-greedy verification; with SGLANG_IS_FLASHINFER_AVAILABLE=false nothing else is chosen).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?OUTDIR}; shift
mkdir -p "$out"
C=$PWD/.carry/gpu; W=/tmp/gpu-lane; S=/tmp/gpu-site
rm -rf $W  # a warm machine keeps the last run's work folder: its traces are not this run's
mkdir -p $W $S/src
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $S/py $C/whl/*.whl >$W/pip.log 2>&1 \
  || { echo "device.sh: wheel install failed"; tail -5 $W/pip.log; }
tar xzf $C/xgrammar-stripped.tgz -C $S/py
V=${SGLANG_VERSION:-0.5.23}  # pack.sh VERSION built .carry/gpu/sglang-src-V.txz, -meta-V.tgz
# (python's lzma reads the .txz: the image need not have xz)
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" \
  $C/sglang-src-$V.txz $S/src && tar xzf $C/sglang-meta-$V.tgz -C $S/src
# the flashinfer stand-in gets the real flashinfer headers beside it (SGLang's JIT finds them
# through the package's folder: data/include; the other include folders it checks stay empty)
FI=$PWD/tests/engine_standins_cuda/flashinfer/data
mkdir -p $FI/csrc $FI/cutlass/include $FI/cutlass/tools/util/include $FI/spdlog/include
tar xzf $C/flashinfer-include.tgz -C $FI
[ -f $C/caches.tgz ] && tar xzf $C/caches.tgz -C / && export LANE_WARM=1 && echo "device.sh: restored JIT/triton caches"
python3 -m pip install -q --no-deps --no-build-isolation --no-cache-dir . >$W/pip-diag.log 2>&1 \
  || { echo "device.sh: diag install failed"; tail -5 $W/pip-diag.log; }
export PYTHONPATH=$S/src:$PWD/tests/engine_standins_cuda:$S/py
export SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1 SGLANG_IS_FLASHINFER_AVAILABLE=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SGLANG_CACHE_DIR=/tmp/cache/sglang SGLANG_JIT_CACHE_DIR=/tmp/cache/sglang/jit \
       TVM_FFI_CACHE_DIR=/tmp/cache/tvm-ffi TRITON_CACHE_DIR=/tmp/cache/triton
# SGLang's JIT links -L$CUDA_HOME/lib64 -lcudart (CUDA_HOME defaults from nvcc's place)
if [ -z "${CUDA_HOME:-}" ]; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then export CUDA_HOME=/usr/local/cuda
  elif command -v nvcc >/dev/null; then export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")"); fi
fi
[ -n "${CUDA_HOME:-}" ] && export PATH=$CUDA_HOME/bin:$PATH
if [ -n "${CUDA_HOME:-}" ] && ! ls $CUDA_HOME/lib64/libcudart.so >/dev/null 2>&1; then
  cr=$(python3 -c "import glob,site; print(' '.join(glob.glob(site.getsitepackages()[0]+'/nvidia/**/libcudart.so*', recursive=True)))" 2>/dev/null)
  if [ -n "$cr" ]; then mkdir -p /tmp/cudart && ln -sf ${cr%% *} /tmp/cudart/libcudart.so && export LIBRARY_PATH=/tmp/cudart${LIBRARY_PATH:+:$LIBRARY_PATH}; fi
fi
python3 -c "import torch, sglang, diag; print('device.sh: torch', torch.__version__, torch.cuda.get_device_name(), '| sglang', sglang.__version__, '| diag', diag.__version__)"
# LANE_SCRIPT=record.py records the trace fixtures and the crash side by side instead
timeout ${LANE_TIMEOUT:-480} python3 benchmarks/gpu_engine/${LANE_SCRIPT:-lane.py} --work $W --out "$out" "$@"
rc=$?
[ "${LANE_SCRIPT:-lane.py}" = lane.py ] && tar czf "$out/logs.tgz" -C $W $(cd $W && ls -d server-*.log run-* prof-* 2>/dev/null) 2>/dev/null
[ -d /tmp/cache ] && tar czf "$out/caches.tgz" -C / tmp/cache 2>/dev/null && ls -la "$out/caches.tgz"
exit $rc
