"""Start and stop a real SGLang server on CPU (tests' `engine` lane and benchmarks/engine_overhead).

The server is the release's own `python -m sglang.launch_server`, run by the SGLang environment
(`scripts/sglang-env.sh` + `scripts/engine-env.sh`) with the release tree, the torchvision
stand-in (tests/standins) and the sgl_kernel/AMX-flag stand-ins (tests/engine_standins) on
PYTHONPATH, on tiny models made at test time (tests/engine_models.py). Optionally under
`diag run`. Always torn down: the whole process group gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

from diag.kit import server as kit_server
from diag.kit.server import Server, free_port, http, stop_group  # noqa: F401

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


def _env(release_root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(release_root), str(REPO / "tests" / "standins"),
                                    str(REPO / "tests" / "engine_standins"), str(REPO)]),
        SGLANG_USE_CPU_ENGINE="1", DIAG_STANDIN_AMX="1", PYTHONUNBUFFERED="1",
        DIAG_CACHE_DIR=os.environ.get("DIAG_CACHE_DIR", str(Path.home() / ".cache" / "diag")))
    env.update(extra or {})
    return env


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
    s = kit_server.launch(cmd, _env(release_root, env_extra), log, f"http://127.0.0.1:{port}",
                          run_dir)
    try:
        wait_ready(s, ready_timeout)
    except BaseException:
        s.stop()
        raise
    s.ready_s = time.monotonic() - s.started
    return s


def wait_ready(s: Server, timeout: float) -> None:
    """diag.kit.server.wait_ready, with every process's stacks when the start hangs."""
    kit_server.wait_ready(s, timeout, stacks, StartHung)


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
    from diag.kit.steps.base import wait_for as poll

    last = poll(check, timeout, interval)
    if last:
        return last
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")
