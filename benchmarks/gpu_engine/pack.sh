#!/usr/bin/env bash
# Builds what the GPU engine lane carries to a GPU machine that has no network (here, with PyPI):
#   .carry/gpu/whl/                  cp312 x86-64 wheels of what the server and diag need beyond
#                                    the GPU machine's image (torch, triton, transformers, numpy,
#                                    ... are there; the list below is what its image lacks)
#   .carry/gpu/xgrammar-stripped.tgz xgrammar 0.2.1 without its static library, its binding
#                                    stripped of symbols (44 MB wheel -> 0.9 MB; same code)
#   .carry/gpu/flashinfer-include.tgz  flashinfer 0.7.2's headers (see below)
#   .carry/gpu/sglang-src-V.txz      the release's .py files and the sources of its JIT kernels
#                                    (xz: 10 MB where gzip took 16; the lane's carry is 64 MiB
#                                    with the tracked tree)
#                                    (sglang/kernels/jit, built there with nvcc)
# Usage: bash benchmarks/gpu_engine/pack.sh [VERSION]   (default 0.5.23). Idempotent, cached.
set -euo pipefail
cd "$(dirname "$0")/../.."
V=${1:-0.5.23}
C=.carry/gpu
mkdir -p "$C/whl" "$C/tmp"
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp)
for n in 17 24 26 27 28 31 34 35; do PLAT+=(--platform "manylinux_2_${n}_x86_64"); done
PLAT+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# What the GPU image (device KINDS.md package list, 2026-11-17) lacks, with exact pins where
# SGLang pins them or the CPU lane (scripts/sglang-env.sh) proved a version.
WANT=(orjson pybase64 ipython pydantic setproctitle starlette msgspec "pyzmq>=25.1.2" uvicorn
      fastapi "openai==2.6.1" partial_json_parser "apache-tvm-ffi==0.1.11" compressed-tensors
      gguf dill jsonschema soundfile python-multipart "textual==8.2.8" interegular)
if [ ! -f "$C/whl/.done-2" ]; then
  rm -f "$C"/whl/*
  python3 -m pip download -q --disable-pip-version-check "${PLAT[@]}" --no-deps -d "$C/whl" "${WANT[@]}" \
    annotated-types asttokens cffi decorator distro executing jedi jiter jsonschema-specifications \
    linkify-it-py loguru matplotlib-inline mdit-py-plugins parso pexpect platformdirs \
    prompt-toolkit ptyprocess pure-eval pycparser pydantic-core referencing rpds-py sniffio \
    stack-data traitlets typing-inspection wcwidth uc-micro-py ipython-pygments-lexers \
    opentelemetry-api
  touch "$C/whl/.done-2"
fi
# diag's own readers beyond the image (ijson: `diag trace` on the GPU machine)
ls "$C"/whl/ijson-*.whl >/dev/null 2>&1 \
  || python3 -m pip download -q --disable-pip-version-check "${PLAT[@]}" --no-deps -d "$C/whl" ijson
# py-spy: where the counters' cost goes (benchmarks/overhead_profile.py, lane --profile-rounds)
ls "$C"/whl/py_spy-*.whl >/dev/null 2>&1 \
  || python3 -m pip download -q --disable-pip-version-check "${PLAT[@]}" --platform manylinux_2_5_x86_64 \
       --no-deps -d "$C/whl" py-spy
if [ ! -f "$C/xgrammar-stripped.tgz" ]; then
  rm -rf "$C/tmp/xg" && mkdir -p "$C/tmp/xg"
  python3 -m pip download -q --disable-pip-version-check "${PLAT[@]}" --no-deps -d "$C/tmp" xgrammar==0.2.1
  (cd "$C/tmp/xg" && python3 -m zipfile -e ../xgrammar-0.2.1-*.whl . && rm -f xgrammar/lib/libxgrammar.a \
     && strip --strip-unneeded xgrammar/libxgrammar_bindings.so && tar czf ../../xgrammar-stripped.tgz .)
fi
if [ ! -f "$C/sglang-src-$V.txz" ]; then
  rm -rf "$C/tmp/sg" && mkdir -p "$C/tmp/sg"
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$C/tmp" "sglang==$V"
  (cd "$C/tmp/sg" && python3 -m zipfile -e ../sglang-"$V"-*.whl . \
     && find sglang \( -name '*.py' -o -path 'sglang/kernels/jit/*' \) -type f -print0 \
        | tar cJf "../../sglang-src-$V.txz" --null -T - \
     && { find sglang-*.dist-info -type f | tar czf "../../sglang-meta-$V.tgz" -T -; } )
fi
if [ ! -f "$C/flashinfer-include.tgz" ]; then
  # flashinfer's C++ headers (flashinfer/data/include, 5.5 MB of the 65 MB wheel): SGLang's JIT
  # tree-sampling kernel (non-greedy EAGLE verification) compiles against them
  rm -rf "$C/tmp/fi" && mkdir -p "$C/tmp/fi"
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$C/tmp" flashinfer_python==0.7.2
  (cd "$C/tmp/fi" && unzip -q ../flashinfer_python-0.7.2-*.whl 'flashinfer/data/include/*' \
     && tar czf ../../flashinfer-include.tgz -C flashinfer/data include)
fi
rm -rf "$C/tmp"
du -sh "$C"/* | sed 's/^/pack: /' >&2
