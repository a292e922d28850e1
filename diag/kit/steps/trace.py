"""Step `trace`: a 3-step profile the server records (`/start_profile`), then `diag trace` on it
with its completeness verdict (graphs' kernels all recorded, nothing lossy)."""

from __future__ import annotations

import time

from diag.kit.runner import Kit, Step
from diag.kit.steps.base import diag_json


class TraceStep(Step):
    id = "trace"
    title = "diag trace on a profile the server records"
    checks = {"trace-complete": "diag trace reads the recorded profile and finds it complete"}

    def run(self, kit: Kit) -> None:
        s = kit.server
        out = kit.work / "profile"
        acts = ["CPU", "GPU"] if kit.gpu else ["CPU"]
        code, body = s.post("/start_profile", {"num_steps": 3, "activities": acts,
                                               "output_dir": str(out)}, timeout=60)
        if code != 200:
            kit.record("trace-complete", "not-run", "", {"http": code},
                       f"/start_profile answered HTTP {code}: {body[:200]}")
            return
        deadline = time.monotonic() + 120
        files: list[str] = []
        while time.monotonic() < deadline and not files:
            s.generate([5, 6, 7], 8, timeout=120)
            files = sorted(str(p) for p in out.glob("*.trace.json*")) if out.exists() else []
        if not files:
            kit.record("trace-complete", "not-run", "", {"activities": acts},
                       "the server wrote no trace file within 120 s of /start_profile")
            return
        time.sleep(1.0)  # the writer may still be closing the file
        kit.say(f"diag trace on {len(files)} file(s)")
        doc, err = diag_json("trace", *files, "--json", "--fail-on", "never")
        per = [{"path": f.get("path"), "platform": f.get("platform"), "events": f.get("events"),
                "graphs": len((f.get("completeness") or {}).get("graphs") or []),
                **{k: (f.get("completeness") or {}).get(k) for k in (
                    "complete", "gpu_recorded", "lossy", "unreliable_phases")}}
               for f in doc.get("files", [])]
        if not per:
            kit.record("trace-complete", "not-run", "", {"files": files},
                       f"diag trace read nothing from {len(files)} file(s) ({err})")
            return
        complete = all(p["complete"] for p in per)
        why = "; ".join(f"{p['path']}: lossy {p['lossy']}, unreliable {p['unreliable_phases']}"
                        for p in per if not p["complete"])
        kit.judge("trace-complete", complete,
                  f"{len(per)} trace file(s), activities {acts}: "
                  + ("complete" if complete else f"incomplete: {why}"),
                  {"files": per, "activities": acts,
                   "findings": [f.get("title") for f in doc.get("findings", [])][:8]})
