"""The probe contract and the runner that turns a crashing probe into an `error` finding."""

from __future__ import annotations

import contextlib
import sys
import traceback
from dataclasses import dataclass
from typing import Any, ClassVar

from diag.context import Context
from diag.findings import Finding, Status


@dataclass(frozen=True)
class Counter:
    """A probe's runtime counter inside an engine: `patch` names a function ("module:function")
    that returns a `diag.patcher.Patch` emitting telemetry events of the kinds in `events`."""

    patch: str
    events: tuple[str, ...] = ()


class Probe:
    """A check. `run` returns one finding or several; it must not print or exit.

    Declarations (class attributes) are all that diag's other layers know of a probe: `concern`
    is the one-line problem it watches (TUI, help), `fixes` the fix ids that address it,
    `counter` its runtime counter (None: static only)."""

    id: ClassVar[str]
    title: ClassVar[str]
    concern: ClassVar[str] = ""
    fixes: ClassVar[tuple[str, ...]] = ()
    counter: ClassVar[Counter | None] = None
    # Runs torch work (measurements on the local torch): `diag diagnose` runs it in its torch
    # worker process, started first, so the parent never imports torch.
    needs_torch: ClassVar[bool] = False
    # With no server given, `run` reads only the context's target, platform, configuration
    # and options (no census, no other probe's `ctx.cache` entries): `diag diagnose`'s torch
    # worker runs it whole in its wait for the census, and the parent takes those findings
    # (the same code on the same inputs) instead of running it after the census.
    runs_early: ClassVar[bool] = False

    def handover(self, ctx: Context) -> dict[str, Any]:
        """Torch-free work the parent can do for this probe while the worker imports torch:
        `ctx.cache` entries handed to the worker (optional)."""
        return {}

    def measured_already(self) -> bool | None:
        """Whether the torch measurement this probe makes is in diag's disk cache already, told
        without importing torch and before the target is known; None: it cannot tell then.
        `diag diagnose` starts no torch worker when every probe that can tell says True."""
        return None

    def measure_early(self) -> dict[str, Any]:
        """In `diag diagnose`'s torch worker, before its job arrives (torch imported, the parent
        still computing): torch work that needs no context, as `ctx.cache` entries for `run`.
        Default: none."""
        return {}

    def static_early(self, target: Any, platform: str, config: Any) -> dict[str, Any]:
        """In `diag diagnose`'s torch worker, once the parent has resolved the target and the
        configuration and before the job (the parent's census) arrives: torch-free work that
        needs no census, as `ctx.cache` entries for `run` (which must check they are for its
        own target and configuration). Default: none."""
        return {}

    def execute_early(self, target: Any, platform: str) -> dict[str, Any]:
        """In `diag diagnose`'s torch worker, after `static_early` and only where execution is
        allowed and the job has not arrived: the release's code run alone (torch imported), as
        `ctx.cache` entries for `run` (which must check they are for its own target). Default:
        none."""
        return {}

    def prepare(self, ctx: Context) -> None:
        """Called for every probe before any runs: start slow work in the background here
        (e.g. a child process) so that it overlaps the other probes. Optional."""

    def run(self, ctx: Context) -> Finding | list[Finding]:
        raise NotImplementedError

    def finding(self, status: Status, summary: str, **kw) -> Finding:
        kw.setdefault("fixes", list(self.fixes))
        return Finding(probe=self.id, status=status, title=self.title, summary=summary, **kw)


def run_probe(probe: Probe, ctx: Context, verbose: bool = False) -> list[Finding]:
    """The probe's findings; a crash is a finding too. A probe that only reads source runs with
    the cyclic GC paused (probes.source.gc_paused: it would walk the cached parse trees again
    and again); one that runs torch keeps the collector as it is."""
    from diag.probes.source import gc_paused

    try:
        with contextlib.nullcontext() if probe.needs_torch else gc_paused():
            out = probe.run(ctx)
        return out if isinstance(out, list) else [out]
    except KeyboardInterrupt:
        raise
    except SyntaxError as e:
        broken = _broken_source(probe, ctx, e)
        if broken is None:
            return _crashed(probe, verbose)
        return [broken]
    except Exception:  # a crashed probe is reported as such; the run goes on
        return _crashed(probe, verbose)


def _broken_source(probe: Probe, ctx: Context, e: SyntaxError) -> Finding | None:
    """A file of the SGLang tree that did not parse where a probe read it: a target error naming
    the file (exit 3, as a broken worker file is), not a crash of diag (source.broken_source)."""
    from diag.findings import location
    from diag.probes.source import broken_source

    target = getattr(ctx, "target", None)
    found = broken_source(target, e) if target is not None else None
    if found is None:
        return None
    rel, why, line = found
    return Finding(probe=probe.id, status=Status.ERROR, title=probe.title,
                   summary=f"target error: {rel} {why}",
                   evidence=[location(rel, line, None, f"read by {probe.id}: {why}")],
                   hint="the SGLang tree is incomplete or edited: reinstall it or pass a release "
                        "(--sglang VERSION)", fixes=[], target_error=True)


def _crashed(probe: Probe, verbose: bool) -> list[Finding]:
    """The exception being handled, as an error finding: a crashed probe is reported as such;
    the run goes on."""
    e = sys.exc_info()[1]
    detail = traceback.format_exc() if verbose else None
    f = Finding(probe=probe.id, status=Status.ERROR, title=probe.title,
                summary=f"probe crashed: {type(e).__name__}: {e}",
                hint="re-run with -v for the traceback and report it")
    if detail:
        from diag.findings import note

        f.evidence.append(note(detail))
    return [f]
