"""Issue 41, item 5: `fix revert profiler-controlled-teardown` on a V2 server (SGLANG_PROFILE_V2
on in the engine's environment, as `diag run` recorded it in run.json's `env`) said nothing about
the crash it re-exposes. Now one stderr line says so; `--yes` leaves it out; the exit code is
the revert's own either way. Real engines under `diag run` (SGLang 0.5.23 importable, the fix
requested with --fix), real `diag fix revert` processes; SGLANG_PROFILE_V2=0 (off, as SGLang's
EnvBool reads it) warns nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diag.engine import rundir

pytestmark = pytest.mark.release

ROOT = Path(__file__).resolve().parent.parent
DIAG = [sys.executable, "-m", "diag"]
FIX = "profiler-controlled-teardown"
PROG = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
WARNING = ("diag: warning: the engine runs with SGLANG_PROFILE_V2=1: reverting "
           "profiler-controlled-teardown re-exposes the crash it prevents (a late cyclic GC frees "
           "a stopped V2 profiler and can crash the server, SIGSEGV) (--yes: no warning)\n")


def _engine(tmp_path: Path, v2: str, release) -> tuple[subprocess.Popen, Path, Path]:
    d, stop = tmp_path / f"D{v2}", tmp_path / f"stop{v2}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIAG_", "SGLANG_"))}
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{release('0.5.23').root}", SGLANG_PROFILE_V2=v2)
    p = subprocess.Popen([*DIAG, "run", "--fix", FIX, "--run-dir", str(d), "--", sys.executable,
                          "-c", PROG, str(stop)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (d.is_dir() and rundir.read_state(d).live):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.05)
    return p, d, stop


def _revert(d: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIAG_", "SGLANG_"))}
    return subprocess.run([*DIAG, "fix", "revert", FIX, "--run-dir", str(d), *extra], env=env,
                          capture_output=True, text=True, timeout=120)


def test_revert_on_a_v2_server_warns_once_yes_silences_exit_unchanged(tmp_path, release):
    runs = {v2: _engine(tmp_path, v2, release) for v2 in ("1", "0")}
    try:
        on, off = runs["1"][1], runs["0"][1]
        assert rundir.read_meta(on)["env"] == {"SGLANG_PROFILE_V2": "1"}
        assert rundir.read_meta(off)["env"] == {"SGLANG_PROFILE_V2": "0"}
        warned, plain, yes = _revert(on), _revert(off), _revert(on, "--yes")
        assert warned.stderr == WARNING
        assert plain.stderr == "" and yes.stderr == ""
        # the same answer and exit code as without the warning (the process never imported
        # SGLang: nothing applied to revert, exit 4, as before)
        assert warned.returncode == plain.returncode == yes.returncode == 4
        pid_on, pid_off = runs["1"][0].pid, runs["0"][0].pid
        said = ("pid {:<8} other  revert profiler-controlled-teardown: refused  not-applied  "
                "(profiler-controlled-teardown is not applied in this process (not-applied: {}): "
                "nothing to revert)\n")
        assert plain.stdout == said.format(pid_off, "never applied in this process")
        assert warned.stdout == said.format(pid_on, "never applied in this process")
        js = _revert(on, "--json")  # JSON on stdout, the warning on stderr
        assert js.stderr == WARNING and js.returncode == 4
        assert [r["state"] for r in json.loads(js.stdout)["processes"]] == ["not-applied"]
    finally:
        for p, _d, stop in runs.values():
            stop.touch()
            p.communicate(timeout=60)
