"""STAND-IN fixes (not diag's real ones) for the control tests: they patch `standin_scheduler`
through the real patcher, so toggling them exercises the agent's real control path."""

from __future__ import annotations

from diag.fixes.base import APPLICABLE, Applicability, Fix
from diag.patcher import Patch


class StandinToggleFix(Fix):
    id = "standin-toggle"
    title = "stand-in: compute() returns 'fixed'"

    def __init__(self) -> None:
        self._patch: Patch | None = None

    def applies_to(self, target, platform) -> Applicability:
        return Applicability(APPLICABLE, "stand-in")

    def apply(self) -> None:
        if self._patch is None:
            self._patch = Patch(self.id).add("standin_scheduler", "compute",
                                             lambda orig: (lambda: "fixed"), rebind=True)
            self._patch.apply()

    def revert(self) -> None:
        if self._patch is not None:
            self._patch.revert()
            self._patch = None

    def is_applied(self) -> bool:
        return self._patch is not None and self._patch.applied


class StandinBrokenFix(StandinToggleFix):
    """Its apply raises an unexpected exception (not a FixError): the agent must contain it."""

    id = "standin-broken"
    title = "stand-in: apply() raises"

    def apply(self) -> None:
        raise RuntimeError("injected failure in apply")


def register() -> None:
    from diag import fixes

    fixes.REGISTRY.setdefault("standin-toggle", "standin_fixes:StandinToggleFix")
    fixes.REGISTRY.setdefault("standin-broken", "standin_fixes:StandinBrokenFix")
