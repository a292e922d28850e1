"""Run-time evidence inside an engine: target-verify and draft-decode passes by mode (graph replay
or eager) and why a pass ran eager, timed. The draft-extend phase has its own counter
(draft_extend_runtime); together they give one line per phase: captured or eager, and why.

Why: a captured runner can still be passed over at run time (a batch above the largest captured
size, a runner that declines), and users do not expect it. Two hooks, in every supported release:
- `ModelRunner.forward` (model_executor/model_runner.py): its output says whether the graph ran
  (`ModelRunnerOutput.can_run_graph`; a `(logits, can_run_graph)` tuple in older releases). A
  forward in TARGET_VERIFY mode is one target-verify pass.
- `EagleDraftWorker.draft` (speculative/eagle_worker_v2.py): one call is one draft-decode step
  (steps - 1 inner forwards); it replays the draft runner's graph, or calls the draft model
  runner's `forward` eagerly (seen by the hook above).
Passes are folded in-process (`telemetry.Folder`) and emitted at most once a second as
`graph_phase` events carrying the counts since the last one. Host time
only: nothing here synchronizes the device.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from diag import telemetry
from diag.patcher import Patch

PATCH_ID = "graph-phase-runtime"
RUNNER_MODULE = "sglang.srt.model_executor.model_runner"
RUNNER_FORWARD = "ModelRunner.forward"
WORKER_MODULE = "sglang.srt.speculative.eagle_worker_v2"
WORKER_DRAFT = "EagleDraftWorker.draft"
TARGET_RUNNER_ATTRS = ("decode_cuda_graph_runner", "graph_runner", "cuda_graph_runner")
PHASES = ("target-verify", "draft-decode")

_state = threading.local()  # per thread: inside a draft step, eager forwards seen in it


FOLD = telemetry.Folder("graph_phase", "passes")


def _add(phase: str, mode: str, reason: str | None, seconds: float) -> None:
    FOLD.add({"phase": phase, "mode": mode, "reason": reason}, seconds=seconds)


def _bs(forward_batch: Any) -> int | None:
    v = getattr(forward_batch, "batch_size", None)
    return v if isinstance(v, int) else None


def eager_reason(runner: Any, batch: int | None) -> str:
    """Why a pass ran eager: no runner was captured, the batch is above the largest captured
    size, or the runner declined the batch for another reason (its own check)."""
    if runner is None:
        return "no-runner"
    max_bs = getattr(runner, "max_bs", None)
    if isinstance(max_bs, int) and batch is not None and batch > max_bs:
        return "batch-above-captured"
    return "runner-declined"


def _graph_ran(out: Any) -> bool:
    if isinstance(out, tuple) and len(out) >= 2 and isinstance(out[1], bool):
        return out[1]
    return bool(getattr(out, "can_run_graph", False))


def _is_verify(forward_batch: Any) -> bool:
    mode = getattr(forward_batch, "forward_mode", None)
    check = getattr(mode, "is_target_verify", None)
    try:
        return bool(check()) if callable(check) else False
    except Exception:
        return False


def _target_runner(model_runner: Any) -> Any:
    for name in TARGET_RUNNER_ATTRS:
        r = getattr(model_runner, name, None)
        if r is not None:
            return r
    return None


def _wrap_forward(original: Callable) -> Callable:
    @functools.wraps(original)
    def model_runner_forward_counted(self, forward_batch, *args, **kwargs):
        if getattr(_state, "in_draft", False):
            _state.eager += 1  # the draft step's eager inner forward
            return original(self, forward_batch, *args, **kwargs)
        if not _is_verify(forward_batch):
            return original(self, forward_batch, *args, **kwargs)
        t0 = time.perf_counter()
        out = original(self, forward_batch, *args, **kwargs)
        try:
            graph = _graph_ran(out)
            _add("target-verify", "graph" if graph else "eager",
                     None if graph else eager_reason(_target_runner(self), _bs(forward_batch)),
                     time.perf_counter() - t0)
        except Exception:  # counting must never break the forward
            pass
        return out

    return model_runner_forward_counted


def _wrap_draft(original: Callable) -> Callable:
    @functools.wraps(original)
    def draft_counted(self, batch, *args, **kwargs):
        outer = (getattr(_state, "in_draft", False), getattr(_state, "eager", 0))
        _state.in_draft, _state.eager = True, 0
        t0 = time.perf_counter()
        try:
            return original(self, batch, *args, **kwargs)
        finally:
            eager = _state.eager
            _state.in_draft, _state.eager = outer
            try:
                n = getattr(batch, "batch_size", None)
                n = n() if callable(n) else n
                _add("draft-decode", "eager" if eager else "graph",
                         eager_reason(getattr(self, "cuda_graph_runner", None),
                                      n if isinstance(n, int) else None) if eager else None,
                         time.perf_counter() - t0)
            except Exception:
                pass

    return draft_counted


def hook_targets() -> list[tuple[str, str]]:
    return [(RUNNER_MODULE, RUNNER_FORWARD), (WORKER_MODULE, WORKER_DRAFT)]


def hook_patch() -> Patch:
    (rm, rq), (wm, wq) = hook_targets()
    return Patch(PATCH_ID).add(rm, rq, _wrap_forward).add(wm, wq, _wrap_draft)
