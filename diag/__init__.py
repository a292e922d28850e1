"""diag: diagnostics, fixes and before/after timings for SGLang speculative decoding on AMD GPUs."""

__version__ = "0.1.0"
