"""Cut a trace into speculative-decoding passes by SGLang's own annotations, and tell graph
replays from eager passes by the runtime calls inside each pass.

The annotations, as SGLang 0.5.23 emits them:
- `draft`, `draft_extend`: `speculative/spec_utils.py:852` `spec_stage_span`, around the draft
  decode and the draft extend (`speculative/eagle_worker_v2.py:1478,1501,1593`); the draft
  extend of a prefill batch is `_draft_extend_for_prefill` (`eagle_worker_v2.py:1593-1600`).
- `step[{STAGE} bs={bs}]`, `step[EXTEND bs={bs} toks={n}]`: `model_executor/model_runner.py:1832`
  through `utils/profile_utils.py:484-498` `build_step_span_name`; STAGE is `VERIFY` for the
  target verify, `DRAFT` for every step of a draft model runner, else the forward mode's name.
- `scheduler.{stage}`: `observability/scheduler_stage_metrics.py:128,167`.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass, field

from diag.probes.trace.reader import Trace

PHASES = ("target-verify", "draft-decode", "draft-extend", "target-extend", "decode")
SPEC_SPANS = {"draft": "draft-decode", "draft_extend": "draft-extend"}
STEP = re.compile(r"^step\[(?P<stage>[A-Z_]+)(?: raw_bs=\d+)? bs=(?P<bs>\d+)")
STEP_PHASE = {"VERIFY": "target-verify", "TARGET_VERIFY": "target-verify",
              "EXTEND": "target-extend", "MIXED": "target-extend", "DECODE": "decode",
              "DRAFT": "draft-decode", "DRAFT_LOOP": "draft-decode"}
# Annotations SGLang 0.5.23 emits that are not a phase (scheduler loop, result copies, PP).
KNOWN = re.compile(r"^(scheduler\.\w+|run_batch|recv_requests|get_next_batch_to_run|"
                   r"process_batch_result|send_\w+|recv_\w+|copy_result_to_cpu|"
                   r"copy_embedding_to_cpu|sglang\.vlm\.\w+|ProfilerStep#\d+|"
                   r"draft|draft_extend|step\[.*\])$")

GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch")
KERNEL_LAUNCH = re.compile(r"Launch(Cooperative)?Kernel|^cuLaunch")
PREFILL_REASON = ("follows a prefill: the draft extend of a prefill batch runs the draft model "
                  "in EXTEND mode, never a graph (SGLang 0.5.23 speculative/eagle_worker_v2.py"
                  ":1593 _draft_extend_for_prefill)")


@dataclass(slots=True)
class Pass:
    """One pass of one phase: an annotation span and what it launched."""

    phase: str
    name: str
    ts: float
    end: float
    tid: object
    bs: int | None = None
    graph_launches: int = 0
    kernel_launches: int = 0
    # per graph launch: (correlation, kernels recorded, graph id or None)
    replays: list[tuple] = field(default_factory=list)
    gpu_us: float | None = None
    reason: str | None = None
    after: str | None = None  # the phase of the pass before this one on its thread
    runtime_seen: bool = True  # False: the trace recorded no runtime calls (CPU-only profile)
    dur: float | None = None  # the span's duration as written in the trace

    @property
    def mode(self) -> str:
        """graph, eager, or unknown where the trace recorded no runtime call at all."""
        if not self.runtime_seen:
            return "unknown"
        return "graph" if self.graph_launches else "eager"

    @property
    def host_us(self) -> float:
        return self.dur if self.dur is not None else self.end - self.ts

    @property
    def launches(self) -> int:
        return self.graph_launches + self.kernel_launches


def annotation_counts(tr: Trace) -> list[dict]:
    """Every annotation name with its count, as it is in the trace; unknown ones flagged."""
    counts: dict[str, int] = defaultdict(int)
    for a in tr.annotations:
        counts[a[0]] += 1
    return [{"name": n, "count": c, "known": bool(KNOWN.match(n))}
            for n, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


GRAPHED = ("target-verify", "draft-decode", "draft-extend", "decode")  # captured per batch size


def passes(tr: Trace, max_bs: int | None = None) -> list[Pass]:
    """The passes of every phase, in time order per thread, with their launches and GPU time.
    `max_bs`: the server's largest captured batch, when the user gives it."""
    out: list[Pass] = []
    by_tid: dict[tuple, list[tuple]] = defaultdict(list)
    for a in tr.annotations:
        by_tid[(a[3], a[4])].append(a)
    for key, anns in by_tid.items():
        out.extend(_thread_passes(anns, key))
    out.sort(key=lambda p: p.ts)
    _attach_runtime(tr, out)
    _reasons(out, max_bs)
    return out


