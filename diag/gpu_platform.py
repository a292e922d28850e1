"""Platform facts: which GPU runtime the gate is evaluated for, read from the local torch."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


# ROCm's kernel driver lists each agent under the KFD topology; a GPU's `gfx_target_version` is
# major * 10000 + minor * 100 + stepping (gfx942: 90402, gfx950: 90500, gfx90a: 90010), a CPU's 0
KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
GPU_ARCH = re.compile(r"^gfx[0-9a-f]{3,5}(:[a-z0-9+:-]*)?$")


def arch_name(target_version: int) -> str | None:
    """`gfx_target_version` -> the gcnArchName stem (`gfx942`); None for 0 (a CPU node)."""
    if target_version <= 0:
        return None
    major, minor, step = target_version // 10000, target_version // 100 % 100, \
        target_version % 100
    return f"gfx{major}{minor:x}{step:x}"


def local_gpu_arch(nodes: Path = KFD_NODES) -> str | None:
    """The first AMD GPU's arch on this host, read from the KFD topology without importing torch
    (what `torch.cuda.get_device_properties(0).gcnArchName` starts with); None without one.
    Why: SGLang picks kernels and metadata paths by it (`is_gfx95_supported()`: MI350/MI355
    against MI300's gfx942), so an audit on an AMD host decides those branches itself."""
    try:
        names = sorted(nodes.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 1 << 30)
    except OSError:
        return None
    for node in names:
        try:
            text = (node / "properties").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        m = re.search(r"^gfx_target_version\s+(\d+)\s*$", text, re.M)
        arch = arch_name(int(m.group(1))) if m else None
        if arch:
            return arch
    return None


def local_triton_version() -> str | None:
    """The version of the `triton` this Python finds (the ROCm build ships it as
    pytorch-triton-rocm, same module), read from its `__init__.py` without importing it; None
    without one. Why: on ROCm SGLang's DSA page size follows it (aiter's preshuffle paged MQA
    needs Triton >= 3.5.0: 0.5.23 layers/attention/dsa/utils.py:66)."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    try:
        text = Path(spec.origin).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.search(r"^__version__\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return m.group(1) if m else None


def same_host(server_url: str | None) -> bool:
    """No server, or one on this host (loopback): this host's GPU is the one it runs on."""
    if not server_url:
        return True
    from urllib.parse import urlsplit

    host = urlsplit(server_url if "//" in server_url else f"http://{server_url}").hostname
    return host in ("localhost", "127.0.0.1", "::1", "0.0.0.0")


def fill_host_facts(cfg: Any, platform: str, server_url: str | None) -> None:
    """The configuration's GPU arch and Triton, where not given, from this host when the server
    runs here on HIP (`diagnose`, `probe`, `fix check` and the TUI alike): its first AMD GPU
    (KFD topology) and, on a host with one, this Python's Triton."""
    if platform != "hip" or not same_host(server_url):
        return
    local = local_gpu_arch()
    if cfg.gpu_arch is None:  # it decides SGLang's is_gfx*_supported() branches
        cfg.gpu_arch = local
    if local and cfg.triton_version is None:  # an AMD host: its Triton is the server's
        cfg.triton_version = local_triton_version()
