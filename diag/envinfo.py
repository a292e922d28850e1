"""What `diag env` reports: Python, torch (HIP/CUDA), GPUs, the SGLang release, variables, servers.

Every part is read defensively: a missing tool or a broken install is a fact to report (a value
of None plus an `error`), never an exception.
"""

from __future__ import annotations

import json
import os
import platform as pyplatform
import shutil
import subprocess
import sys
from typing import Any

from diag import __version__
from diag.schemas import SCHEMA_VERSION

# Variables that change the code paths diag looks at, shown set or not. Where SGLang reads them
# (sglang 0.5.23 unless said): SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH srt/speculative/
# eagle_worker_v2.py:627; SGLANG_ENABLE_SPEC_V2 srt/environ.py:459 (0.5.11; the last release
# that has it is 0.5.13.post1, :620); SGLANG_PROFILE_V2 srt/managers/scheduler_components/
# profiler_manager.py:62; SGLANG_PLUGINS srt/plugins/__init__.py:53; SGLANG_ENABLE_SINGLE_CG_DRAFT
# srt/speculative/multi_layer_eagle_worker_v2.py:438. The others are the ROCm/CUDA runtime's.
RELEVANT_VARS = (
    "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH",
    "SGLANG_ENABLE_SPEC_V2",
    "SGLANG_PROFILE_V2",
    "SGLANG_PLUGINS",
    "SGLANG_ENABLE_SINGLE_CG_DRAFT",
    "HIP_VISIBLE_DEVICES",
    "HIP_LAUNCH_BLOCKING",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "PYTORCH_ROCM_ARCH",
)
VAR_PREFIXES = ("SGLANG_", "HIP_", "DIAG_")
SMI_TIMEOUT_S = 10


def env_vars(environ: dict[str, str] | None = None) -> dict[str, str | None]:
    """The relevant variables (None when unset) plus every other SGLANG_*/HIP_*/DIAG_* set."""
    env = os.environ if environ is None else environ
    out: dict[str, str | None] = {k: env.get(k) for k in RELEVANT_VARS}
    for k in sorted(env):
        if k.startswith(VAR_PREFIXES) and k not in out:
            out[k] = env[k]
    return out


def torch_part() -> dict[str, Any]:
    from diag.gpu_platform import default_platform, torch_info

    info = torch_info()
    return {"present": info.present, "version": info.version, "hip": info.hip,
            "cuda": info.cuda, "gpu_available": info.gpu_available,
            "devices": list(info.devices), "error": info.error,
            "default_platform": default_platform(info)}


def amd_gpus() -> dict[str, Any]:
    """GPUs as amdsmi (Python) or rocm-smi (CLI) see them; `source` says which answered."""
    try:
        import amdsmi  # type: ignore[import-not-found]
    except Exception:
        amdsmi = None
    if amdsmi is not None:
        try:
            amdsmi.amdsmi_init()
            try:
                names = []
                for h in amdsmi.amdsmi_get_processor_handles():
                    asic = amdsmi.amdsmi_get_gpu_asic_info(h)
                    names.append(str(asic.get("market_name") or asic.get("asic_serial") or "?"))
            finally:
                amdsmi.amdsmi_shut_down()
            return {"source": "amdsmi", "gpus": names, "error": None}
        except Exception as e:
            return {"source": "amdsmi", "gpus": [], "error": f"{type(e).__name__}: {e}"}
    exe = shutil.which("rocm-smi")
    if exe:
        try:
            proc = subprocess.run([exe, "--showproductname", "--json"], capture_output=True,
                                  text=True, timeout=SMI_TIMEOUT_S)
            doc = json.loads(proc.stdout or "{}")
            names = [str(v.get("Card Series") or v.get("Card series") or v.get("Card model")
                         or "?") for k, v in sorted(doc.items()) if k.startswith("card")]
            return {"source": "rocm-smi", "gpus": names,
                    "error": None if proc.returncode == 0 else proc.stderr.strip()[:200]}
        except (subprocess.TimeoutExpired, OSError, json.JSONDecodeError, AttributeError) as e:
            return {"source": "rocm-smi", "gpus": [], "error": f"{type(e).__name__}: {e}"}
    return {"source": None, "gpus": [], "error": "neither amdsmi nor rocm-smi found"}


