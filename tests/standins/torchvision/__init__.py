"""STAND-IN for torchvision, used only by tests that import real SGLang modules on CPU.

The torchvision wheels reachable here are CUDA builds that fail against the CPU torch 2.13.0,
and `sglang/srt/utils/common.py` imports `torchvision.io` at top level. This package defines only
the names SGLang's import chain touches (SGLANG.md); every callable raises, so a test that
reached real image decoding would fail loudly instead of passing on fake data. It is put on
PYTHONPATH only in the child processes that import sglang.
"""

__version__ = "0.0.0+diag.standin"
STANDIN = True


def _unavailable(name: str):
    def fn(*args, **kwargs):
        raise RuntimeError(f"torchvision stand-in: {name} is not available in diag's tests")

    fn.__name__ = name.rsplit(".", 1)[-1]
    return fn
