"""What several steps do: start a server like the kit's own (under `diag run`), read its engine
process's counters from the run directory, call diag's own commands for their JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from diag.kit.runner import Kit, Operational
from diag.kit.server import Server, free_port, launch, wait_ready

PROMPTS = [[5, 6, 7], [11, 42, 99, 7], [250, 3], [17, 18, 19, 20, 21], [300], [64, 65]]
# the agent's own variables: a kit run inside `diag run` must not hand its run to the servers
AGENT_VARS = ("DIAG_RUN_DIR", "DIAG_FIXES", "DIAG_PROBES", "DIAG_AGENT", "DIAG_RUN_ID")


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in AGENT_VARS}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def server_cmd(kit: Kit, port: int) -> list[str]:
    """`python -m sglang.launch_server` as the options say (the host's SGLang python)."""
    o = kit.opts
    cmd = [o.python, "-m", "sglang.launch_server", "--model-path", kit.models["target"],
           "--device", o.device, "--host", "127.0.0.1", "--port", str(port), "--enable-metrics"]
    if kit.models.get("draft"):
        cmd += ["--speculative-draft-model-path", kit.models["draft"]]
    cmd += list(o.speculative)
    if o.attention_backend:
        cmd += ["--attention-backend", o.attention_backend]
    return cmd + list(o.server_args)


def start_server(kit: Kit, name: str, *, under_diag: bool = True,
                 diag_args: tuple[str, ...] = ("--probe", "all"),
                 env: dict[str, str] | None = None) -> Server:
    """Start one server (kept by the kit to stop at the end); not waited for."""
    port = free_port()
    cmd = server_cmd(kit, port)
    run_dir = kit.work / f"run-{name}" if under_diag else None
    if run_dir is not None:
        cmd = [sys.executable, "-m", "diag", "run", *diag_args, "--run-dir", str(run_dir),
               "--", *cmd]
    s = launch(cmd, server_env(env), kit.work / f"server-{name}.log", f"http://127.0.0.1:{port}",
               run_dir)
    s.extra.update(name=name, cmd=cmd)
    return kit.start(s)


def ready(kit: Kit, s: Server) -> Server:
    """Wait until `s` serves; a server that exits or hangs is the kit's operational error."""
    try:
        wait_ready(s, kit.opts.step_timeout)
    except RuntimeError as e:
        raise Operational(f"server {s.extra.get('name')} did not start: {e}") from None
    s.ready_s = time.monotonic() - s.started
    return s


def engine_counters(s: Server) -> dict[str, Any] | None:
    """The engine (scheduler) process's folded counters, from the run directory."""
    from diag.engine import rundir

    if s.run_dir is None:
        return None
    st = rundir.read_state(s.run_dir)
    eng = [p for p in st.live if p.engine]
    return dict(eng[0].counters) if eng else None


def wait_for(pred: Callable[[], Any], timeout: float = 30.0, interval: float = 0.3) -> Any:
    """`pred()`'s first truthy value within `timeout`, else its last value."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    return last


def diag_json(*args: str, timeout: float = 300) -> tuple[dict[str, Any], str]:
    """`diag ARGS --json` in a child (this diag): its document ({} when none) and stderr tail."""
    env = {k: v for k, v in os.environ.items() if k not in AGENT_VARS}
    r = subprocess.run([sys.executable, "-m", "diag", *args], capture_output=True, text=True,
                       timeout=timeout, env=env)
    out = r.stdout.strip()
    try:
        doc = json.loads(out) if out.startswith("{") else {}
    except ValueError:
        doc = {}
    return doc, f"exit {r.returncode}: {r.stderr.strip()[-300:]}"


def platform_args(kit: Kit) -> tuple[str, ...]:
    """--platform for diag's probes: the server's torch build (hip/cuda) when it has a GPU; a
    CPU server is left to diag (it audits SGLang's non-HIP path and says so)."""
    return ("--platform", kit.platform) if kit.gpu and kit.platform else ()


def greedy(s: Server, tokens: int) -> list[list[int]]:
    return [s.generate(p, tokens, timeout=120)["output_ids"] for p in PROMPTS]
