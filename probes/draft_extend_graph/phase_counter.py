"""Run-time evidence inside an engine: target-verify and draft-decode passes by mode (graph replay
or eager) and why a pass ran eager, timed. The draft-extend phase has its own counter
(`runtime`, beside this module); together they give one line per phase: captured or eager, and why.

Why: a captured runner can still be passed over at run time (a batch above the largest captured
size, a runner that declines), and users do not expect it. Two hooks, in every supported release:
- `ModelRunner.forward` (model_executor/model_runner.py): its output says whether the graph ran
  (`ModelRunnerOutput.can_run_graph`; a `(logits, can_run_graph)` tuple in older releases). A
  forward in TARGET_VERIFY mode is one target-verify pass.
- `EagleDraftWorker.draft` (speculative/eagle_worker_v2.py): one call is one draft-decode step
  (steps - 1 inner forwards); it replays the draft runner's graph, or calls the draft model
  runner's `forward` eagerly (seen by the hook above).
Passes are added in place to preallocated slots (`telemetry.Tally`: no allocation, no lock, no
dict built per pass) and emitted by the agent's poll thread, off the step, as `graph_phase`
events carrying the counts since the last one. Host time only: nothing here synchronizes the
device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from threading import get_ident
from time import perf_counter
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

class _Draft:
    """The draft step in progress: the thread that runs it and the eager forwards seen in it.
    Plain attributes, not a thread-local (a read of one costs ~75 ns on a slow host): a forward
    counts as the step's inner one only on the thread that entered the step. SGLang runs one
    draft step at a time per scheduler process, on its thread."""

    __slots__ = ("thread", "eager")

    def __init__(self) -> None:
        self.thread, self.eager = 0, 0


_draft = _Draft()


TALLY = telemetry.Tally("graph_phase", "passes")
# the slots of the graph passes, known in advance: the common pass does not even look one up
_VERIFY_GRAPH = TALLY.slot(("target-verify", None), phase="target-verify", mode="graph",
                           reason=None)
_DRAFT_GRAPH = TALLY.slot(("draft-decode", None), phase="draft-decode", mode="graph", reason=None)
# The model forward inside an eager draft-extend pass (the draft model runner's `forward` in
# DRAFT_EXTEND mode): what a graph replay would replace, so a fix can say what capturing it
# saves (`DraftExtendAllowlistFix.predict`). Only eager forwards reach ModelRunner.forward; a
# captured draft-extend replays through its runner instead.
DE_FORWARD = "draft-extend-forward"
_DE_FORWARD = TALLY.slot((DE_FORWARD, None), phase=DE_FORWARD, mode="eager", reason=None)


def _eager(phase: str, reason: str) -> telemetry.Slot:
    return TALLY.slot((phase, reason), phase=phase, mode="eager", reason=reason)


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
    ran = getattr(out, "can_run_graph", None)  # ModelRunnerOutput (the newer releases)
    if ran is not None:
        return bool(ran)
    if isinstance(out, tuple) and len(out) >= 2 and isinstance(out[1], bool):
        return out[1]
    return False


def _draft_bs(batch: Any) -> int | None:
    n = getattr(batch, "batch_size", None)
    n = n() if callable(n) else n
    return n if isinstance(n, int) else None


def _is_verify(forward_batch: Any) -> bool:
    try:  # free unless it raises (a batch without a mode is not a verify pass)
        return bool(forward_batch.forward_mode.is_target_verify())
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
        if _draft.thread and _draft.thread == get_ident():
            _draft.eager += 1  # the draft step's eager inner forward
            return original(self, forward_batch, *args, **kwargs)
        try:  # _is_verify, inlined (a call less per forward)
            verify = forward_batch.forward_mode.is_target_verify()
        except Exception:
            verify = False
        if not verify:
            try:
                m = forward_batch.forward_mode
                de = m.is_draft_extend_v2() if hasattr(m, "is_draft_extend_v2") else \
                    m.is_draft_extend()
            except Exception:
                de = False
            if not de:
                return original(self, forward_batch, *args, **kwargs)
            t0 = perf_counter()
            out = original(self, forward_batch, *args, **kwargs)
            _DE_FORWARD.n += 1
            _DE_FORWARD.s += perf_counter() - t0
            return out
        t0 = perf_counter()
        out = original(self, forward_batch, *args, **kwargs)
        try:
            ran = getattr(out, "can_run_graph", None)  # _graph_ran's first case, inlined
            slot = _VERIFY_GRAPH if (ran if ran is not None else _graph_ran(out)) else \
                _eager("target-verify", eager_reason(_target_runner(self), _bs(forward_batch)))
            slot.n += 1
            slot.s += perf_counter() - t0
        except Exception:  # counting must never break the forward
            pass
        return out

    return model_runner_forward_counted


def _wrap_draft(original: Callable) -> Callable:
    @functools.wraps(original)
    def draft_counted(self, batch, *args, **kwargs):
        outer_thread, outer_eager = _draft.thread, _draft.eager
        _draft.thread, _draft.eager = get_ident(), 0
        t0 = perf_counter()
        try:
            return original(self, batch, *args, **kwargs)
        finally:
            eager = _draft.eager
            _draft.thread, _draft.eager = outer_thread, outer_eager
            try:
                slot = _DRAFT_GRAPH if not eager else _eager(
                    "draft-decode", eager_reason(getattr(self, "cuda_graph_runner", None),
                                                 _draft_bs(batch)))
                slot.n += 1
                slot.s += perf_counter() - t0
            except Exception:
                pass

    return draft_counted


def hook_targets() -> list[tuple[str, str]]:
    return [(RUNNER_MODULE, RUNNER_FORWARD), (WORKER_MODULE, WORKER_DRAFT)]


def hook_patch() -> Patch:
    (rm, rq), (wm, wq) = hook_targets()
    return Patch(PATCH_ID).add(rm, rq, _wrap_forward).add(wm, wq, _wrap_draft)