def _thread_passes(anns: list[tuple], key: tuple) -> list[Pass]:
    """Phase roots on one thread: a spec span, or a step span outside any spec span."""
    res: list[Pass] = []
    open_spec: Pass | None = None
    for name, ts, end, _pid, _tid, dur in anns:  # sorted by start, outer first
        if open_spec is not None and ts >= open_spec.end:
            open_spec = None
        m = STEP.match(name)
        if name in SPEC_SPANS:
            if open_spec is not None:  # nested spec span: part of the outer one
                continue
            open_spec = Pass(SPEC_SPANS[name], name, ts, end, key, dur=dur)
            res.append(open_spec)
        elif m and open_spec is not None:
            if open_spec.bs is None:
                open_spec.bs = int(m.group("bs"))
        elif m and m.group("stage") in STEP_PHASE:
            res.append(Pass(STEP_PHASE[m.group("stage")], name, ts, end, key,
                            bs=int(m.group("bs")), dur=dur))
    prev = None
    for p in res:
        p.after = prev
        prev = p.phase
    return res


def _attach_runtime(tr: Trace, out: list[Pass]) -> None:
    """Count each pass's launches from the runtime calls on its thread inside its span, and its
    GPU busy time from the GPU activities those calls correlate to."""
    rt_by_tid: dict[tuple, list[tuple]] = defaultdict(list)
    for r in tr.runtime:
        rt_by_tid[(r[3], r[4])].append(r)
    starts = {k: [r[1] for r in v] for k, v in rt_by_tid.items()}
    gpu_by_corr: dict[object, list[tuple]] = defaultdict(list)
    for g in tr.gpu:
        if g[6] is not None:
            gpu_by_corr[g[6]].append(g)
    for p in out:
        p.runtime_seen = bool(tr.runtime)
        rts = rt_by_tid.get(p.tid, [])
        lo = bisect.bisect_left(starts.get(p.tid, []), p.ts)
        hi = bisect.bisect_right(starts.get(p.tid, []), p.end)
        spans: list[tuple[float, float]] = []
        for name, _ts, _end, _pid, _tid, corr in rts[lo:hi]:
            ops = gpu_by_corr.get(corr, ()) if corr is not None else ()
            if GRAPH_LAUNCH.match(name):
                p.graph_launches += 1
                kernels = [g for g in ops if g[0] == "kernel"]
                gid = next((g[7] for g in kernels if g[7] is not None), None)
                p.replays.append((corr, len(kernels), gid))
            elif KERNEL_LAUNCH.search(name):
                p.kernel_launches += 1
            spans.extend((g[2], g[3]) for g in ops)
        p.gpu_us = _union(spans) if tr.gpu else None


def _union(spans: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(spans):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


def _reasons(out: list[Pass], max_bs: int | None = None) -> None:
    """The reason an eager pass shows in the trace itself, where it shows one (and the batch
    size against the server's largest captured batch, when given)."""
    top_graph_bs: dict[str, int] = {}
    for p in out:
        if p.mode == "graph" and p.bs is not None:
            top_graph_bs[p.phase] = max(top_graph_bs.get(p.phase, 0), p.bs)
    for p in out:
        if p.mode != "eager":
            continue
        if p.phase == "draft-extend" and p.after == "target-extend":
            p.reason = PREFILL_REASON
        elif max_bs is not None and p.bs is not None and p.bs > max_bs and p.phase in GRAPHED:
            p.reason = f"batch {p.bs} above the largest captured batch ({max_bs}, as given)"
        elif p.bs is not None and p.phase in top_graph_bs and p.bs > top_graph_bs[p.phase]:
            p.reason = (f"batch {p.bs} above the largest batch this phase replayed as a graph "
                        f"in the trace ({top_graph_bs[p.phase]})")
