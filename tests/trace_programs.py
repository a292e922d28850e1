"""Record a real torch-profiler trace on CPU (real torch, real Kineto export) with the
annotations SGLang 0.5.23 emits, in the order it emits them (speculative/eagle_worker_v2.py:1416-1510
forward_batch_generation; _forward_prefill_batch :1558-1600): a prefill batch (target
`step[EXTEND bs= toks=]`, then `draft_extend` around the draft model's `step[DRAFT ...]`), then
decode rounds (`draft`, `step[VERIFY bs=]`, `draft_extend`), all inside `scheduler.run_batch`.
On CPU there is no runtime or kernel event: graph replays and host waits need a GPU trace.

Usage: python trace_programs.py OUT [--rounds N] [--bs N] [--no-stack] [--unknown NAME]
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile, record_function

x = torch.randn(32, 32)


def prefill(bs: int, toks: int) -> None:
    with record_function("scheduler.run_batch"):
        with record_function(f"step[EXTEND bs={bs} toks={toks}]"):
            (x @ x).relu()
        with record_function("draft_extend"), record_function(f"step[DRAFT bs={bs} toks={toks}]"):
            x @ x


def decode_round(bs: int, unknown: str | None) -> None:
    with record_function("scheduler.run_batch"):
        with record_function("draft"), record_function(f"step[DRAFT bs={bs}]"):
            x @ x
        with record_function(f"step[VERIFY bs={bs}]"):
            y = (x @ x).sum()
            y.item()
        with record_function("draft_extend"), record_function(f"step[DRAFT bs={bs}]"):
            x + 1
        if unknown:
            with record_function(unknown):
                x * 2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--bs", type=int, default=1)
    ap.add_argument("--no-stack", action="store_true")
    ap.add_argument("--unknown", default=None)
    a = ap.parse_args()
    with profile(activities=[ProfilerActivity.CPU], with_stack=not a.no_stack) as p:
        prefill(a.bs, 7)
        for _ in range(a.rounds):
            decode_round(a.bs, a.unknown)
    p.export_chrome_trace(a.out)  # a name ending in .gz is written gzip-compressed


if __name__ == "__main__":
    main()
