"""Run-time evidence inside an engine: draft-extend passes by mode (graph replay / eager), timed.

Why: the static gate says what *should* happen; these counters say what the engine *did*. Two
hooks, at points that exist in every supported release (tests resolve them by AST in each):
- `EagleDraftWorker._draft_extend_for_decode` (speculative/eagle_worker_v2.py): one call is one
  draft-extend pass after a verify step; its host wall time is measured around the call.
- the draft-extend runner's graph check, `EAGLEDraftExtendCudaGraphRunner.can_run` (up to
  0.5.13.post1) / `.can_run_graph` (from 0.5.15.post1): called only when a runner exists; its
  answer during the pass decides the mode. No runner, or the check said no -> `eager`.
Each pass is added in place to a preallocated slot per (mode, batch, reason) (`telemetry.Tally`:
no allocation, no lock on the hot path), emitted by the agent's poll thread as `draft_extend`
events (passes and seconds since the last one; `COUNTERS` sums them by mode); an eager pass
says why (`reason`): `kill-switch`
(SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH set, no runner), `no-runner` (none captured: the gate),
`batch-above-captured` (a runner exists, the batch is larger than its largest captured size) or
`runner-declined` (its check said no for another reason). The same patch carries the
target-verify and draft-decode counters (`phase_counter`). The first draft-extend after a prefill (`_draft_extend_for_prefill`) is
always eager in SGLang and is not counted. Times are host time: nothing here synchronizes the
device (that would add the very stall being measured).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from time import monotonic, perf_counter
from typing import Any

from packaging.version import InvalidVersion, Version

from diag import telemetry
from diag.patcher import Patch
from diag.probes.draft_extend_graph import phase_counter as graph_phase_runtime
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


TALLY = telemetry.Tally("draft_extend", "passes")
_graph: dict[int | None, telemetry.Slot] = {}  # batch -> its graph slot (no key built per pass)


def _graph_slot(batch: int | None) -> telemetry.Slot:
    s = _graph.get(batch)
    if s is None:
        s = _graph[batch] = TALLY.slot(("graph", batch, None), mode="graph", batch=batch,
                                       reason=None)
    return s


class Counters:
    """Per-process totals of draft-extend passes by mode, read from the slots (off the hot
    path); `reset` starts them again from now."""

    def __init__(self) -> None:
        self._base: dict[str, tuple[int, float]] = {}

    def _now(self) -> dict[str, tuple[int, float]]:
        out = {"graph": (0, 0.0), "eager": (0, 0.0)}
        for fields, n, sec in TALLY.totals():
            c, t = out.setdefault(fields["mode"], (0, 0.0))
            out[fields["mode"]] = (c + n, t + sec)
        return out

    def snapshot(self) -> dict[str, dict[str, float | int | None]]:
        res = {}
        for m, (c, t) in self._now().items():
            c0, t0 = self._base.get(m, (0, 0.0))
            c, t = c - c0, t - t0
            res[m] = {"count": c, "seconds": t, "mean_s": t / c if c else None}
        return res

    def reset(self) -> None:
        self._base = self._now()


COUNTERS = Counters()
class _Pass:
    """The graph check's answer (and batch) during the pass in progress. Plain attributes, not a
    thread-local (~75 ns a read on a slow host): SGLang runs one draft-extend pass at a time per
    scheduler process, on its thread, and the check is called inside it."""

    __slots__ = ("answer", "batch")

    def __init__(self) -> None:
        self.answer: bool | None = None
        self.batch: int | None = None


_state = _Pass()


class _Force:
    """Draft-extend forced eager (`diag bench eager-cost`, a `mode:draft-extend-eager` control
    request): the runner's graph check answers no, so SGLang takes its own eager path, the one
    a batch above the largest captured size takes (0.5.23 speculative/eagle_worker_v2.py:
    1182-1185 `can_run_graph`, :1211 `draft_runner.forward`). Why: the eager cost measured
    inside one server, in paired windows, instead of across two servers that differ by more."""

    __slots__ = ("eager", "until")

    def __init__(self) -> None:
        self.eager = False
        self.until = 0.0  # monotonic: a force not renewed by then lapses (a bench killed
        # between its windows leaves no engine eager for good)

    def hold(self, on: bool, seconds: float = 0.0) -> None:
        self.eager, self.until = on, (monotonic() + seconds if on else 0.0)

    def active(self) -> bool:
        if self.eager and monotonic() >= self.until:
            self.eager = False
        return self.eager


FORCE = _Force()
FORCE_HOLD_S = 300.0  # how long one `mode:draft-extend-eager` apply holds
FORCED = "forced-eager"  # the eager reason of a forced pass


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
        outer = _state.answer
        _state.answer, _state.batch = None, None
        t0 = perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            graph, batch = _state.answer, _state.batch
            _state.answer = outer
            try:
                if batch is None:
                    batch = _batch_size(args[0]) if args else None
                slot = (_graph.get(batch) or _graph_slot(batch)) if graph else TALLY.slot(
                    ("eager", batch, reason := _eager_reason(self, batch)), mode="eager",
                    batch=batch, reason=reason)
                slot.n += 1
                slot.s += perf_counter() - t0
            except Exception:  # counting must never break the pass
                pass

    return draft_extend_for_decode_counted


def _eager_reason(worker: Any, batch: int | None) -> str:
    runner = getattr(worker, RUNNER_ATTR, None)
    if runner is not None and FORCE.eager:  # set during this pass (`can_run_recorded`)
        return FORCED
    if runner is None and env_bool(os.environ.get(KILL_SWITCH)):
        return "kill-switch"
    return graph_phase_runtime.eager_reason(runner, batch)


def _wrap_can_run(original: Callable) -> Callable:
    @functools.wraps(original)
    def can_run_recorded(self, forward_batch, *args, **kwargs):
        answer = False if FORCE.eager and FORCE.active() else \
            original(self, forward_batch, *args, **kwargs)
        _state.answer = bool(answer)
        bs = getattr(forward_batch, "batch_size", None)  # ForwardBatch.batch_size: an int
        _state.batch = bs if type(bs) is int else _batch_size(forward_batch)
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


def replay_saving(counters: dict, reasons: tuple[str, ...]) -> tuple[float, int, str] | None:
    """What a graph replay would save per eager draft-extend pass, from one engine's counters
    (`diag fix status` counters of a process): (ms per pass, passes with one of `reasons`, how).

    Capturing replaces the pass's eager model forward (the `draft-extend-forward` counter of
    `phase_counter`) with a replay. Its host cost is built from this engine's own counters: the
    target-verify graph forward (a replay over the same steps) plus the draft-extend metadata
    build. Why both: the verify graph's inputs and attention metadata are loaded before its
    forward, in the verify step's preparation (0.5.23 speculative/eagle_utils.py:405-409
    `decode_cuda_graph_runner.load_batch`, whose metadata is
    model_executor/runner/decode_cuda_graph_runner.py:1682; 0.5.9 eagle_info_v2.py:250
    `replay_prepare`), so the counted verify forward is the bare replay; the draft-extend runner
    builds its metadata inside its replay (0.5.23
    speculative/eagle_draft_extend_cuda_graph_runner.py:662; 0.5.9 :458). The build's time per
    call is the eager one of this engine's draft-extend passes, from the metadata counter
    (`syncs`: `*.init_forward_metadata`, phase draft-extend; the builder's mean over every
    phase where a record has no per-phase time). Without it (no metadata counter for this
    backend) the bare verify replay stands for the replay, and the basis says so; on the H200
    (tests/gpu_lane, runs 3, 5, 6) that overstated the per-pass saving by 9-10 %, the two terms
    together understate it by 3-8 % (recomputed for runs 3, 5, 6; live in runs 7-9). An engine without forward timing: the whole eager pass
    minus a draft-decode graph pass. None where no such pass was counted."""
    de = _sec(counters, "draft_extend")
    eager = _sec(de, "eager")
    passes = sum(_n(_sec(eager, "reasons").get(r)) for r in reasons)
    if not passes:
        return None
    phases = _sec(counters, "graph_phases")
    fwd = _mean(_sec(_sec(phases, graph_phase_runtime.DE_FORWARD), "eager"))
    tv = _mean(_sec(_sec(phases, "target-verify"), "graph"))
    if fwd and tv:
        meta = de_metadata_build(counters)
        how = (f"eager draft-extend forward {1e3 * fwd[0]:.3f} ms ({fwd[1]}) minus this engine's "
               f"target-verify graph replay {1e3 * tv[0]:.3f} ms ({tv[1]})")
        if meta is None:
            return (max(fwd[0] - tv[0], 0.0) * 1e3, passes,
                    how + " (no draft-extend metadata build counted: the replay's own build "
                    "left out)")
        return (max(fwd[0] - tv[0] - meta[0], 0.0) * 1e3, passes,
                how + f" and the draft-extend metadata build {1e3 * meta[0]:.3f} ms "
                f"({meta[1]}, {meta[2]}) the replay repeats")
    whole = _mean(eager)
    dd = _mean(_sec(_sec(phases, "draft-decode"), "graph"))
    if not whole or not dd:
        return None
    return (max(whole[0] - dd[0], 0.0) * 1e3, passes,
            f"eager draft-extend pass {1e3 * whole[0]:.3f} ms ({whole[1]}) minus this engine's "
            f"draft-decode graph pass {1e3 * dd[0]:.3f} ms ({dd[1]})")


def window_section(after: dict | None, before: dict | None, key: str) -> dict:
    """One counters section (`draft_extend`, or a phase of `graph_phases`) over a window: per
    mode, passes and seconds after minus before; eager reasons likewise."""
    a, b = (after or {}).get(key) or {}, (before or {}).get(key) or {}
    out: dict = {}
    for mode, v in a.items():
        if not isinstance(v, dict):
            continue
        w = b.get(mode) if isinstance(b.get(mode), dict) else {}
        out[mode] = {"passes": int(v.get("passes", 0)) - int(w.get("passes", 0)),
                     "seconds": float(v.get("seconds", 0.0)) - float(w.get("seconds", 0.0))}
        ra, rb = v.get("reasons") or {}, w.get("reasons") or {}
        if ra:
            out[mode]["reasons"] = {r: n - rb.get(r, 0) for r, n in ra.items() if n - rb.get(r, 0)}
    return out


def window_counters(after: dict | None, before: dict | None) -> dict:
    """`draft_extend` and every phase of `graph_phases` over a window (after minus before); the
    metadata counter (`syncs`) as it stands after (its means per call are what the prediction
    reads: `replay_saving`)."""
    ga, gb = (after or {}).get("graph_phases") or {}, (before or {}).get("graph_phases") or {}
    return {"draft_extend": window_section(after, before, "draft_extend"),
            "graph_phases": {ph: window_section(ga, gb, ph) for ph in ga},
            "syncs": (after or {}).get("syncs") or {}}


def de_metadata_build(counters: dict) -> tuple[float, int, str] | None:
    """(seconds per call, calls, which) of the eager draft-extend metadata build, from the
    metadata counter (`syncs`) of an engine: the `*.init_forward_metadata` builders' calls in
    phase draft-extend, with their per-phase time; a builder whose record has no per-phase time
    (events before it was kept) gives its mean over every phase. None without such calls."""
    secs = 0.0
    calls = 0
    whole = False
    for name, b in _sec(counters, "syncs").items():
        if not (isinstance(name, str) and name.endswith(".init_forward_metadata")):
            continue
        ph = _sec(_sec(b, "phases"), "draft-extend")
        n = _n(ph.get("calls"))
        if not n:
            continue
        t = ph.get("seconds")
        if not _num(t):
            total, all_calls = b.get("seconds"), _n(b.get("calls"))
            if not _num(total) or not all_calls:
                continue
            t, whole = total * n / all_calls, True
        secs, calls = secs + t, calls + n
    if not calls:
        return None
    which = "the builder's mean over its phases" if whole else "phase draft-extend"
    return secs / calls, calls, which


def _num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0


def _sec(d: object, key: str) -> dict:
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, dict) else {}


def _n(v: object) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def _mean(sec: dict) -> tuple[float, int] | None:
    """(mean seconds per pass, passes) of a counters mode section, or None."""
    n, secs = _n(sec.get("passes")), sec.get("seconds")
    if not n or not isinstance(secs, (int, float)) or isinstance(secs, bool) or secs < 0:
        return None
    return secs / n, n
