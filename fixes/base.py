"""The fix contract: applicability to a target, apply/revert in this process, verify."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from diag.context import Context
from diag.errors import FixError
from diag.findings import Finding
from diag.patcher import Patch, PatchError
from diag.target import Target

APPLICABLE, UPSTREAM, NOT_NEEDED, REFUSED = "applicable", "upstream", "not-needed", "refused"


@dataclass(frozen=True)
class Applicability:
    status: str  # applicable | upstream | not-needed | refused
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason}


class Fix:
    """A revertible patch of SGLang code in this process, applied through `fixes.patcher`.

    `apply()` never half-applies: it refuses (raises FixError) before touching anything when the
    code it patches does not have the expected shape, and patches modules not yet imported when
    they are imported.
    """

    id: ClassVar[str]
    title: ClassVar[str]
    addresses: ClassVar[tuple[str, ...]] = ()  # probe ids it fixes
    depends_on: ClassVar[tuple[str, ...]] = ()  # fix ids that must be applied with it
    revertible: ClassVar[bool] = True
    bench: ClassVar[str | None] = None  # "module:function" measuring it before/after (diag bench)

    def applies_to(self, target: Target, platform: str) -> Applicability:
        raise NotImplementedError

    def apply(self) -> None:
        raise NotImplementedError

    def revert(self) -> None:
        raise NotImplementedError

    def is_applied(self) -> bool:
        raise NotImplementedError

    def install(self, patch: Patch) -> Patch:
        """Apply `patch` all or nothing; code of an unexpected shape becomes a FixError."""
        try:
            patch.apply()
        except PatchError as e:
            raise FixError(f"{self.id}: {e}") from None
        return patch

    def verify(self, ctx: Context) -> list[Finding]:
        """Re-run the probes this fix addresses, with the fix applied, and return their findings."""
        from diag.probes import get as get_probe
        from diag.probes.base import run_probe

        out: list[Finding] = []
        for pid in self.addresses:
            out.extend(run_probe(get_probe(pid), ctx))
        return out
