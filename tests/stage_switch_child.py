"""Child process for tests/test_profiler_stage_switch.py: SGLang's V2 stage profiling through the
REAL 0.5.2x `SchedulerProfilerManager._profile_batch_predicate`, `ProfileManager`,
`_StageBasedTrigger`, `_ProfilerTorch` and the real `nvtx_utils.scheduler_nvtx_method` span,
released or with `profiler-controlled-teardown` applied. Prints `RESULT {json}`.

`Scheduler` is a STAND-IN (`StandinScheduler`): the real scheduler module imports the whole
engine. It has the shape of 0.5.23 scheduler.py:4613-4639: `run_batch` decorated with the span
decorator, calling `self.profiler_manager._profile_batch_predicate(batch)` in its body, then
running a torch op (the batch's work). Each stage start and stop records how many
`record_function` spans are open on the thread at that moment. A child, because a span that
crosses two profiler sessions can crash the process (that is what the fix prevents).

argv: RELEASE_ROOT OUT_DIR released|fixed
"""

from __future__ import annotations

import json
import sys
import threading
import types
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from profiler_standin import (  # noqa: E402
    ForwardMode,
    classic_owner_class,
    ensure_process_group,
    import_real,
    real_profiler_modules,
)

from diag.target import from_path  # noqa: E402

_depth = threading.local()


def _count_spans() -> None:
    """Count open `torch.autograd.profiler.record_function` spans on this thread."""
    rf = torch.autograd.profiler.record_function
    enter, exit_ = rf.__enter__, rf.__exit__

    def counted_enter(self):
        _depth.n = getattr(_depth, "n", 0) + 1
        return enter(self)

    def counted_exit(self, *a):
        _depth.n -= 1
        return exit_(self, *a)

    rf.__enter__, rf.__exit__ = counted_enter, counted_exit


def main(root: str, out: str, mode: str) -> dict:
    target = from_path(Path(root))
    _count_spans()
    ensure_process_group()
    with real_profiler_modules(target, v2=True) as names:
        fix = None
        if mode == "fixed":
            from diag import fixes

            fix = fixes.get("profiler-controlled-teardown")
        nvtx = import_real("sglang.srt.utils.nvtx_utils")

        class StandinScheduler:  # stand-in for sglang.srt.managers.scheduler.Scheduler
            def __init__(self, pm):
                self.profiler_manager = pm

            @nvtx.scheduler_nvtx_method("scheduler.run_batch")
            def run_batch(self, batch):
                self.profiler_manager._profile_batch_predicate(batch)
                return torch.ones(8, 8) @ torch.ones(8, 8)

        sched_mod = types.ModuleType("sglang.srt.managers.scheduler", "stand-in")
        sched_mod.Scheduler = StandinScheduler
        sys.modules["sglang.srt.managers.scheduler"] = sched_mod
        if fix is not None:
            fix.apply(target, "hip")
        pu = import_real(names["v2"])
        classic = import_real(names["classic"])
        seen: list[dict] = []

        def spy(kind, fn):
            def call(*a, **k):
                seen.append({"kind": kind, "open_spans": getattr(_depth, "n", 0),
                             "profiling": bool(torch.autograd._profiler_enabled())})
                return fn(*a, **k)
            return call

        pm = object.__new__(pu.ProfileManager)  # its __init__ binds _do_start/_do_stop: as here
        pm.cpu_group, pm.first_rank_in_node, pm.detailed_annotations = None, True, False
        pm.profiler = None
        pm.profiler_kwargs = None
        pm.stage_based_trigger = pu._StageBasedTrigger(on_start=spy("start", pm._do_start),
                                                      on_stop=spy("stop", pm._do_stop))
        pm.configure(output_dir=out, start_step=None, num_steps=1, activities=["CPU"],
                     with_stack=False, record_shapes=False, profile_by_stage=True,
                     profile_id="t", merge_profiles=False, profile_prefix="")
        owner = classic_owner_class(classic)
        owner._profile_manager = pm
        sched = StandinScheduler(owner)
        for mode_ in ("EXTEND", "EXTEND", "DECODE", "DECODE", "DECODE", "EXTEND"):
            sched.run_batch(SimpleNamespace(forward_mode=ForwardMode[mode_]))
        applied = fix.is_applied() if fix is not None else False
        if fix is not None:
            fix.revert()
    return {"events": seen, "traces": sorted(p.name for p in Path(out).glob("*.trace.json.gz")),
            "applied": applied}


if __name__ == "__main__":
    res = main(*sys.argv[1:4])
    print("RESULT " + json.dumps(res), flush=True)
