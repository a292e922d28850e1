"""Stand-in for `flashinfer` (flashinfer-python 0.7.2), holding ONLY `flashinfer.sampling`'s two
renorm functions. SGLang 0.5.23 on CUDA resolves kernels/ops/sampling/renorm.py's
top_k_renorm_prob / top_p_renorm_prob to LazyImport("flashinfer.sampling", ...), which non-greedy
EAGLE verification (srt/speculative/eagle_utils.py eagle_sample) calls. Use it together with
SGLANG_IS_FLASHINFER_AVAILABLE=false, so SGLang's is_flashinfer_available() stays False and no
other flashinfer path is chosen; every other flashinfer submodule stays absent (ImportError).
"""
__version__ = "0.0.0+standin"
STANDIN = True
