"""Run-time evidence inside an engine: draft-extend passes by mode (graph replay / eager), timed.

Why: the static gate says what *should* happen; these counters say what the engine *did*. Two
hooks, at points that exist in every supported release (tests resolve them by AST in each):
- `EagleDraftWorker._draft_extend_for_decode` (speculative/eagle_worker_v2.py): one call is one
  draft-extend pass after a verify step; its host wall time is measured around the call.
- the draft-extend runner's graph check, `EAGLEDraftExtendCudaGraphRunner.can_run` (up to
  0.5.13.post1) / `.can_run_graph` (from 0.5.15.post1): called only when a runner exists; its
  answer during the pass decides the mode. No runner, or the check said no -> `eager`.
Each pass is added to `COUNTERS` and folded into `draft_extend` events (mode, batch, reason,
passes, seconds summed; one per key at most once a second: `telemetry.Folder`); an eager pass says why (`reason`): `kill-switch`
(SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH set, no runner), `no-runner` (none captured: the gate),
`batch-above-captured` (a runner exists, the batch is larger than its largest captured size) or
`runner-declined` (its check said no for another reason). The same patch carries the
target-verify and draft-decode counters (graph_phase_runtime). The first draft-extend after a prefill (`_draft_extend_for_prefill`) is
always eager in SGLang and is not counted. Times are host time: nothing here synchronizes the
device (that would add the very stall being measured).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from diag import telemetry
from diag.patcher import Patch
from diag.probes import graph_phase_runtime
from diag.probes.gate import env_bool
from diag.target import Target

PATCH_ID = "draft-extend-runtime"
WORKER_MODULE = "sglang.srt.speculative.eagle_worker_v2"
WORKER_PASS = "EagleDraftWorker._draft_extend_for_decode"
RUNNER_MODULE = "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner"
RUNNER_CLASS = "EAGLEDraftExtendCudaGraphRunner"
RUNNER_ATTR = "cuda_graph_runner_for_draft_extend"
KILL_SWITCH = "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"
CAN_RUN_RENAMED_IN = Version("0.5.15")  # 0.5.15.post1 is the first release with can_run_graph


@dataclass
class ModeStats:
    count: int = 0
    seconds: float = 0.0

    @property
    def mean(self) -> float | None:
        return self.seconds / self.count if self.count else None


@dataclass
class Counters:
    """Per-process totals of draft-extend passes by mode."""

    modes: dict[str, ModeStats] = field(
        default_factory=lambda: {"graph": ModeStats(), "eager": ModeStats()})
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, mode: str, seconds: float) -> None:
        with self.lock:
            s = self.modes.setdefault(mode, ModeStats())
            s.count += 1
            s.seconds += seconds

    def snapshot(self) -> dict[str, dict[str, float | int | None]]:
        with self.lock:
            return {m: {"count": s.count, "seconds": s.seconds, "mean_s": s.mean}
                    for m, s in self.modes.items()}

    def reset(self) -> None:
        with self.lock:
            for s in self.modes.values():
                s.count, s.seconds = 0, 0.0


COUNTERS = Counters()
FOLD = telemetry.Folder("draft_extend", "passes")
_state = threading.local()  # per thread: the graph check's answer during the current pass


def _can_run_name(version: str | None) -> str:
    try:
        v = Version(version) if version else None
    except InvalidVersion:
        v = None
    return "can_run" if v is not None and v < CAN_RUN_RENAMED_IN else "can_run_graph"


def hook_targets(version: str | None) -> list[tuple[str, str]]:
    """(module, qualname) of each hook for an SGLang release (None: the newest layout)."""
    return [(WORKER_MODULE, WORKER_PASS),
            (RUNNER_MODULE, f"{RUNNER_CLASS}.{_can_run_name(version)}")]


def _batch_size(obj: Any) -> int | None:
    for name in ("batch_size", "bs"):
        v = getattr(obj, name, None)
        try:
            v = v() if callable(v) else v
        except Exception:
            v = None
        if isinstance(v, int):
            return v
    reqs = getattr(obj, "reqs", None)
    return len(reqs) if isinstance(reqs, list) else None


def _wrap_pass(original: Callable) -> Callable:
    @functools.wraps(original)
    def draft_extend_for_decode_counted(self, *args, **kwargs):
        outer = getattr(_state, "answer", None)
        _state.answer, _state.batch = None, None
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            seconds = time.perf_counter() - t0
            mode = "graph" if _state.answer else "eager"
            batch = _state.batch if _state.batch is not None else \
                (_batch_size(args[0]) if args else None)
            _state.answer = outer
            COUNTERS.add(mode, seconds)
            FOLD.add({"mode": mode, "batch": batch,
                      "reason": None if mode == "graph" else _eager_reason(self, batch)},
                     seconds=seconds)

    return draft_extend_for_decode_counted


def _eager_reason(worker: Any, batch: int | None) -> str:
    runner = getattr(worker, RUNNER_ATTR, None)
    if runner is None and env_bool(os.environ.get(KILL_SWITCH)):
        return "kill-switch"
    return graph_phase_runtime.eager_reason(runner, batch)


def _wrap_can_run(original: Callable) -> Callable:
    @functools.wraps(original)
    def can_run_recorded(self, forward_batch, *args, **kwargs):
        answer = original(self, forward_batch, *args, **kwargs)
        _state.answer = bool(answer)
        _state.batch = _batch_size(forward_batch)
        return answer

    return can_run_recorded


def hook_patch(target_version: str | None) -> Patch:
    """The hooks for a release version as one revertible Patch (None: the newest layout)."""
    (wm, wq), (rm, rq) = hook_targets(target_version)
    patch = Patch(PATCH_ID).add(wm, wq, _wrap_pass).add(rm, rq, _wrap_can_run)
    patch.entries += graph_phase_runtime.hook_patch().entries
    return patch


def runtime_patch(target: Target | None) -> Patch:
    """The draft-extend-graph probe's runtime counter, for the running release (`target`; None:
    the newest layout). The agent applies it in the engine process."""
    return hook_patch(target.version if target is not None else None)
