"""STAND-IN fix (not one of diag's) for the engine lane's fault test: its patch of the real
scheduler raises while it is applied, inside the real server's scheduler process. The agent must
contain it (an `error` event, the fix `failed`) and the server must go on serving."""

from __future__ import annotations

from diag.fixes.base import APPLICABLE, Applicability, Fix
from diag.patcher import Patch

FIX_ID = "standin-engine-fault"


def _raising_factory(original):
    raise RuntimeError("injected failure while patching Scheduler.process_input_requests")


class EngineFaultFix(Fix):
    id = FIX_ID
    title = "stand-in: a patch of the real scheduler that raises"

    def applies_to(self, target, platform, config=None) -> Applicability:
        return Applicability(APPLICABLE, "stand-in")

    def build_patch(self, target) -> Patch:
        # the factory runs (and raises) when the patcher applies it to the loaded scheduler
        return Patch(self.id).add("sglang.srt.managers.scheduler",
                                  "Scheduler.process_input_requests", _raising_factory)


def register() -> None:
    from diag import fixes

    fixes.REGISTRY.setdefault(FIX_ID, "standin_fault_fix:EngineFaultFix")
