"""Bench of `repeat-interleave-output-size`: the real 0.5.17 builder before and after the fix.

What runs: `DeepseekV4HipRadixBackend._attach_unified_kv_prefill_meta` from the release's own
source (probes.metadata_syncs.builder_harness), on the draft-extend path, batch 64 by default.

- syncs per call: counted on the GPU (torch's sync debug mode) or, without one, by the CPU
  counter (device tensors tagged); 2 -> 0 expected.
- host time per call behind queued GPU work (GPU only): ~`queue_ms` of work is enqueued
  (`torch.cuda._sleep`, calibrated; a matmul loop where it is missing), then the builder's host
  time is taken; a sync makes the host wait for the queue, so the ratio after/before shows it.
  On CPU there is no queue to wait for: the time row is left out and a note says so.
- guarded: the same with the count checked on 1 call in `guard_every` (the fix's
  `DIAG_RI_GUARD_EVERY`, default `GUARD_EVERY`), over `guard_rounds` x N calls: syncs and host
  time as means (the checked calls are the rare slow ones, a median would hide them), and the
  share of the unguarded gain kept.
Only the builder call is timed: its inputs, the backend stand-in and the `output_size` value
(the caller's expression compiled and evaluated once) are prepared before (`builder_harness
.prepare`); the bare call (the builder called directly) is measured beside it, in the notes.
Params: sglang (default 0.5.17), batch (64), repeats (30; 5 with --quick), queue_ms (10),
guard_every, guard_rounds (3; 2 with --quick).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from diag.bench import BenchResult, Param, Row, Stats

# The --param keys this bench takes (diag bench checks them before any work).
PARAMS = {
    "sglang": Param(str, doc="the release whose builder runs (as --sglang)"),
    "batch": Param(int, 1, doc="requests per metadata build", maximum=4096),
    "repeats": Param(int, 1, doc="timed calls per side", maximum=100_000),
    "queue_ms": Param(float, 0, doc="GPU work queued in front of each call", maximum=10_000),
    "guard_every": Param(int, 1, doc="the fix's guard checks every N calls", maximum=1_000_000),
    "guard_rounds": Param(int, 1, doc="rounds of N guarded calls", maximum=10_000),
}

ID = "repeat-interleave-output-size"
TITLE = "metadata builder: repeat_interleave output_size (real SGLang code)"
PATH = "draft-extend"
WARMUP = 10  # untimed calls first: the host side of the builder settles (allocator, interpreter)


def _queue(torch: Any, ms: float) -> Callable[[], None]:
    """A function that enqueues about `ms` milliseconds of GPU work and returns at once."""
    if hasattr(torch.cuda, "_sleep"):
        # Calibrate after ~50 ms of spinning (idle GPU clocks are several times lower than
        # busy ones, so a cold calibration would queue far less than asked), median of three.
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 10_000_000
        rates = []
        for _ in range(5):
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            rates.append(cycles / max(start.elapsed_time(end), 1e-3))
        per_ms = sorted(rates[2:])[1]
        n = int(per_ms * ms)
        return lambda: torch.cuda._sleep(n)
    a = torch.randn(4096, 4096, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    a @ a
    end.record()
    end.synchronize()
    k = max(1, int(ms / max(start.elapsed_time(end), 1e-3)))

    def work() -> None:
        for _ in range(k):
            a @ a

    return work


def run(params: dict[str, Any], progress: Callable[[str], None]) -> BenchResult:
    import torch

    from diag.fixes import repeat_interleave_output_size as ri
    from diag.probes.metadata_syncs import builder_harness as h
    from diag.probes.metadata_syncs.sync_counter import DeviceTags, count_syncs, gpu_available
    from diag.target import resolve

    version = str(params.get("sglang") or "0.5.17")
    quick = bool(params.get("quick"))
    batch = int(params.get("batch", 64))
    repeats = int(params.get("repeats", 5 if quick else 30))
    queue_ms = float(params.get("queue_ms", 10))
    every = int(params.get("guard_every") or ri.guard_every())
    rounds = int(params.get("guard_rounds", 2 if quick else 3))  # guarded: rounds x N calls
    gpu = gpu_available()
    device = "cuda" if gpu else "cpu"
    desc = (f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}" if gpu
            else f"cpu, torch {torch.__version__} (syncs simulated by the CPU counter)")
    run_params: dict[str, Any] = {"sglang": version, "path": PATH, "batch": batch,
                                  "guard_every": every}
    if gpu:
        run_params.update(repeats=repeats, queue_ms=queue_ms)
    result = BenchResult(ID, TITLE, desc, run_params)

    target = resolve(version, log=progress)
    a = ri.RepeatInterleaveOutputSizeFix().applies_to(target, "hip")
    if a.status != ri.APPLICABLE:
        result.skipped = f"sglang {target.version}: fix is {a.status}: {a.reason}"
        return result
    progress(f"loading the real {h.ATTACH} of sglang {target.version}")
    cls = h.dsv4_class(target)
    inp = h.make_inputs(getattr(cls, h.ATTACH), PATH, batch, device)
    expr = ri.host_count_expr("draft")
    queue = _queue(torch, queue_ms) if gpu else None
    queued_ms: list[float] = []  # the queue each sample really stood behind (GPU events)

    def counts(p: h.Prepared, n: int = 3) -> list[float]:
        out = []
        for _ in range(n):
            p.reset()
            tags = None if gpu else DeviceTags(device=inp.device_tensors)
            with count_syncs("gpu" if gpu else "cpu", tags) as rep:
                p.fn(p.self_obj, **p.kwargs)
            out.append(float(rep.count))
        return out

    def host_times(p: h.Prepared, n: int, warmup: int = WARMUP,
                   after_warmup: Callable[[], None] | None = None) -> list[float]:
        """Host time of the builder call alone, each behind ~queue_ms of queued GPU work."""
        fn, me, kw = p.fn, p.self_obj, p.kwargs
        samples = []
        q0, q1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for i in range(n + warmup):
            if i == warmup and after_warmup is not None:
                after_warmup()
            p.reset()
            torch.cuda.synchronize()
            q0.record()
            queue()
            q1.record()
            t0 = time.perf_counter()
            fn(me, **kw)
            dt = time.perf_counter() - t0
            torch.cuda.synchronize()
            if i >= warmup:
                samples.append(dt)
                queued_ms.append(q0.elapsed_time(q1))
        return samples

    def bare_times(n: int) -> list[float]:
        """The bare call, as the issue measured it: the patched builder called directly."""
        fn = getattr(cls, h.ATTACH)
        me = h.backend_self()
        kw = dict(inp.kwargs, _diag_output_size=inp.locals_["num_tokens"])
        out = []
        for _ in range(n + WARMUP):
            inp.core.unified = None
            torch.cuda.synchronize()
            queue()
            t0 = time.perf_counter()
            fn(me, **kw)
            out.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
        return out[WARMUP:]

    progress("before: as released")
    before = h.prepare(cls, inp)
    before.reset()
    before.fn(before.self_obj, **before.kwargs)
    out_before = before.outputs()
    c_before = counts(before)
    t_before = host_times(before, repeats) if gpu else None

    patch = ri.make_patch(cls.__module__, "draft")
    patch.apply()
    try:
        progress("after: with output_size")
        after = h.prepare(cls, inp, expr)
        after.reset()
        after.fn(after.self_obj, **after.kwargs)
        out_after = after.outputs()
        c_after = counts(after)
        # as many calls as the guarded series, so that both means cover the same warm state
        t_after = host_times(after, rounds * every) if gpu else None
        t_bare = bare_times(repeats) if gpu else None
    finally:
        patch.revert()

    guarded = ri.make_patch(cls.__module__, "draft", guarded=True, every=every)
    guarded.apply()
    try:
        progress(f"after, guarded: the count checked on 1 call in {every}")
        g = h.prepare(cls, inp, expr)
        ri.reset_guard()
        c_guard = counts(g, rounds * every)
        t_guard = host_times(g, rounds * every, after_warmup=ri.reset_guard) if gpu else None
    finally:
        guarded.revert()
        ri.reset_guard()

    same = all(torch.equal(out_before[k], out_after[k]) and
               out_before[k].dtype == out_after[k].dtype for k in out_before)
    result.rows.append(Row("syncs per call", "syncs", Stats.of(c_before), Stats.of(c_after)))
    result.rows.append(Row(f"syncs per call, guarded (mean of {len(c_guard)} calls)", "syncs",
                           Stats.of(c_before), Stats.of([sum(c_guard) / len(c_guard)])))
    if gpu:
        result.rows.append(Row(f"host time per call behind ~{queue_ms:g} ms queued work", "s",
                               Stats.of(t_before), Stats.of(t_after)))
        result.rows.append(Row(f"host time per call, guarded 1 in {every} (median)", "s",
                               Stats.of(t_before), Stats.of(t_guard)))
        mb, ma, mg = (sum(x) / len(x) for x in (t_before, t_after, t_guard))
        kept = (mb - mg) / (mb - ma) * 100 if mb > ma else float("nan")
        result.notes.append(
            f"guarded (checks 1 call in {every}): mean host time {mg * 1e3:.3f} ms over "
            f"{len(t_guard)} calls against {ma * 1e3:.3f} ms unguarded and {mb * 1e3:.3f} ms "
            f"released: keeps {kept:.1f} % of the unguarded gain (means, checked calls "
            f"included)")
        bs, ta = Stats.of(t_bare), Stats.of(t_after)
        result.notes.append(
            f"bare call (the patched builder called directly, same queue): median "
            f"{bs.median * 1e3:.3f} ms; the bench's 'after': median {ta.median * 1e3:.3f} ms "
            f"(ratio {ta.median / bs.median:.2f}); the timed region is the builder call alone "
            f"(output_size computed, backend built before it)")
    else:
        result.notes.append("host time behind queued work is not measured on CPU: there is no "
                            "device queue to wait for, so a ratio would mean nothing; run on a "
                            "GPU for it")
    if queued_ms:
        q = Stats.of(queued_ms)
        result.notes.append(f"queued GPU work in front of each call (measured with CUDA events): "
                            f"median {q.median:.2f} ms, min {q.min:.2f} ms")
    result.notes.append(f"outputs identical before/after: {'yes' if same else 'NO'} "
                        f"({', '.join(h.OUTPUT_FIELDS)})")
    result.notes.append(f"real code: sglang {target.version} {h.DSV4_FILE}::{h.ATTACH}, "
                        f"{PATH} path, {inp.locals_['num_tokens']} tokens")
    return result
