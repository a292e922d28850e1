"""Step `serve`: the kit's server, `diag run --probe all -- python -m sglang.launch_server ...`,
started and waited for; its resolved configuration read back from /server_info."""

from __future__ import annotations

import json
import time

from diag.kit.runner import Kit, Step
from diag.kit.steps.base import ready, start_server


class ServeStep(Step):
    id = "serve"
    title = "start the server under diag run"
    checks = {"server-start": "the server starts under diag run and serves a greedy request"}
    needs_server = False

    def run(self, kit: Kit) -> None:
        s = start_server(kit, "kit")
        kit.doc["server"] = {"url": s.url, "pid": s.proc.pid, "command": s.extra["cmd"],
                             "run_dir": str(s.run_dir),
                             "log": str(s.log), "ready_s": None, "describe": "did not start"}
        kit.say(f"starting (log {s.log})")
        try:
            ready(kit, s)
        except Exception as e:
            tail = [ln for ln in s.log_tail(20).splitlines() if ln.strip()]
            first = str(e).splitlines()[0].rstrip(":") if str(e) else type(e).__name__
            kit.record("server-start", "fail",
                       f"{first}: {tail[-1].strip() if tail else 'empty log'}"[:400],
                       {"waited_s": round(time.monotonic() - s.started, 1),
                        "returncode": s.proc.poll(), "log_tail": tail})
            raise
        code, body = s.get("/server_info")
        info = json.loads(body) if code == 200 and body.lstrip().startswith("{") else {}
        from diag.server import server_args

        args = dict(server_args(info)) if info else {}
        describe = (f"SGLang {info.get('version', '?')}, --attention-backend "
                    f"{args.get('attention_backend')}, {args.get('speculative_algorithm')} "
                    f"{args.get('speculative_num_steps')} steps, device {args.get('device')}; "
                    f"ready in {s.ready_s:.1f} s")
        kit.doc["server"].update(ready_s=round(s.ready_s or 0, 1), describe=describe,
                                 args={k: args.get(k) for k in (
                                     "attention_backend", "speculative_algorithm",
                                     "speculative_num_steps", "speculative_eagle_topk",
                                     "speculative_num_draft_tokens", "device",
                                     "disable_cuda_graph", "tp_size")})
        kit.main = s
        kit.record("server-start", "pass", describe, {"ready_s": round(s.ready_s or 0, 1)})
