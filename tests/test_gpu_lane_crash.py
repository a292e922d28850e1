"""The GPU lane's profiler-crash check (benchmarks/gpu_engine/checks.py: `crashes`,
`check_crash`), on CPU, against real faulthandler dumps of real child processes.

The dumps' format is Python's faulthandler (SGLang 0.5.23 enables it in each scheduler,
managers/scheduler.py:6295): "Fatal Python error: Segmentation fault", "Current thread 0x...
(most recent call first):", "  Garbage-collecting" when the cyclic GC runs, then the frames.
The children crash on purpose (a null read through ctypes) at the two places that matter: inside
a collection, and inside torch's profiler stop (its `on_trace_ready` callback), so the frames
are real torch profiler frames; the crash of issue 29 itself needs a GPU and a real server."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu_engine"))

import checks  # noqa: E402

IN_GC = """
import ctypes, faulthandler, gc
faulthandler.enable()
class Holder:
    def __init__(self): self.me = self
    def __del__(self): ctypes.string_at(0)
def serve():
    Holder()
    gc.collect()
serve()
"""

IN_PROFILER_STOP = """
import ctypes, faulthandler, torch
faulthandler.enable()
p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                           on_trace_ready=lambda prof: ctypes.string_at(0))
p.start()
torch.ones(4).sum()
p.stop()
"""


def _crash_log(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == -11, (r.returncode, r.stderr[-2000:])  # SIGSEGV, as written
    return "[server log line before]\n" + r.stderr + "[2026-12-02 12:00:00] after\n"


@pytest.fixture(scope="module")
def gc_log() -> str:
    return _crash_log(IN_GC)


@pytest.fixture(scope="module")
def profiler_log() -> str:
    return _crash_log(IN_PROFILER_STOP)


def test_dump_in_a_collection_is_read_but_is_not_the_teardown_signature(gc_log):
    (c,) = checks.crashes(gc_log)
    assert c.signal == "Segmentation fault"
    assert c.garbage_collecting is True
    assert [f.split(" in ")[-1] for f in c.frames] == ["string_at", "__del__", "serve",
                                                      "<module>"]
    assert c.profiler is False and c.teardown is False  # a finaliser, not the profiler


def test_dump_inside_the_profiler_stop_has_the_signature(profiler_log):
    (c,) = checks.crashes(profiler_log)
    assert c.signal == "Segmentation fault" and c.garbage_collecting is False
    assert any("torch/profiler/profiler.py" in f and f.endswith(" in stop") for f in c.frames)
    assert c.teardown is True


def test_the_native_frame_named_in_the_issue_is_the_signature(gc_log):
    # issue 29: the scheduler's SIGSEGV is in `~ProfilerResult` (torch's C++ profiler result)
    # reached from pybind11's dealloc; a C-level line naming it inside the dump marks it
    log = gc_log.replace("  Garbage-collecting\n",
                         "  Garbage-collecting\n  Binary file ... in torch::autograd::profiler::"
                         "ProfilerResult::~ProfilerResult()\n")
    (c,) = checks.crashes(log)
    assert c.teardown is True and c.garbage_collecting is True


def test_no_dump_no_crash():
    assert checks.crashes("Scheduler hit an exception: Traceback (most recent call last):\n") == []


def _try(name, side, sent, done, alive, log="", error=""):
    return checks.CrashTry(name, side, sent, done, alive, log, error)


def test_prevented_only_when_plain_crashed_and_the_fix_did_not(profiler_log):
    tries = [_try("plain-0", "plain", 2, 1, False, profiler_log),
             _try("plain-1", "plain", 3, 3, True),
             _try("fix-0", "fix", 3, 3, True), _try("fix-1", "fix", 3, 3, True)]
    c = checks.check_crash("crash", tries)
    assert c.ok is True and c.data["verdict"] == "prevented"
    assert c.data["plain"]["crashed"] == 1 and c.data["plain"]["tested"] == 2
    assert c.data["plain"]["profiles_sent"] == 5
    assert c.data["plain"]["crashes_per_profile"] == pytest.approx(1 / 5)
    assert c.data["fix"]["crashed"] == 0 and c.data["fix"]["profiles_done"] == 6
    assert "1 of 2 servers crashed" in c.detail and "0 of 2 servers crashed" in c.detail


def test_neither_side_crashed_is_not_reproduced_never_prevented():
    tries = [_try("plain-0", "plain", 3, 3, True), _try("fix-0", "fix", 3, 3, True)]
    c = checks.check_crash("crash", tries)
    assert c.ok is False and c.data["verdict"] == "not reproduced"
    assert "prevented:" not in c.detail and c.detail.startswith("not reproduced")


def test_a_crash_under_the_fix_is_not_prevented(profiler_log):
    tries = [_try("plain-0", "plain", 1, 0, False, profiler_log),
             _try("fix-0", "fix", 2, 1, False, profiler_log)]
    c = checks.check_crash("crash", tries)
    assert c.ok is False and c.data["verdict"] == "not prevented"


def test_a_plain_crash_without_the_signature_proves_nothing(gc_log):
    tries = [_try("plain-0", "plain", 1, 0, False, gc_log), _try("fix-0", "fix", 3, 3, True)]
    c = checks.check_crash("crash", tries)
    assert c.ok is False and c.data["verdict"] == "other crash"


def test_a_side_without_profiles_is_not_run(profiler_log):
    tries = [_try("plain-0", "plain", 1, 0, False, profiler_log),
             _try("fix-0", "fix", 0, 0, False, error="not ready")]
    c = checks.check_crash("crash", tries)
    assert c.ok is None and c.data["verdict"] == "not run"


def test_a_death_without_a_dump_is_counted_apart():
    tries = [_try("plain-0", "plain", 1, 0, False, "Scheduler hit an exception: ...\n")]
    side = checks.crash_side(tries)
    assert side["crashed"] == 0 and side["died_otherwise"] == 1


def test_a_collection_crash_after_a_logged_profiler_stop_is_the_signature(gc_log):
    # faulthandler prints Python frames only: a scheduler killed in the cyclic GC shows SGLang's
    # frames, not torch's; what ties it to the profiler is the stop SGLang logged before it
    # ("Stop profiling...", 0.5.23 utils/profile_utils.py:163)
    log = "[2026-12-02 18:34:21] Stop profiling...\n" + gc_log
    (c,) = checks.crashes(log)
    assert c.garbage_collecting and c.after_profile_stop and not c.profiler
    assert c.teardown is True
    (c,) = checks.crashes(gc_log + "[2026-12-02 18:34:21] Stop profiling...\n")
    assert c.after_profile_stop is False and c.teardown is False  # a stop after the crash
    from diag.engine import last_words

    d = last_words.classify(log, "log")
    assert d.cause == "profiler-teardown"
    assert d.summary.startswith("SIGSEGV in a cyclic collection after a profiler stop")
