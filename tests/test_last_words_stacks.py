"""DIAG_STACKS_SIGNAL: a process that hangs can be asked for every thread's stack (the CPU
engine lane asks a server that never became ready). Opt-in only: without it the signal keeps
its default meaning in the user's process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from diag.engine import rundir

CHILD = """
import sys, threading, time
from diag.engine import last_words
last_words.install(sys.argv[1])
def waiting_in_a_helper_thread():
    time.sleep(60)
threading.Thread(target=waiting_in_a_helper_thread, daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""


def _child(d, env_extra):
    env = {**os.environ, **env_extra}
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(d)], env=env,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_the_signal_appends_every_threads_stack_and_the_process_goes_on(tmp_path):
    d = rundir.create_run_dir(tmp_path / "run")
    p = _child(d, {"DIAG_STACKS_SIGNAL": "USR2"})
    try:
        os.kill(p.pid, signal.SIGUSR2)
        fatal = d / f"fatal-{p.pid}.txt"
        deadline = time.monotonic() + 10
        while "waiting_in_a_helper_thread" not in fatal.read_text() \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        text = fatal.read_text()
        assert "waiting_in_a_helper_thread" in text and "<module>" in text
        time.sleep(0.5)  # the default action of SIGUSR2 (terminate) must not follow the dump
        assert p.poll() is None  # still running
    finally:
        p.kill()
        p.wait(10)


def test_without_the_opt_in_the_signal_keeps_its_default(tmp_path):
    d = rundir.create_run_dir(tmp_path / "run")
    p = _child(d, {"DIAG_STACKS_SIGNAL": ""})
    os.kill(p.pid, signal.SIGUSR2)
    assert p.wait(10) == -signal.SIGUSR2
