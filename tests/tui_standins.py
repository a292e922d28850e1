"""Stand-ins for the TUI tests: fixed findings, a stand-in fix with a real Patch, a stand-in bench.

They imitate the *shape* of what the real probes/fixes/benches return so the app's screens can be
driven and snapshotted deterministically; the real probes, fixes and benches are exercised by the
tmux end-to-end test and by `--once`.
"""

from __future__ import annotations

import sys
import threading
import types

from diag.bench import BenchResult, Row, Stats
from diag.findings import Finding, Status, location, metric, note
from diag.fixes.base import APPLICABLE, Applicability, Fix
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

    def __init__(self) -> None:
        self._patch: Patch | None = None

    def applies_to(self, target, platform) -> Applicability:
        return Applicability(APPLICABLE, f"stand-in: applies on {platform}")

    def apply(self) -> None:
        if self._patch is None:
            p = Patch(self.id).add(STANDIN_MODULE, "value", lambda orig: lambda: 2 * orig())
            p.apply()
            self._patch = p

    def revert(self) -> None:
        if self._patch is not None:
            self._patch.revert()
            self._patch = None

    def is_applied(self) -> bool:
        return self._patch is not None


def install_standin_module() -> types.ModuleType:
    mod = types.ModuleType(STANDIN_MODULE)

    def value() -> int:
        return 21

    mod.value = value
    sys.modules[STANDIN_MODULE] = mod
    return mod


# The stand-in bench reports progress, then waits until the test lets it finish.
bench_gate = threading.Event()
bench_started = threading.Event()


def standin_bench(params, progress) -> BenchResult:
    progress("stand-in bench: step 1/2")
    bench_started.set()
    bench_gate.wait(10)
    progress("stand-in bench: step 2/2")
    return BenchResult("standin-fix", "Stand-in bench", "stand-in device",
                       {"quick": True, "path": "draft-extend"},
                       [Row("metadata build host time", "s", Stats(0.0109, 0.0105, 0.0112, 0.01, 9),
                            Stats(0.00019, 0.00018, 0.0002, 0.00017, 9)),
                        Row("syncs per call", "syncs", Stats(2, 2, 2, 2, 9),
                            Stats(0, 0, 0, 0, 9))])


def standin_backend(release, **kw) -> Backend:
    """A Backend on the real 0.5.17 release tree with stand-in findings, fixes and GPU line."""
    release("0.5.17")  # in the cache, so resolving the target needs no network
    install_standin_module()
    return Backend(sglang="0.5.17", platform="hip",
                   probe_runner=lambda ctx, pid: standin_findings(pid),
                   fixes={"standin-fix": StandInFix()}, gpu=lambda: "stand-in GPU", **kw)
