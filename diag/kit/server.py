"""A real SGLang server this process started: its process group, its URL and log, and the HTTP
calls diag makes to it. Shared by `diag kit run` and the tests' engine lanes (tests/
engine_server.py), so that both start, ask and stop a server the same way: the server runs in a
session of its own (`start_new_session`), and stopping it signals that process group only, never
a process diag did not start.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class StartTimeout(RuntimeError):
    """The server was still not ready at the timeout (its log tail in the message)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    log: Path
    run_dir: Path | None
    started: float
    ready_s: float | None = None
    extra: dict = field(default_factory=dict)

    def get(self, path: str, timeout: float = 30) -> tuple[int, str]:
        return http(self.url + path, timeout=timeout)

    def post(self, path: str, doc: dict, timeout: float = 60) -> tuple[int, str]:
        return http(self.url + path, doc, timeout=timeout)

    def generate(self, input_ids: list[int], n: int, timeout: float = 60) -> dict:
        code, body = self.post("/generate", {"input_ids": input_ids, "sampling_params": {
            "max_new_tokens": n, "temperature": 0, "ignore_eos": True}}, timeout=timeout)
        if code != 200:
            raise RuntimeError(f"/generate: HTTP {code}: {body[:300]}")
        return json.loads(body)

    def metrics(self) -> dict[str, float]:
        """/metrics as {'name{label="v",...}': value}, labels sorted, read with
        prometheus_client's text parser (the one diag's own readers use)."""
        from prometheus_client.parser import text_string_to_metric_families

        code, body = self.get("/metrics")
        if code != 200:
            raise RuntimeError(f"/metrics: HTTP {code}: {body[:300]}")
        out = {}
        for fam in text_string_to_metric_families(body):
            for s in fam.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
        return out

    def log_tail(self, n: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        return ""

    def stop(self) -> None:
        stop_group(self.proc)


def http(url: str, doc: dict | None = None, timeout: float = 30) -> tuple[int, str]:
    data = json.dumps(doc).encode() if doc is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def stop_group(proc: subprocess.Popen, grace: float = 20.0) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group (schedulers, helpers)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


def wait_ready(s: Server, timeout: float, why: Callable[[Server], str] = lambda s: "",
               error: type[RuntimeError] = StartTimeout) -> None:
    """Ready = a 1-token /generate answers (SGLang's own warm-up request has passed by then).
    A server that exits is a RuntimeError with its log tail; one not ready in time is `error`
    (with `why(s)` appended: the tests add every process's stacks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if s.proc.poll() is not None:
            raise RuntimeError(f"server exited with {s.proc.returncode}:\n{s.log_tail()}")
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            if s.get("/health", timeout=5)[0] == 200:
                s.generate([5, 6], 1, timeout=30)
                return
        time.sleep(0.5)
    raise error(f"server not ready within {timeout:g} s:\n{s.log_tail()}{why(s)}")


def launch(cmd: list[str], env: dict[str, str], log: Path, url: str,
           run_dir: Path | None = None) -> Server:
    """Start `cmd` in a session of its own (its process group is what `stop` signals), stdout
    and stderr to `log`; not waited for."""
    fh = open(log, "wb")
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        fh.close()
    return Server(proc=proc, url=url, log=log, run_dir=run_dir, started=t0)
