"""The fix contract, as a template method: a fix says whether it applies and builds its patch;
the base applies, reverts and reports its state.

A fix implements two things:
- `applies_to(target, platform, config)` -> `Applicability`: from the release's source, for the
  platform and the configuration under audit (`diag.context.SpecConfig`, possibly empty);
- `build_patch(target)` -> `diag.patcher.Patch`: the replacements it makes in this process.

The base owns the rest, the same for every fix: `apply()` (applicability, then an all-or-nothing
install through the patcher; idempotent), `revert()` (the exact original objects; a fix that is
not applied says so), and `state()`, the one place a fix's state comes from. Dependencies
between fixes (`depends_on`) are the orchestrator's (`diag.fixes.orchestrator`), which every
caller goes through.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import ClassVar

from diag.context import Context, SpecConfig
from diag.errors import FixError
from diag.findings import Finding, Status
from diag.patcher import Patch, PatchError
from diag.target import Target

# applicability (from the source; `diag fix list`)
APPLICABLE, UPSTREAM, NOT_NEEDED, REFUSED = "applicable", "upstream", "not-needed", "refused"
# state in a process (`state()`); UPSTREAM, NOT_NEEDED and REFUSED are states too
APPLIED, PENDING, REVERTED, NOT_APPLIED, FAILED = \
    "applied", "pending", "reverted", "not-applied", "failed"
ACTIVE = (APPLIED, PENDING)  # the patch is in (or waits for its module's import)
NO_SGLANG = "sglang is not importable in this process: nothing to patch"  # applies_to(None, ...)


@dataclass(frozen=True)
class Applicability:
    """Whether a fix would change this target, platform and configuration, and why.

    `instead`: what the user can do when it does not apply (shown by `fix list` and as a
    finding's hint). `changes`: what it would patch or admit (class or `Class.method` names), so
    that a finding is matched to the fix only when it names one of them (`Fix.would_change`).
    """

    status: str  # applicable | upstream | not-needed | refused
    reason: str
    instead: str = ""
    changes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason}


def crashed_check(target: Target | None, e: Exception) -> Applicability:
    """REFUSED for an applicability check that raised: a file of the tree that does not parse
    is named as such (the tree is broken, not diag: probes.source.broken_source); anything else
    is a crash, said so."""
    from diag.probes.source import broken_source

    found = broken_source(target, e) if target is not None else None
    if found is not None:
        rel, why, _ = found
        return Applicability(REFUSED, f"{rel} {why}: the SGLang tree is incomplete or edited",
                             "reinstall SGLang or pass a release (--sglang VERSION)")
    return Applicability(REFUSED, f"applicability check crashed: {type(e).__name__}: {e}")


@dataclass(frozen=True)
class Prediction:
    """A fix's expected gain, computed once from live counters (every surface renders this).

    `per_pass_ms`: host time saved per pass of the phase it changes; `per_token_ms`: that times
    the phase's passes per output token, where known; `passes`: the passes it would change;
    `basis`: how it was computed, in words."""

    fix: str
    phase: str
    passes: int
    per_pass_ms: float
    basis: str
    per_token_ms: float | None = None

    def to_dict(self) -> dict:
        return {"fix": self.fix, "phase": self.phase, "passes": self.passes,
                "per_pass_ms": round(self.per_pass_ms, 4),
                "per_token_ms": None if self.per_token_ms is None else round(self.per_token_ms, 4),
                "basis": self.basis}

    def text(self) -> str:
        tok = (f", {self.per_token_ms:.3f} ms per token" if self.per_token_ms is not None
               else "")
        return (f"{self.fix} should save {self.per_pass_ms:.3f} ms per {self.phase} pass{tok} "
                f"({self.passes} passes it would change; {self.basis})")


@dataclass(frozen=True)
class FixState:
    """A fix's state in this process: applied | pending (its module not imported yet) |
    reverted | not-applied | refused | upstream | not-needed | failed, with the reason."""

    state: str
    reason: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def to_dict(self) -> dict[str, str]:
        return {"state": self.state, "reason": self.reason}


class NotApplied(FixError):
    """`revert()` of a fix that is not applied in this process."""


class Fix:
    """A revertible patch of SGLang code in this process. Subclasses implement `applies_to`
    and `build_patch` only (and may refine `would_change`)."""

    id: ClassVar[str]
    title: ClassVar[str]
    addresses: ClassVar[tuple[str, ...]] = ()  # probe ids it fixes
    depends_on: ClassVar[tuple[str, ...]] = ()  # fix ids applied before it (the orchestrator)
    revertible: ClassVar[bool] = True
    bench: ClassVar[str | None] = None  # "module:function" measuring it before/after (diag bench)

    def __init__(self) -> None:
        self._patch: Patch | None = None
        self._last = FixState(NOT_APPLIED, "never applied in this process")
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ what a fix implements

    def applies_to(self, target: Target | None, platform: str,
                   config: SpecConfig | None = None) -> Applicability:
        """From the target's source (None: no SGLang found here), never importing it."""
        raise NotImplementedError(f"{type(self).__name__}.applies_to")

    def build_patch(self, target: Target | None) -> Patch:
        """The replacements, for the SGLang this process imports (`target` describes it).
        Raise FixError or PatchError for code of an unexpected shape (nothing is patched)."""
        raise NotImplementedError(f"{type(self).__name__}.build_patch")

    def revert_risk(self, environ: dict[str, str]) -> str | None:
        """What reverting this fix re-exposes in an engine started with `environ` (the variables
        its run directory recorded), one line; None: nothing to warn about. `fix revert` prints
        it on stderr unless `--yes`."""
        return None

    def would_change(self, finding: Finding, applicability: Applicability) -> tuple[bool, str]:
        """Would applying this fix (applicable here) change `finding`? (yes/no, why not).
        Default: a warn/fail finding of a probe it addresses."""
        if finding.probe not in self.addresses:
            return False, f"{self.id} does not address {finding.probe}"
        if finding.status not in (Status.WARN, Status.FAIL):
            return False, f"nothing to change ({finding.status.value})"
        return True, ""

    def predict(self, counters: dict, passes_per_token: float | None = None) -> Prediction | None:
        """What applying this fix should gain, from an engine's live counters (`fix status`
        counters of one process) before it is applied; None where the counters show nothing
        this fix changes. Default: no prediction."""
        return None

    # ------------------------------------------------------------------ what the base owns

    def apply(self, target: Target | None = None, platform: str | None = None,
              config: SpecConfig | None = None) -> FixState:
        """Check applicability, then install the patch all or nothing; idempotent.

        `target`: the SGLang this process imports (default: found on sys.path, not imported).
        Returns the state (applied, pending, upstream, not-needed); raises FixError, with the
        state recorded, when the fix is refused or fails (then nothing was patched).
        """
        with self._lock:
            if self._patch is not None and self._patch.wanted:
                return self.state()
            if target is None:
                from diag.target import find_importable

                target = find_importable()
            platform = platform or process_platform()
            try:
                a = self.applies_to(target, platform, config or SpecConfig())
            except Exception as e:
                raise self._fail(REFUSED, crashed_check(target, e).reason) from None
            if a.status in (UPSTREAM, NOT_NEEDED):
                self._last = FixState(a.status, a.reason)
                return self._last
            if a.status != APPLICABLE:
                raise self._fail(REFUSED, a.reason)
            try:
                patch = self.build_patch(target)
                if not patch.entries:
                    raise PatchError("the patch is empty: nothing to patch")
                patch.apply()  # resolves every loaded target before it changes any
            except (FixError, PatchError) as e:
                raise self._fail(REFUSED, f"{e}; nothing patched") from None
            except Exception as e:
                raise self._fail(FAILED, f"{type(e).__name__}: {e}") from None
            self._patch = patch
            return self.state()

    def revert(self) -> FixState:
        """Restore the exact original objects. Raises NotApplied when it is not applied here."""
        with self._lock:
            if self._patch is None or not self._patch.wanted:
                st = self.state()
                raise NotApplied(f"{self.id} is not applied in this process ({st.state}"
                                 + (f": {st.reason}" if st.reason else "") + "): nothing to "
                                 "revert", exit_code=4)
            if not self.revertible:
                raise FixError(f"{self.id} cannot be reverted", exit_code=4)
            self._patch.revert()
            self._patch = None
            self._last = FixState(REVERTED, "")
            return self._last

    def state(self) -> FixState:
        """The one source of a fix's state in this process."""
        p = self._patch
        if p is not None and p.wanted:
            if p.errors:
                return FixState(FAILED, "; ".join(p.errors))
            # a module being imported is in sys.modules before the patcher's hook patched it
            if p.pending or not p.applied:
                return FixState(PENDING, "waiting for the import of "
                                + ", ".join(p.pending or p.modules))
            return FixState(APPLIED, "")
        return self._last

    def is_applied(self) -> bool:
        """Applied, or waiting for the import of the code it patches."""
        return self.state().active

    def patches(self) -> list[Patch]:
        """The patch in effect (empty when not applied): what the dry run inspects."""
        return [self._patch] if self._patch is not None and self._patch.wanted else []

    @property
    def errors(self) -> list[str]:
        return list(self._patch.errors) if self._patch else []

    def _fail(self, state: str, reason: str) -> FixError:
        self._last = FixState(state, reason)
        return FixError(f"{self.id}: {state}: {reason}", exit_code=4)

    def verify(self, ctx: Context) -> list[Finding]:
        """Re-run the probes this fix addresses, with the fix applied, and return their findings."""
        from diag.probes import get as get_probe
        from diag.probes.base import run_probe

        out: list[Finding] = []
        for pid in self.addresses:
            out.extend(run_probe(get_probe(pid), ctx))
        return out


def process_platform() -> str:
    """hip | cuda of this process without importing torch: DIAG_PLATFORM, the loaded torch, or
    torch/version.py; hip when nothing says."""
    import os
    import sys

    p = os.environ.get("DIAG_PLATFORM")
    if p in ("hip", "cuda"):
        return p
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "version", None) is not None:
        return "cuda" if getattr(torch.version, "cuda", None) and \
            not getattr(torch.version, "hip", None) else "hip"
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec and spec.submodule_search_locations:
            path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
            ns: dict[str, str] = {}
            with open(path, encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith(("hip", "cuda")) and "=" in line:
                        name, _, value = line.partition("=")
                        ns[name.split(":")[0].strip()] = value.strip()
            if ns.get("hip", "None") != "None":
                return "hip"
            if ns.get("cuda", "None") != "None":
                return "cuda"
    except Exception:
        pass
    return "hip"
