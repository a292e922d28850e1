"""Stand-ins for the TUI tests: fixed findings, a stand-in fix with a real Patch, a stand-in bench.

They imitate the *shape* of what the real probes/fixes/benches return so the app's screens can be
driven and snapshotted deterministically; the real probes, fixes and benches are exercised by the
tmux end-to-end test and by `--once`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import types
from pathlib import Path

from diag.bench import BenchResult, Row, Stats
from diag.findings import Finding, Status, location, metric, note
from diag.fixes.base import APPLICABLE, UPSTREAM, Applicability, Fix
from diag.patcher import Patch
from diag.tui.backend import Backend

STANDIN_MODULE = "diag_tui_standin_module"
DSV4 = "sglang/srt/layers/attention/deepseek_v4_backend_hip_radix.py"
MEASURED = "measured syncs per call: _attach_unified_kv_prefill_meta (draft-extend)"
ATTACH = "DeepseekV4HipRadixBackend._attach_unified_kv_prefill_meta"


def standin_findings(probe_id: str) -> list[Finding]:
    """Fixed findings shaped like the real probes' (stand-in data, not measured)."""
    if probe_id == "draft-extend-graph":
        return [Finding(probe_id, Status.WARN, "Draft-extend graph capture",
                        "stand-in: on HIP draft-extend runs eager for dsv4, dsa",
                        [location("sglang/srt/speculative/eagle_worker_v2.py", 210,
                                  "EagleDraftWorker._capture_cuda_graphs", "allow-list gate")],
                        hint="apply draft-extend-allowlist", fixes=["draft-extend-allowlist"])]
    if probe_id == "metadata-syncs":
        return [Finding(probe_id, Status.WARN, "Metadata-builder syncs",
                        "stand-in: 2 syncs per call in _attach_unified_kv_prefill_meta",
                        [metric(MEASURED, 2, "syncs", 0, detail=f"cpu, stand-in; at {DSV4}:1116 "
                                "_attach_unified_kv_prefill_meta",
                                data={"builder": ATTACH, "file": DSV4, "line": 1116, "syncs": 2,
                                      "path": "draft-extend", "source": "cpu-counter",
                                      "release": "0.5.17"}),
                         location(DSV4, 1116, ATTACH,
                                  "repeat_interleave: no output_size (2 syncs; draft-extend "
                                  "backend)",
                                  data={"builder": ATTACH, "backend": "dsv4",
                                        "call": "repeat_interleave", "syncs": 2,
                                        "paths": ["target-extend", "draft-extend"],
                                        "reach": "reaches", "source": "static"})],
                        fixes=["standin-fix"])]
    return [Finding(probe_id, Status.FAIL, "Profiler teardown",
                    "stand-in: the stopped profiler is left to the cyclic GC",
                    [note("precondition present, not reproduced in 3 tries")],
                    fixes=["profiler-controlled-teardown"])]


class StandInFix(Fix):
    """A stand-in fix that doubles `diag_tui_standin_module.value` through the real Patch."""

    id = "standin-fix"
    title = "Stand-in fix (test only)"
    addresses = ("metadata-syncs",)
    bench = "tui_standins:standin_bench"

    def applies_to(self, target, platform, config=None) -> Applicability:
        return Applicability(APPLICABLE, f"stand-in: applies on {platform}")

    def build_patch(self, target) -> Patch:
        return Patch(self.id).add(STANDIN_MODULE, "value", lambda orig: lambda: 2 * orig())


class UpstreamStandInFix(StandInFix):
    """A stand-in fix the target already has (`upstream`): `a` must refuse it with the reason."""

    id = "standin-upstream"
    title = "Stand-in upstream fix (test only)"
    bench = None

    def applies_to(self, target, platform) -> Applicability:
        return Applicability(UPSTREAM, "stand-in: the release already has it")


def install_standin_module() -> types.ModuleType:
    mod = types.ModuleType(STANDIN_MODULE)

    def value() -> int:
        return 21

    mod.value = value
    sys.modules[STANDIN_MODULE] = mod
    return mod


class FileGate:
    """An event across processes (the TUI runs a bench in a child): a file that exists or not,
    in the directory named by DIAG_TUI_STANDIN_GATES (set by `gates()`; the child inherits it)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _path(self) -> Path:
        return Path(os.environ.get(GATES_ENV, tempfile.gettempdir())) / self.name

    def set(self) -> None:
        self._path().touch()

    def clear(self) -> None:
        self._path().unlink(missing_ok=True)

    def is_set(self) -> bool:
        return self._path().exists()

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.is_set()


GATES_ENV = "DIAG_TUI_STANDIN_GATES"
# The stand-in bench reports progress, then waits until the test lets it finish.
bench_gate = FileGate("bench-gate")
bench_started = FileGate("bench-started")


def gates(tmp_path) -> None:
    """Point the gates at a fresh directory of this test (the bench child inherits it)."""
    os.environ[GATES_ENV] = str(tmp_path)
    bench_gate.clear()
    bench_started.clear()


def standin_bench(params, progress) -> BenchResult:
    progress("stand-in bench: step 1/2")
    bench_started.set()
    bench_gate.wait(20)
    progress("stand-in bench: step 2/2")
    return BenchResult("standin-fix", "Stand-in bench", "stand-in device",
                       {"quick": True, "path": "draft-extend", "sglang": params.get("sglang")},
                       [Row("metadata build host time", "s", Stats(0.0109, 0.0105, 0.0112, 0.01, 9),
                            Stats(0.00019, 0.00018, 0.0002, 0.00017, 9)),
                        Row("syncs per call", "syncs", Stats(2, 2, 2, 2, 9),
                            Stats(0, 0, 0, 0, 9)),
                        Row("stop (stand-in)", "s", Stats(0.005, 0.0048, 0.0051, 0.0047, 9),
                            Stats(0.13, 0.128, 0.138, 0.127, 9), expected="collects at the stop")],
                       ["stand-in note: CPU only, the host time means little here"])


def standin_backend(release, **kw) -> Backend:
    """A Backend on the real 0.5.17 release tree with stand-in findings, fixes and GPU line."""
    release("0.5.17")  # in the cache, so resolving the target needs no network
    install_standin_module()
    return Backend(sglang="0.5.17", platform="hip",
                   probe_runner=lambda ctx, pid: standin_findings(pid),
                   fixes={"standin-fix": StandInFix(),
                          "standin-upstream": UpstreamStandInFix()}, gpu=lambda: "stand-in GPU", **kw)
