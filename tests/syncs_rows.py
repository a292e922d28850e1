"""The metadata-syncs probe's per-phase rows from a real `diag diagnose --json` run (a
subprocess): what the hand-read census tests compare against."""

from __future__ import annotations

import json
import subprocess
import sys


def phase_rows(version: str, backend: str, env: str, *flags: str) -> dict:
    """{phase: its `syncs_per_step` evidence} for `--attention-backend backend` on HIP, steps 3,
    topk 1, `--env env` (e.g. SGLANG_USE_AITER=0), and `flags`."""
    out = subprocess.run(
        [sys.executable, "-m", "diag", "diagnose", "--sglang", version, "--platform", "hip",
         "--attention-backend", backend, "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--env", env, "--json", *flags],
        capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    rows = {}
    for f in json.loads(out.stdout)["findings"]:
        if f["probe"] == "metadata-syncs":
            for e in f["evidence"]:
                d = e.get("data") or {}
                if "syncs_per_step" in d:
                    rows[d["phase"]] = d
    return rows