def gpu_arch_part() -> dict[str, Any]:
    """The first AMD GPU's arch from the KFD topology: what diagnose takes for --gpu-arch."""
    from diag.gpu_platform import KFD_NODES, local_gpu_arch

    return {"value": local_gpu_arch(), "source": str(KFD_NODES)}


def sglang_part(spec: str | None, log=None) -> dict[str, Any]:
    """The importable SGLang (found, not imported), or the one `--sglang` names."""
    from diag import target as target_mod

    if spec is None:
        t = target_mod.find_importable()
        if t is None:
            return {"found": False, "version": None, "path": None, "origin": None,
                    "note": "no sglang importable here (diag diagnose then audits the pinned "
                            "default release)"}
    else:
        t = target_mod.resolve(spec, log=log)
    return {"found": True, "version": t.version, "path": str(t.package), "origin": t.origin}


def servers_part() -> list[dict[str, Any]]:
    from diag.discovery import find_servers

    return [s.to_dict() for s in find_servers()]


def collect(sglang: str | None = None, log=None) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "diag", "version": __version__},
        "python": {"version": pyplatform.python_version(), "executable": sys.executable},
        "os": pyplatform.platform(),
        "torch": torch_part(),
        "amd_smi": amd_gpus(),
        "gpu_arch": gpu_arch_part(),
        "sglang": sglang_part(sglang, log),
        "env": env_vars(),
        "servers": servers_part(),
    }


def render(doc: dict[str, Any]) -> str:
    t, s, smi = doc["torch"], doc["sglang"], doc["amd_smi"]
    lines = [f"diag {doc['tool']['version']}  python {doc['python']['version']} "
             f"({doc['python']['executable']})  {doc['os']}"]
    if t["present"]:
        rt = f"HIP {t['hip']}" if t["hip"] else f"CUDA {t['cuda']}" if t["cuda"] else "CPU build"
        lines.append(f"torch {t['version']} ({rt}); GPU available: {t['gpu_available']}"
                     + (f" ({t['error']})" if t["error"] else ""))
        for i, d in enumerate(t["devices"]):
            lines.append(f"  gpu {i}: {d}")
    else:
        lines.append("torch: not installed" + (f" ({t['error']})" if t["error"] else ""))
    lines.append(f"default platform: {t['default_platform']}")
    if smi["source"]:
        lines.append(f"{smi['source']}: " + (", ".join(smi["gpus"]) or "no GPUs")
                     + (f" ({smi['error']})" if smi["error"] else ""))
    else:
        lines.append(f"AMD SMI: {smi['error']}")
    arch = doc.get("gpu_arch") or {}
    lines.append(f"gpu arch: {arch['value']} (from {arch['source']}; diagnose decides SGLang's "
                 f"is_gfx*_supported() branches by it)" if arch.get("value") else
                 f"gpu arch: no AMD GPU in {arch.get('source')} (pass --gpu-arch to diagnose)")
    if s["found"]:
        lines.append(f"sglang {s['version'] or '(unknown version)'} at {s['path']} "
                     f"[{s['origin']}]")
    else:
        lines.append(f"sglang: {s['note']}")
    lines.append("variables:")
    for k, v in doc["env"].items():
        lines.append(f"  {k}={v}" if v is not None else f"  {k} (unset)")
    if doc["servers"]:
        lines.append("running SGLang servers:")
        for srv in doc["servers"]:
            lines.append(f"  pid {srv['pid']} port {srv['port']} {srv['url'] or ''}  "
                         f"{srv['cmdline'][:160]}")
    else:
        lines.append("running SGLang servers: none found")
    return "\n".join(lines)
