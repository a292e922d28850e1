"""Platform facts: which GPU runtime the gate is evaluated for, read from the local torch."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

PLATFORMS = ("hip", "cuda")


@dataclass(frozen=True)
class TorchInfo:
    present: bool
    version: str | None = None
    hip: str | None = None
    cuda: str | None = None
    gpu_available: bool = False
    devices: tuple[str, ...] = ()
    error: str | None = None

    @property
    def runtime(self) -> str | None:
        if self.hip:
            return "hip"
        if self.cuda:
            return "cuda"
        return None


def torch_info() -> TorchInfo:
    """Imports torch (slow): call from commands, never at import time."""
    if importlib.util.find_spec("torch") is None:
        return TorchInfo(present=False)
    try:
        import torch
    except Exception as e:  # a broken torch install is a fact to report, not a crash
        return TorchInfo(present=False, error=f"{type(e).__name__}: {e}")
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    try:
        avail = bool(torch.cuda.is_available())
        devices = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())) if avail else ()
    except Exception as e:
        return TorchInfo(True, torch.__version__, hip, cuda, False, (), f"{type(e).__name__}: {e}")
    return TorchInfo(True, torch.__version__, hip, cuda, avail, devices)


def default_platform(info: TorchInfo | None = None) -> str:
    """`hip` unless the local torch is a CUDA build with a GPU: the tool exists for AMD hosts."""
    info = info or torch_info()
    if info.gpu_available and info.runtime == "cuda":
        return "cuda"
    return "hip"
