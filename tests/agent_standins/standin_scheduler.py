"""STAND-IN for SGLang's scheduler (not SGLang code): a `Scheduler.run_batch` per batch, and the
module function a stand-in fix replaces. The tests point `DIAG_BATCH_HOOK` at `run_batch`."""

from __future__ import annotations

import time


def compute() -> str:
    return "plain"


class StandinScheduler:
    def run_batch(self, pause: float) -> tuple[str, str]:
        """One batch: reads `compute()` at its start and at its end (a switch mid-batch would
        show as two different values)."""
        first = compute()
        time.sleep(pause)
        return first, compute()

    @classmethod
    def kind(cls) -> str:
        return "classmethod"

    @staticmethod
    def helper() -> str:
        return "staticmethod"
