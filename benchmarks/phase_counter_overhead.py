"""Cost per pass of the phase counters on the hot path, paired, with an interval and a noise floor.

Each case calls a stand-in engine method (it does nothing: the cost measured is all the
counter's) in loops of `--calls`; a pair is one loop of the unwrapped method (A) and one of the
wrapped one (B), run back to back in alternating order (AB, BA, ...). Reported per case: the
time added per pass (median of B - A over the pairs, bootstrap 95 % interval) and the ratio B/A;
and, measured the same way, the noise floor: A against A (two loops of the unwrapped method).

The wrappers are the real ones (`probes.draft_extend_graph.phase_counter`, `probes.draft_extend_graph.runtime`)
with the agent's event file installed as a telemetry sink (counting, as in `diag run --probe
all`); the agent's poll thread is stood in for by a `telemetry.flush()` after each pair (what it
calls every 0.2 s). The wrapped methods are STAND-INS (classes named *Standin*) for SGLang's
ModelRunner.forward, EagleDraftWorker.draft and ._draft_extend_for_decode, which need a GPU and
a model: they carry only what the wrappers read.

    python benchmarks/phase_counter_overhead.py [--calls 20000] [--pairs 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class StandinVerifyMode:  # ForwardMode.TARGET_VERIFY: what the verify wrapper asks
    name = "TARGET_VERIFY"

    def is_target_verify(self) -> bool:
        return True


_OUT = SimpleNamespace(can_run_graph=True)  # ModelRunnerOutput of a replayed graph


class StandinModelRunner:
    decode_cuda_graph_runner = SimpleNamespace(max_bs=8)

    def forward(self, forward_batch):
        return _OUT


class StandinDraftWorker:
    cuda_graph_runner = SimpleNamespace(max_bs=8)
    cuda_graph_runner_for_draft_extend = SimpleNamespace(max_bs=8)

    def draft(self, batch):
        return batch

    def _draft_extend_for_decode(self, batch):
        return batch


def _loop(fn: Callable, obj: object, arg: object, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(obj, arg)
    return (time.perf_counter() - t0) / calls


def cases() -> dict[str, tuple[Callable, Callable, object, object]]:
    """name -> (unwrapped, wrapped, self, argument): one pass each call."""
    from diag.probes.draft_extend_graph import phase_counter as gpr
    from diag.probes.draft_extend_graph import runtime as der
    batch = SimpleNamespace(forward_mode=StandinVerifyMode(), batch_size=8)
    draft_batch = SimpleNamespace(batch_size=lambda: 8)
    can_run = der._wrap_can_run(lambda self, fb: True)

    def extend(self, batch):  # the pass asks the runner's graph check, as SGLang's does
        can_run(self.cuda_graph_runner_for_draft_extend, batch)
        return batch

    return {
        "target-verify pass (graph)": (StandinModelRunner.forward,
                                       gpr._wrap_forward(StandinModelRunner.forward),
                                       StandinModelRunner(), batch),
        "draft-decode step (graph)": (StandinDraftWorker.draft,
                                      gpr._wrap_draft(StandinDraftWorker.draft),
                                      StandinDraftWorker(), draft_batch),
        "draft-extend pass (graph)": (extend, der._wrap_pass(extend), StandinDraftWorker(),
                                      SimpleNamespace(batch_size=8)),
    }


def measure(calls: int, pairs: int) -> dict:
    from diag import paired, telemetry
    from diag.engine import rundir

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        writer = rundir.EventWriter(rundir.create_run_dir(Path(tmp) / "run"), max_bytes=1 << 30)
        telemetry.add_sink(writer)
        try:
            for name, (plain, wrapped, obj, arg) in cases().items():
                for fn in (plain, wrapped):  # warm-up
                    _loop(fn, obj, arg, calls // 10)
                a, b, a2 = [], [], []
                for first, _second in paired.order(pairs):
                    if first == "A":
                        a.append(_loop(plain, obj, arg, calls))
                        b.append(_loop(wrapped, obj, arg, calls))
                    else:
                        b.append(_loop(wrapped, obj, arg, calls))
                        a.append(_loop(plain, obj, arg, calls))
                    a2.append(_loop(plain, obj, arg, calls))
                    telemetry.flush()  # the agent's poll thread, between pairs
                added, lo, hi = paired.difference(a, b)
                rows.append({"case": name, "plain_ns": 1e9 * sorted(a)[len(a) // 2],
                             "added_ns": added * 1e9, "added_lo_ns": lo * 1e9,
                             "added_hi_ns": hi * 1e9,
                             "ratio": paired.paired_ratio(a, b).to_dict(),
                             "noise_floor": paired.paired_ratio(a, a2).to_dict(),
                             "noise_floor_ns": [x * 1e9 for x in paired.difference(a, a2)]})
        finally:
            telemetry.remove_sink(writer)
            writer.close()
    return {"calls": calls, "pairs": pairs, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = measure(args.calls, args.pairs)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"added per pass, median of {args.pairs} pairs of {args.calls} calls (95 % interval); "
          "noise floor: the plain method against itself")
    for r in res["rows"]:
        f = r["noise_floor_ns"]
        print(f"  {r['case']:<28} plain {r['plain_ns']:6.0f} ns  added {r['added_ns']:7.0f} ns "
              f"({r['added_lo_ns']:.0f}..{r['added_hi_ns']:.0f})  floor {f[0]:5.0f} ns "
              f"({f[1]:.0f}..{f[2]:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
