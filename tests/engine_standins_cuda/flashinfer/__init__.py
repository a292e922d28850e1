"""Stand-in for `flashinfer` (flashinfer-python 0.7.2), holding ONLY `flashinfer.sampling`'s two
renorm functions. SGLang 0.5.23 on CUDA resolves kernels/ops/sampling/renorm.py's
top_k_renorm_prob / top_p_renorm_prob to LazyImport("flashinfer.sampling", ...), which non-greedy
EAGLE verification (srt/speculative/eagle_utils.py eagle_sample) calls. Use it together with
SGLANG_IS_FLASHINFER_AVAILABLE=false, so SGLang's is_flashinfer_available() stays False and no
other flashinfer path is chosen; every other flashinfer submodule stays absent (ImportError).
"""
__version__ = "0.0.0+standin"
STANDIN = True

# SGLang 0.5.22 imports these at module level on CUDA (unguarded by is_flashinfer_available) and
# never calls them for a bf16 Llama/EAGLE model: each resolves to a raiser that names itself
# when called. srt/layers/quantization/fp8_utils.py:255 (bmm_fp8, under `if _is_cuda:`);
# FLASHINFER_STANDIN_IMPORT_ONLY=a,b adds names (a probe of another path).
_IMPORT_ONLY = {"bmm_fp8"}
_IMPORT_ONLY |= {n for n in __import__("os").environ.get(
    "FLASHINFER_STANDIN_IMPORT_ONLY", "").split(",") if n}


def __getattr__(name):
    if name.startswith("__") or name not in _IMPORT_ONLY:
        raise AttributeError(f"flashinfer stand-in has no {name}")

    def raiser(*a, **k):
        raise NotImplementedError(f"flashinfer stand-in: {name} is import-only")

    raiser.__name__ = name
    return raiser
