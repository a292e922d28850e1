"""Platform facts: which GPU runtime the gate is evaluated for, read from the local torch."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

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


# Device nodes a GPU runtime needs: without any of them neither CUDA nor ROCm can see a GPU.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def gpu_possible() -> bool:
    """False only when no GPU can be visible to torch here (no GPU device node), so callers can
    skip importing torch (seconds) to ask; True means: ask torch."""
    if "torch" in sys.modules:
        return True
    return any(os.path.exists(p) for p in GPU_DEVICE_NODES)


def torch_build() -> tuple[str | None, str | None] | None:
    """(cuda, hip) of the local torch build read from its `version.py` without importing torch;
    None when that cannot be read (then import it)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    try:
        text = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
    except OSError:
        return None
    found = {}
    for name in ("cuda", "hip"):
        m = re.search(rf"^{name}\s*(?::[^=]*)?=\s*(None|'[^']*'|\"[^\"]*\")\s*$", text, re.M)
        if m is None:
            return None
        found[name] = None if m.group(1) == "None" else m.group(1)[1:-1]
    return found["cuda"], found["hip"]


def default_platform(info: TorchInfo | None = None) -> str:
    """`hip` unless the local torch is a CUDA build with a GPU: the tool exists for AMD hosts.

    Without `info`, torch is imported only when the answer depends on it: a CUDA build on a
    host with a GPU device node."""
    if info is None and "torch" not in sys.modules:
        build = torch_build()
        if importlib.util.find_spec("torch") is None:
            return "hip"
        if build is not None and (not build[0] or not gpu_possible()):
            return "hip"  # not a CUDA build, or no GPU to see: torch would say the same
    info = info or torch_info()
    if info.gpu_available and info.runtime == "cuda":
        return "cuda"
    return "hip"
