"""End to end in a real terminal: the installed `diag tui` in a 140×45 tmux window, as a new
user would start it, with the real probes and fixes on the real 0.5.17 release."""

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
    assert "diag 0.1" in text and "platform: hip" in text
    done = ("ok", "warn", "FAIL", "ERROR", "skip")
    text = _wait(pane, lambda t: all(_status_of(t, c) in done for c in CONCERNS), FOUND_WITHIN_S)
    found = time.monotonic() - t0
    assert "sglang 0.5.17 [release]" in text
    print(f"concerns on screen after {shown:.1f} s, findings after {found:.1f} s")
    tmux("send-keys", "-t", "diag", "q")
    text = _wait(pane, lambda t: "DIAG-EXIT=" in t, 10.0)
    assert "DIAG-EXIT=0" in text, text
