"""benchmarks/overhead_profile.py reads py-spy's raw output as py-spy writes it: a real recording
of the CPU engine lane's scheduler with the counters on (tests/fixtures/pyspy/README.md)."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RAW = REPO / "tests" / "fixtures" / "pyspy" / "cpu-server-counters-on.txt.gz"
ROOTS = ["/work/main/diag/", "/work/main/probes/", "/work/main/fixes/"]  # as recorded


def _module():
    spec = importlib.util.spec_from_file_location("overhead_profile",
                                                  REPO / "benchmarks" / "overhead_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _text() -> str:
    return gzip.decompress(RAW.read_bytes()).decode()


def test_every_line_is_read_with_its_thread_and_count():
    op = _module()
    text = _text()
    stacks = op.parse_raw(text)
    lines = [x for x in text.splitlines() if x.strip()]
    assert len(stacks) == len(lines)
    assert sum(n for _t, _f, n in stacks) == sum(int(x.rsplit(" ", 1)[1]) for x in lines)
    assert all(t.startswith("thread (") for t, _f, _n in stacks)
    # the scheduler's step loop runs on its main thread
    assert op.busiest(stacks).endswith(": MainThread")


def test_diags_own_time_is_a_diag_frame_below_the_last_sglang_frame():
    op = _module()
    stacks = op.parse_raw(_text())
    main = op.busiest(stacks)
    t = op.tally(stacks, main, ROOTS)
    assert t["total"] == sum(n for th, _f, n in stacks if th == main)
    leaf_diag = sum(n for th, f, n in stacks
                    if th == main and any(r in f[-1] for r in ROOTS))
    leaf_sglang = sum(n for th, f, n in stacks if th == main and "/sglang/" in f[-1])
    # a sample whose leaf is diag's is diag's own; one whose leaf is SGLang's is not, even
    # under diag's wrappers (every step here runs under the counters and the batch boundary)
    assert leaf_diag > 0 and leaf_diag <= t["diag"] <= t["total"] - leaf_sglang
    under_wrapper = sum(n for th, f, n in stacks if th == main and
                        any("model_runner_forward_counted" in x for x in f))
    assert under_wrapper > t["diag"]
    assert sum(t["diag_by"].values()) == t["diag"]
    # functions compared without their line
    assert op.function_of("f (/a/b.py:12)") == "f (/a/b.py)"
    assert all(":" not in k.rsplit("(", 1)[1] for k in t["incl"] if "(" in k and "/" in k)


def test_frames_of_diag_are_told_from_a_release_cache_named_diag():
    """The release cache lives under ~/.cache/diag/: its SGLang frames are not diag's."""
    op = _module()
    sglang = "Scheduler.run_batch (/root/.cache/diag/releases/0.5.23/sglang/srt/managers/x.py:1)"
    wrapper = "wrapper (/work/main/probes/sync_counter.py:530)"
    assert op.in_diag([sglang], ROOTS) is None
    assert op.in_diag([sglang, wrapper], ROOTS) == wrapper
    assert op.in_diag([wrapper, sglang], ROOTS) is None
