"""Part of `profiler-controlled-teardown`: switch profiler stages before `run_batch`'s span opens.

Why: with `profile_by_stage` (and always with `SGLANG_PROFILE_V2`) SGLang stops the prefill
profile and starts the decode one inside `Scheduler.run_batch`
(`profiler_manager._profile_batch_predicate(batch)`, 0.5.23 scheduler.py:4639), and from 0.5.16
`run_batch` is decorated with a profiler span (`scheduler_nvtx_method("scheduler.run_batch")`,
or `scheduler_stage_method`, which wraps it: 0.5.23 utils/nvtx_utils.py:118 `profile_method`,
:76 `torch.profiler.record_function` while a profiler is active). That span is opened in the
prefill session and closed in the decode one. torch's profiler does not survive a span that
crosses two sessions: on torch 2.13 CPU (`benchmarks/profiler_span_sessions.py`), 30 switches
with a `record_function` entered under one profile and exited after the next one started
killed 5 of 6 children (SIGSEGV) when the stopped profile was left to the GC, and none of 12
with the span closed in its own session; the real 0.5.23 server with V2 stage profiling crashed
at the decode stage's stop (`TorchOpStorage::materialize`) with either teardown of this fix
(3 of 3), and in a later automatic collection without the fix.

The patch calls the predicate from a wrapper around `run_batch` (outside its span, before it
opens) and makes the in-span call a no-op for that batch. Only for stage switching (V2 on, or
`profile_by_stage`): the classic `num_steps` path reads the forward count that `run_batch`
increments before its call, so it stays where it is. Found in the target by AST
(`probes.profiler_teardown.stage_site.locate`: `run_batch` carries a decorator and calls
`<x>._profile_batch_predicate(batch)`).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from diag.probes.gate import env_bool
from diag.probes.profiler_teardown.stage_site import PREDICATE
from diag.probes.profiler_teardown.stops import V2_ENV

_hoisted = threading.local()  # the batch whose predicate ran before the span, on this thread


def _switches_stages(pm: Any) -> bool:
    """V2 on (read as the predicate reads it: its module's `envs.SGLANG_PROFILE_V2.get()`), or
    classic `profile_by_stage`."""
    if getattr(pm, "profile_by_stage", False):
        return True
    flag = getattr(getattr(sys.modules.get(type(pm).__module__), "envs", None), V2_ENV, None)
    try:
        return bool(flag.get()) if flag is not None else env_bool(os.environ.get(V2_ENV))
    except Exception:  # an envs object of another shape: as the environment says
        return env_bool(os.environ.get(V2_ENV))


def wrap_run_batch(original: Callable, enabled: Callable[[], bool]) -> Callable:
    """`run_batch` that runs the profiler predicate first, before the span of `original`."""

    @functools.wraps(original)
    def run_batch(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        pm = getattr(self, "profiler_manager", None)
        if not enabled() or pm is None or not hasattr(pm, PREDICATE) or not _switches_stages(pm):
            return original(self, batch, *args, **kwargs)
        getattr(pm, PREDICATE)(batch)  # stop and start here: no span of ours is open
        _hoisted.batch = batch
        try:
            return original(self, batch, *args, **kwargs)
        finally:
            _hoisted.batch = None

    return run_batch


def wrap_predicate(original: Callable) -> Callable:
    """The predicate, a no-op for the batch whose predicate `run_batch`'s wrapper ran."""

    @functools.wraps(original)
    def predicate(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_hoisted, "batch", None) is batch:
            _hoisted.batch = None  # once: a second call for the batch is the engine's own
            return None
        return original(self, batch, *args, **kwargs)

    return predicate
