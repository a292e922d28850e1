"""STAND-IN for torchvision, used only by tests that import real SGLang modules on CPU.

The torchvision wheels reachable here are CUDA builds that fail against the CPU torch 2.13.0,
and `sglang/srt/utils/common.py` imports `torchvision.io` at top level (0.5.17 :94, 0.5.18 :95;
lazily in 0.5.23, :2114). This package defines only the names SGLang's import chain touches:
in 0.5.17 `torchvision.io.decode_jpeg` (srt/utils/common.py:94), `transforms.InterpolationMode`
(srt/multimodal/processors/qwen_vl.py:11), `transforms.functional.InterpolationMode`
(srt/multimodal/internvl_utils.py:7), `transforms.v2.functional`
(srt/hardware_backend/npu/modules/qwen_vl_processor.py:2), `pil_to_tensor`
(srt/multimodal/processors/minicpmv4_6.py:74), and through transformers (5.12.1, its
image_utils.py:54) `torchvision.io.{ImageReadMode, decode_image}`; every callable raises, so a test that
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
