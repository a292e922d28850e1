"""STAND-IN fixes (not diag's real ones) for the control tests: they patch `standin_scheduler`
through the real patcher, so toggling them exercises the agent's real control path."""

from __future__ import annotations

from diag.fixes.base import APPLICABLE, Applicability, Fix
from diag.patcher import Patch


class StandinToggleFix(Fix):
    id = "standin-toggle"
    title = "stand-in: compute() returns 'fixed'"

    def applies_to(self, target, platform, config=None) -> Applicability:
        return Applicability(APPLICABLE, "stand-in")

    def build_patch(self, target) -> Patch:
        return Patch(self.id).add("standin_scheduler", "compute",
                                  lambda orig: (lambda: "fixed"), rebind=True)


class StandinBrokenFix(StandinToggleFix):
    """Building its patch raises an unexpected exception (not a FixError): contained."""

    id = "standin-broken"
    title = "stand-in: apply() raises"

    def build_patch(self, target) -> Patch:
        raise RuntimeError("injected failure in apply")


def register() -> None:
    from diag import fixes

    fixes.REGISTRY.setdefault("standin-toggle", "standin_fixes:StandinToggleFix")
    fixes.REGISTRY.setdefault("standin-broken", "standin_fixes:StandinBrokenFix")
