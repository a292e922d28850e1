"""End to end in a real terminal: the installed `diag tui` in 140×45 and 80×24 tmux windows,
as a new user would start it, with the real probes and fixes on the real 0.5.17 release."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from diag import probes

pytestmark = [pytest.mark.release, pytest.mark.slow]

CONCERNS = tuple(probes.all_ids())
SHOWN_WITHIN_S = 15.0  # every concern on screen (start-up included, shared CI cores)
FOUND_WITHIN_S = 120.0  # every probe's finding in place of "pending"/"running…"


def _diag() -> Path:
    return Path(sys.prefix) / "bin" / "diag"


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (scripts/test.sh installs it with apt-get)")
    if not _diag().exists():
        pytest.skip(f"no installed diag at {_diag()}")
    sock = f"diag-test-{uuid.uuid4().hex[:8]}"

    def run(*args: str, check: bool = True) -> str:
        return subprocess.run(["tmux", "-L", sock, *args], check=check, capture_output=True,
                              text=True, timeout=30).stdout

    yield run
    run("kill-server", check=False)


def _wait(pane, cond, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    text = pane()
    while not cond(text):
        assert "Traceback" not in text, text
        if time.monotonic() > deadline:
            raise AssertionError(f"not on screen within {timeout:.0f} s:\n{text}")
        time.sleep(0.2)
        text = pane()
    assert "Traceback" not in text, text
    return text


def _status_of(text: str, probe: str) -> str | None:
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1] == probe:
            return parts[0]
    return None


def test_installed_diag_tui_shows_every_concern_and_quits(tmux, release, tmp_path):
    release("0.5.17")  # cached before the clock starts: the TUI must not wait on a download
    cmd = (f"cd {shlex.quote(str(tmp_path))} && "
           f"env DIAG_CACHE_DIR={shlex.quote(os.environ['DIAG_CACHE_DIR'])} "
           f"{shlex.quote(str(_diag()))} tui --sglang 0.5.17 --platform hip; "
           f"echo DIAG-EXIT=$?; sleep 60")
    t0 = time.monotonic()
    tmux("new-session", "-d", "-s", "diag", "-x", "140", "-y", "45", cmd)

    def pane() -> str:
        return tmux("capture-pane", "-p", "-t", "diag", check=False)

    text = _wait(pane, lambda t: all(c in t for c in CONCERNS), SHOWN_WITHIN_S)
    shown = time.monotonic() - t0
    assert "diag 0.1" in text and "│ hip │" in text
    done = ("ok", "warn", "FAIL", "ERROR", "skip")
    text = _wait(pane, lambda t: all(_status_of(t, c) in done for c in CONCERNS), FOUND_WITHIN_S)
    found = time.monotonic() - t0
    assert "sglang 0.5.17 [release]" in text
    print(f"concerns on screen after {shown:.1f} s, findings after {found:.1f} s")
    tmux("send-keys", "-t", "diag", "q")
    text = _wait(pane, lambda t: "DIAG-EXIT=" in t, 10.0)
    assert "DIAG-EXIT=0" in text, text


FIXES_SHOWN_WITHIN_S = 60.0  # the Fixes tab filled (target resolved, fixes read)
QUIT_BAR_S = 3.0  # issue 14's bar for `q` during a bench, measured here with a generous bound
QUIT_BOUND_S = 8.0  # what the test asserts on a loaded 2-core CI machine


def _bench_children(mark: str) -> list[int]:
    """Processes started under this test's `diag tui` (they inherit DIAG_TUI_TMUX_MARK)."""
    import psutil

    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get("DIAG_TUI_TMUX_MARK") == mark:
                out.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return out


def test_80x24_unreachable_server_fix_ids_whole_and_q_during_a_bench(tmux, release, tmp_path):
    """Issue 14's bars in a real 80×24 terminal: the unreachable server's state on the first
    screen, key 2 shows the three fix ids whole, `q` during a bench exits 0 at once and ends the
    bench's processes."""
    import socket

    release("0.5.17")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: unreachable
    mark = uuid.uuid4().hex
    cmd = (f"cd {shlex.quote(str(tmp_path))} && "
           f"env DIAG_CACHE_DIR={shlex.quote(os.environ['DIAG_CACHE_DIR'])} "
           f"DIAG_TUI_TMUX_MARK={mark} "
           f"{shlex.quote(str(_diag()))} tui --sglang 0.5.17 --platform hip "
           f"--server http://127.0.0.1:{port}; echo DIAG-EXIT=$?; sleep 60")
    tmux("new-session", "-d", "-s", "diag", "-x", "80", "-y", "24", cmd)

    def pane() -> str:
        return tmux("capture-pane", "-p", "-t", "diag", check=False)

    text = _wait(pane, lambda t: f"server 127.0.0.1:{port}: unreachable" in t, SHOWN_WITHIN_S)
    first = text.splitlines()[0]
    assert "sglang 0.5.17" in first and "hip" in first and "unreachable" in first, text
    tmux("send-keys", "-t", "diag", "2")
    fixes = ("draft-extend-allowlist", "repeat-interleave-output-size",
             "profiler-controlled-teardown")
    text = _wait(pane, lambda t: all(f" {f} " in t for f in fixes), FIXES_SHOWN_WITHIN_S)
    # the bench with child processes of its own: the third fix's
    tmux("send-keys", "-t", "diag", "Down", "Down")
    time.sleep(0.5)
    tmux("send-keys", "-t", "diag", "b")
    _wait(pane, lambda t: "profiler bench" in t, 60.0)
    running = _bench_children(mark)
    assert len(running) >= 2, running  # diag tui and its bench process at least
    t0 = time.monotonic()
    tmux("send-keys", "-t", "diag", "q")
    text = _wait(pane, lambda t: "DIAG-EXIT=" in t, 30.0)
    took = time.monotonic() - t0
    print(f"q during a bench: exited after {took:.2f} s (bar {QUIT_BAR_S} s)")
    assert "DIAG-EXIT=0" in text, text
    assert took < QUIT_BOUND_S
    time.sleep(0.5)
    assert _bench_children(mark) == []  # the bench and its children ended with it
