"""The engine lanes' tiny models: made by `diag.kit.tiny_model` (shared with `diag kit run`);
this module keeps the tests' names and runs that module in the SGLang environment's python."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from diag.kit.tiny_model import PROFILES, bigram_greedy, make_models  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def in_env(python: str | Path, *args: str) -> object:
    """Run the model module's CLI with the SGLang environment's python (it has tokenizers and
    safetensors; the test environment does not), this checkout's diag first on its path; its
    JSON answer."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    r = subprocess.run([str(python), "-m", "diag.kit.tiny_model", *map(str, args)],
                       capture_output=True, text=True, timeout=300, env=env)
    if r.returncode:
        raise RuntimeError(f"engine_models {args[0]}: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout)
