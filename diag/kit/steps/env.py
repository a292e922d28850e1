"""Step `env`: `diag env`'s facts (torch and HIP/ROCm, GPUs, SGLang, SGLANG_*/HIP_* variables),
and what the server's own python sees (it may not be this one): its torch, GPU and SGLang."""

from __future__ import annotations

import json
import subprocess
import time

from diag.kit.runner import Kit, Operational, Step

PROBE = """
import importlib.util, importlib.metadata as md, json
out = {"sglang": None, "sglang_path": None, "torch": None, "hip": None, "cuda": None,
       "gpu": False, "devices": [], "error": None}
spec = importlib.util.find_spec("sglang")
if spec is not None:
    out["sglang_path"] = list(spec.submodule_search_locations or [])
    try:
        out["sglang"] = md.version("sglang")
    except Exception:
        out["sglang"] = "unknown"
try:
    import torch
    out.update(torch=torch.__version__, hip=torch.version.hip, cuda=torch.version.cuda,
               gpu=bool(torch.cuda.is_available()))
    if out["gpu"]:
        out["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


class EnvStep(Step):
    id = "env"
    title = "environment (diag env) and the server's python"
    checks = {"sglang-found": "SGLang importable by the server's python"}
    needs_server = False

    def run(self, kit: Kit) -> None:
        from diag.envinfo import collect

        try:
            env = collect()
        except Exception as e:  # a fact diag could not read is said, not fatal
            env = {"error": f"{type(e).__name__}: {e}"}
        kit.doc["environment"] = env
        kit.say(f"asking {kit.opts.python} for its torch, GPU and SGLang")
        t0 = time.monotonic()
        try:
            r = subprocess.run([kit.opts.python, "-c", PROBE], capture_output=True, text=True,
                               timeout=180)
            got = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else None
        except (OSError, ValueError, subprocess.TimeoutExpired) as e:
            raise Operational(f"cannot run {kit.opts.python}: {e}") from None
        if got is None:
            raise Operational(f"{kit.opts.python} failed: {r.stderr.strip()[-300:]}")
        env["server_python"] = {"python": kit.opts.python, **got}
        kit.gpu = bool(got["gpu"])
        kit.platform = "hip" if got["hip"] else "cuda" if got["cuda"] else None
        if kit.opts.device == "auto":
            kit.opts.device = "cuda" if kit.gpu else "cpu"
            kit.doc["options"]["device"] = kit.opts.device
        if got["sglang"] is None:
            kit.record("sglang-found", "fail", f"{kit.opts.python} cannot import sglang")
            raise Operational(f"no SGLang importable by {kit.opts.python} (install diag into "
                              "the environment that runs SGLang, or pass --python)")
        kit.record("sglang-found", "pass",
                   f"SGLang {got['sglang']} at {', '.join(got['sglang_path'])}; torch "
                   f"{got['torch']} ({'HIP ' + got['hip'] if got['hip'] else 'CUDA ' + str(got['cuda']) if got['cuda'] else 'CPU'}); "
                   f"GPU: {', '.join(got['devices']) or 'none'}",
                   {"sglang": got["sglang"], "torch": got["torch"], "gpu": kit.gpu,
                    "devices": got["devices"], "gpu_count": len(got["devices"]),
                    "answer_s": round(time.monotonic() - t0, 2)})
