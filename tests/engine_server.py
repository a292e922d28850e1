"""Start and stop a real SGLang server on CPU (tests' `engine` lane and benchmarks/engine_overhead).

The server is the release's own `python -m sglang.launch_server`, run by the SGLang environment
(`scripts/sglang-env.sh` + `scripts/engine-env.sh`) with the release tree, the torchvision
stand-in (tests/standins) and the sgl_kernel/AMX-flag stand-ins (tests/engine_standins) on
PYTHONPATH, on tiny models made at test time (tests/engine_models.py). Optionally under
`diag run`. Always torn down: the whole process group gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_PY = Path(os.environ.get("DIAG_SGLANG_VENV", REPO / ".venv-sglang")) / "bin" / "python"
ENGINE_MODULES = ("uvloop", "jsonschema", "soundfile", "multipart", "tokenizers", "safetensors")

EAGLE_ARGS = ("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2",
              "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3")


def missing_env() -> str | None:
    """Why the real server cannot start here (None when it can)."""
    if not VENV_PY.exists():
        return f"{VENV_PY} missing: run scripts/sglang-env.sh and scripts/engine-env.sh"
    r = subprocess.run([str(VENV_PY), "-c", "import " + ", ".join(ENGINE_MODULES)],
                       capture_output=True, text=True)
    if r.returncode:
        return f"engine packages missing in {VENV_PY.parent.parent} (run scripts/engine-env.sh): " \
               + r.stderr.strip().splitlines()[-1]
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(release_root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(release_root), str(REPO / "tests" / "standins"),
                                    str(REPO / "tests" / "engine_standins"), str(REPO)]),
        SGLANG_USE_CPU_ENGINE="1", DIAG_STANDIN_AMX="1", PYTHONUNBUFFERED="1",
        DIAG_CACHE_DIR=os.environ.get("DIAG_CACHE_DIR", str(Path.home() / ".cache" / "diag")))
    env.update(extra or {})
    return env


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


def start(release_root: Path, model: Path, log: Path, *, draft: Path | None = None,
          attention: str = "intel_amx", run_dir: Path | None = None,
          diag_args: tuple[str, ...] = ("--probe", "all"), extra_env: dict | None = None,
          server_args: tuple[str, ...] = (), ready_timeout: float = 300.0) -> Server:
    """Start the server (under `diag run --run-dir run_dir` when given) and wait until it serves."""
    try:
        return _start(release_root, model, log, draft=draft, attention=attention,
                      run_dir=run_dir, diag_args=diag_args, extra_env=extra_env,
                      server_args=server_args, ready_timeout=ready_timeout)
    except StartHung as e:
        # An intermittent start hang (1 in ~5 CI runs of ~15 starts, 2026-12): not understood
        # yet; said loudly with the stacks of every process, then one more start, so that the
        # lane's checks still run. Not hidden: the warning is in the test summary.
        warnings.warn(f"SERVER START HUNG, started again once: {str(e)[-8000:]}", stacklevel=2)
        if run_dir is not None:
            hung = run_dir.with_name(run_dir.name + "-hung")
            with contextlib.suppress(OSError):
                run_dir.rename(hung)
        return _start(release_root, model, log.with_name(log.stem + "-again" + log.suffix),
                      draft=draft, attention=attention, run_dir=run_dir, diag_args=diag_args,
                      extra_env=extra_env, server_args=server_args,
                      ready_timeout=ready_timeout)


class StartHung(RuntimeError):
    """The server was still not ready at the timeout (its log and stacks in the message)."""


def _start(release_root: Path, model: Path, log: Path, *, draft: Path | None,
           attention: str, run_dir: Path | None, diag_args: tuple[str, ...],
           extra_env: dict | None, server_args: tuple[str, ...], ready_timeout: float) -> Server:
    port = free_port()
    server = [str(VENV_PY), "-m", "sglang.launch_server", "--model-path", str(model),
              "--device", "cpu", "--host", "127.0.0.1", "--port", str(port),
              "--attention-backend", attention, "--enable-metrics",
              "--mem-fraction-static", "0.12", "--max-running-requests", "8"]
    if draft is not None:
        server += ["--speculative-draft-model-path", str(draft), *EAGLE_ARGS]
    server += list(server_args)
    cmd = server
    env_extra = dict(extra_env or {})
    if run_dir is not None:
        cmd = [sys.executable, "-m", "diag", "run", *diag_args, "--run-dir", str(run_dir),
               "--", *server]
        env_extra.setdefault("DIAG_CONTROL_POLL", "0.05")
        env_extra.setdefault("DIAG_PLATFORM", "hip")
        env_extra.setdefault("DIAG_STACKS_SIGNAL", "USR2")  # stacks of a start that hangs
    fh = open(log, "wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=_env(release_root, env_extra), stdout=fh,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    fh.close()
    s = Server(proc=proc, url=f"http://127.0.0.1:{port}", log=log, run_dir=run_dir, started=t0)
    try:
        wait_ready(s, ready_timeout)
    except BaseException:
        s.stop()
        raise
    s.ready_s = time.monotonic() - t0
    return s


def wait_ready(s: Server, timeout: float) -> None:
    """Ready = a 1-token /generate answers (SGLang's own warm-up request has passed by then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if s.proc.poll() is not None:
            raise RuntimeError(f"server exited with {s.proc.returncode}:\n{s.log_tail()}")
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            if s.get("/health", timeout=5)[0] == 200:
                s.generate([5, 6], 1, timeout=30)
                return
        time.sleep(0.5)
    raise StartHung(f"server not ready within {timeout:g} s:\n{s.log_tail()}{stacks(s)}")


def stacks(s: Server) -> str:
    """Every thread's stack of each live process of the run (DIAG_STACKS_SIGNAL=USR2, which
    `start` sets: the signal appends them to its fatal file), for a server that hangs."""
    if s.run_dir is None or not s.run_dir.is_dir():
        return ""
    pids = [int(p.name[len("fatal-"):-len(".txt")]) for p in s.run_dir.glob("fatal-*.txt")]
    for pid in pids:
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == s.proc.pid:  # the server's own (start_new_session), never another
                os.kill(pid, signal.SIGUSR2)
    time.sleep(2)
    out = []
    for pid in sorted(pids):
        with contextlib.suppress(OSError):
            text = (s.run_dir / f"fatal-{pid}.txt").read_text(errors="replace")
            if text.strip():
                out.append(f"--- stacks of {pid} ---\n{text[-6000:]}")
    return "\n" + "\n".join(out) if out else ""


def diag_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """`python -m diag ARGS` as a user's shell runs it: none of the agent's DIAG_* variables of
    this test process (the cache directory kept)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_") or k == "DIAG_CACHE_DIR"}
    return subprocess.run([sys.executable, "-m", "diag", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def wait_for(what: str, check, timeout: float = 60.0, interval: float = 0.2):
    """`check()`'s first truthy value within `timeout`; an AssertionError naming `what` else."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")
