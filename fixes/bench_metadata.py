"""Bench of `repeat-interleave-output-size`: the real 0.5.17 builder before and after the fix.

What runs: `DeepseekV4HipRadixBackend._attach_unified_kv_prefill_meta` from the release's own
source (probes.builder_harness), on the draft-extend path, batch 64 by default.

- syncs per call: counted on the GPU (torch's sync debug mode) or, without one, by the CPU
  counter (device tensors tagged); 2 -> 0 expected.
- host time per call behind queued GPU work (GPU only): ~`queue_ms` of work is enqueued
  (`torch.cuda._sleep`, calibrated; a matmul loop where it is missing), then the builder's host
  time is taken; a sync makes the host wait for the queue, so the ratio after/before shows it.
  On CPU there is no queue to wait for: the time row is left out and a note says so.
Params: sglang (default 0.5.17), batch (64), repeats (30; 5 with --quick), queue_ms (10).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from diag.bench import BenchResult, Row, Stats

ID = "repeat-interleave-output-size"
TITLE = "metadata builder: repeat_interleave output_size (real SGLang code)"
PATH = "draft-extend"


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

    from diag.fixes.repeat_interleave_output_size import (
        APPLICABLE,
        RepeatInterleaveOutputSizeFix,
        host_count_expr,
        make_patch,
    )
    from diag.probes import builder_harness as h
    from diag.probes.sync_counter import DeviceTags, count_syncs, gpu_available
    from diag.target import resolve

    version = str(params.get("sglang") or "0.5.17")
    quick = bool(params.get("quick"))
    batch = int(params.get("batch", 64))
    repeats = int(params.get("repeats", 5 if quick else 30))
    queue_ms = float(params.get("queue_ms", 10))
    gpu = gpu_available()
    device = "cuda" if gpu else "cpu"
    desc = (f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}" if gpu
            else f"cpu, torch {torch.__version__} (syncs simulated by the CPU counter)")
    run_params: dict[str, Any] = {"sglang": version, "path": PATH, "batch": batch}
    if gpu:
        run_params.update(repeats=repeats, queue_ms=queue_ms)
    result = BenchResult(ID, TITLE, desc, run_params)

    target = resolve(version, log=progress)
    a = RepeatInterleaveOutputSizeFix().applies_to(target, "hip")
    if a.status != APPLICABLE:
        result.skipped = f"sglang {target.version}: fix is {a.status}: {a.reason}"
        return result
    progress(f"loading the real {h.ATTACH} of sglang {target.version}")
    cls = h.dsv4_class(target)
    inp = h.make_inputs(getattr(cls, h.ATTACH), PATH, batch, device)
    expr = host_count_expr("draft")
    patch = make_patch(cls.__module__, "draft")
    queue = _queue(torch, queue_ms) if gpu else None

    def counts(patched: bool) -> list[float]:
        out = []
        for _ in range(3):
            tags = None if gpu else DeviceTags(device=inp.device_tensors)
            with count_syncs("gpu" if gpu else "cpu", tags) as rep:
                h.call(cls, inp, expr if patched else None)
            out.append(float(rep.count))
        return out

    queued_ms: list[float] = []  # the queue each sample really stood behind (GPU events)

    def host_times(patched: bool) -> list[float]:
        samples = []
        q0, q1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for i in range(repeats + 2):
            torch.cuda.synchronize()
            q0.record()
            queue()
            q1.record()
            t0 = time.perf_counter()
            h.call(cls, inp, expr if patched else None)
            dt = time.perf_counter() - t0
            torch.cuda.synchronize()
            if i >= 2:  # two warm-up calls
                samples.append(dt)
                queued_ms.append(q0.elapsed_time(q1))
        return samples

    progress("before: as released")
    out_before = h.call(cls, inp)
    c_before = counts(False)
    t_before = host_times(False) if gpu else None
    patch.apply()
    try:
        progress("after: with output_size")
        out_after = h.call(cls, inp, expr)
        c_after = counts(True)
        t_after = host_times(True) if gpu else None
    finally:
        patch.revert()
    same = all(torch.equal(out_before[k], out_after[k]) and
               out_before[k].dtype == out_after[k].dtype for k in out_before)
    result.rows.append(Row("syncs per call", "syncs", Stats.of(c_before), Stats.of(c_after)))
    if gpu:
        result.rows.append(Row(f"host time per call behind ~{queue_ms:g} ms queued work", "s",
                               Stats.of(t_before), Stats.of(t_after)))
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
