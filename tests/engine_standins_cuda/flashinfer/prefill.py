"""Import-only `flashinfer.prefill`: SGLang 0.5.22 srt/layers/attention/vision.py:53 imports
`cudnn_batch_prefill_with_kv_cache` at module level on CUDA (the vision tower's cuDNN path);
a text-only Llama never calls it. Calling it raises, naming itself."""

_IMPORT_ONLY = {"cudnn_batch_prefill_with_kv_cache"}


def __getattr__(name):
    if name.startswith("__") or name not in _IMPORT_ONLY:
        raise AttributeError(f"flashinfer.prefill stand-in has no {name}")

    def raiser(*a, **k):
        raise NotImplementedError(f"flashinfer.prefill stand-in: {name} is import-only")

    raiser.__name__ = name
    return raiser
