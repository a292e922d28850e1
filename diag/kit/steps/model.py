"""Step `model`: the user's model, or the lanes' tiny models made here (diag.kit.tiny_model, in
the server's python: it has torch, tokenizers and safetensors)."""

from __future__ import annotations

import json
import os
import subprocess

from diag.kit.runner import Kit, Operational, Step


class ModelStep(Step):
    id = "model"
    title = "the model (given, or a tiny one made here)"
    checks: dict[str, str] = {}
    needs_server = False

    def run(self, kit: Kit) -> None:
        o = kit.opts
        if o.model:
            kit.models = {"target": o.model, **({"draft": o.draft_model} if o.draft_model else {})}
            kit.say(f"given: {kit.models}")
            return
        from diag.engine import bootstrap

        where = kit.work / "models"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(bootstrap.home()),
                                                        env.get("PYTHONPATH")) if p)
        profile = "gpu" if kit.gpu else "cpu"
        r = subprocess.run([o.python, "-m", "diag.kit.tiny_model", "make", str(where), "0",
                            profile], capture_output=True, text=True, timeout=300, env=env)
        if r.returncode:
            raise Operational(f"cannot make the tiny models: {r.stderr.strip()[-400:]}")
        made = json.loads(r.stdout)
        kit.models = {"target": made["bigram"], "draft": made["draft"]}
        kit.doc["options"]["model"] = f"tiny bigram + EAGLE draft ({profile} profile), {where}"
        kit.say(f"made tiny models ({profile}) in {where}")
