"""The one way fixes are applied, reverted and judged: every caller goes through here.

Callers: the in-engine agent (`diag.engine.agent`), the in-process API (`diag.api`), `diag fix
apply|revert` without `--run-dir` (`diag.cli.fix`), the TUI (`diag.tui.backend`), the dry run of
`diag fix check` (`diag.engine.fix_check`), and the advice (`diag.fixes.advice.resolve`). So the
dependency rules and refusals are the same everywhere:

- applying a fix applies its dependencies first (`depends_on`, recursively); a dependency that
  is refused or fails refuses the fix; a dependency that is `upstream` or `not-needed` is fine;
  when the fix itself is then refused, the dependencies this call applied are reverted;
- reverting a fix reverts the applied fixes that depend on it first;
- `judge` folds the same rule into applicability (`diag fix list`, findings' hints).
"""

from __future__ import annotations

from dataclasses import dataclass

from diag import fixes
from diag.context import SpecConfig
from diag.errors import FixError
from diag.fixes.base import (
    APPLICABLE,
    FAILED,
    NO_SGLANG,
    NOT_APPLIED,
    NOT_NEEDED,
    REFUSED,
    UPSTREAM,
    Applicability,
    FixState,
    NotApplied,
    crashed_check,
    process_platform,
)
from diag.target import Target

OK_APPLY = ("applied", "pending", UPSTREAM)  # what an apply request counts as done


@dataclass(frozen=True)
class Outcome:
    """One fix's result of an apply or revert request."""

    fix: str
    action: str  # apply | revert
    state: str
    reason: str
    ok: bool

    def to_dict(self) -> dict[str, object]:
        return {"fix": self.fix, "action": self.action, "ok": self.ok, "state": self.state,
                "reason": self.reason}


def order(ids: list[str]) -> list[str]:
    """`ids` and their dependencies, dependencies first (each once)."""
    out: list[str] = []

    def visit(fid: str, path: tuple[str, ...]) -> None:
        if fid in out:
            return
        if fid in path:
            raise FixError(f"dependency cycle: {' -> '.join((*path, fid))}")
        for dep in fixes.spec(fid).depends_on:
            visit(dep, (*path, fid))
        out.append(fid)

    for i in ids:
        visit(i, ())
    return out


def dependants(fid: str) -> list[str]:
    """Registered fixes that depend on `fid`, directly or not, the farthest first."""
    out: list[str] = []

    def visit(f: str) -> None:
        for s in fixes.specs():
            if f in s.depends_on and s.id not in out:
                visit(s.id)
                out.append(s.id)

    visit(fid)
    return out


def state(fid: str) -> FixState:
    """The fix's state in this process (`Fix.state()`), without creating it when unused."""
    inst = fixes.instantiated().get(fid)
    return inst.state() if inst is not None else FixState(NOT_APPLIED, "never applied in this "
                                                                       "process")


def states() -> dict[str, FixState]:
    return {fid: state(fid) for fid in fixes.all_ids()}


def judge(fid: str, target: Target | None, platform: str, config: SpecConfig | None = None,
          memo: dict[str, Applicability] | None = None) -> Applicability:
    """Applicability of `fid` with its dependencies folded in, as `apply` would decide."""
    memo = {} if memo is None else memo
    if fid in memo:
        return memo[fid]
    fix = fixes.get(fid)
    try:
        a = fix.applies_to(target, platform, config or SpecConfig())
    except Exception as e:  # a crashing check says so; the others go on
        a = crashed_check(target, e)
    if a.status == APPLICABLE:
        for dep in fix.depends_on:
            d = judge(dep, target, platform, config, memo)
            if d.status == REFUSED:
                a = Applicability(REFUSED, f"needs {dep}, which is refused here: {d.reason}",
                                  d.instead)
                break
    memo[fid] = a
    return a


def apply(ids: list[str], target: Target | None = None, platform: str | None = None,
          config: SpecConfig | None = None, atomic: bool = False) -> dict[str, Outcome]:
    """Apply `ids` (and their dependencies, first) in this process. Never raises for a refusal:
    each outcome says it. `atomic`: one refusal reverts everything this call applied."""
    platform = platform or process_platform()
    out: dict[str, Outcome] = {}
    applied_now: list[str] = []

    def one(fid: str) -> Outcome:
        if fid in out:
            return out[fid]
        fix = fixes.get(fid)
        was_active = fix.state().active
        mark = len(applied_now)
        st: FixState | None = None
        for dep in fix.depends_on:
            d = one(dep)
            if not d.ok and d.state != NOT_NEEDED:
                why = d.reason if d.reason == NO_SGLANG else \
                    f"needs {dep}, which is {d.state}: {d.reason}"
                fix._last = st = FixState(REFUSED, why)
                break
        if st is None:
            try:
                st = fix.apply(target, platform, config)
            except FixError:
                st = fix.state()
            except Exception as e:  # a fix's bug never escapes into the caller (an engine)
                fix._last = st = FixState(FAILED, f"{type(e).__name__}: {e}")
        if st.active and not was_active:
            applied_now.append(fid)
        elif not st.active and st.state not in (UPSTREAM, NOT_NEEDED):
            # all or nothing: take back the dependencies applied for it by this call
            for dep in reversed(applied_now[mark:]):
                if dep not in ids:
                    _quiet_revert(dep)
                    out[dep] = _outcome(dep, "apply", fixes.get(dep).state())
            del applied_now[mark:]
        out[fid] = _outcome(fid, "apply", st)
        return out[fid]

    order(ids)  # unknown ids and cycles raise here, before anything is applied
    for fid in ids:
        r = one(fid)
        if atomic and not r.ok and r.state != NOT_NEEDED:
            for done in reversed(applied_now):
                _quiet_revert(done)
                out[done] = _outcome(done, "apply", fixes.get(done).state())
            break
    return out


def revert(ids: list[str]) -> dict[str, Outcome]:
    """Revert `ids` in this process, the applied fixes that depend on them first. A fix that is
    not applied gives `ok=False`, state `not-applied`, and the reason says so."""
    out: dict[str, Outcome] = {}
    todo: list[str] = []
    for fid in ids:
        for d in [*dependants(fid), fid]:
            if d not in todo:
                todo.append(d)
    for fid in todo:
        fix = fixes.get(fid)
        if fid not in ids and not fix.state().active:
            continue  # a dependant that is not applied: nothing to take off first
        try:
            st = fix.revert()
            out[fid] = Outcome(fid, "revert", st.state, st.reason, True)
        except NotApplied as e:
            out[fid] = Outcome(fid, "revert", NOT_APPLIED, str(e), False)
        except FixError as e:
            out[fid] = Outcome(fid, "revert", fix.state().state, str(e), False)
        except Exception as e:
            out[fid] = Outcome(fid, "revert", FAILED, f"{type(e).__name__}: {e}", False)
    return out


def dry_run(fid: str, target: Target, platform: str) -> dict[str, str]:
    """`diag fix check`'s dry application (in a child with the release importable): apply with
    the dependencies, import every module patched, check each patch is in, revert, check the
    originals are back. {status: fits | does-not-fit | skipped, reason}."""
    import importlib

    a = judge(fid, target, platform)
    if a.status != APPLICABLE:
        return {"status": "skipped", "reason": f"{a.status}: nothing to apply"}
    res = apply([fid], target, platform)
    mine = [f for f in order([fid]) if res.get(f) and fixes.get(f).state().active]
    try:
        if not res[fid].ok:
            return {"status": "does-not-fit", "reason": f"apply: {res[fid].state}: "
                                                        f"{res[fid].reason}"}
        patches = [p for f in mine for p in fixes.get(f).patches()]
        modules = sorted({m for p in patches for m in p.modules})
        for m in modules:
            try:
                importlib.import_module(m)
            except Exception as e:
                return {"status": "skipped",
                        "reason": f"release code cannot be loaded here: import {m}: "
                                  f"{type(e).__name__}: {e}"}
        bad = {f: fixes.get(f).state() for f in mine if fixes.get(f).state().state != "applied"}
        if bad:
            return {"status": "does-not-fit", "reason": "; ".join(
                f"{f}: {s.state}: {s.reason}" for f, s in bad.items())}
        done = [(d.owner, d.name, d.original) for p in patches for d in p.done]
        back = revert([fid] + [f for f in reversed(mine) if f != fid])
        failed = [f"{f}: {o.reason}" for f, o in back.items() if not o.ok]
        if failed:
            return {"status": "does-not-fit", "reason": "revert: " + "; ".join(failed)}
        moved = [f"{getattr(o, '__name__', o)}.{n}" for o, n, orig in done
                 if vars(o).get(n) is not orig]
        if moved:
            return {"status": "does-not-fit", "reason": f"revert left {', '.join(moved)} changed"}
        deps = [f for f in mine if f != fid]
        return {"status": "fits", "reason": f"patched and reverted {', '.join(modules)}"
                + (f" (with {', '.join(deps)})" if deps else "")}
    finally:
        for f in reversed(mine):
            _quiet_revert(f)


def _outcome(fid: str, action: str, st: FixState) -> Outcome:
    return Outcome(fid, action, st.state, st.reason, st.state in OK_APPLY)


def _quiet_revert(fid: str) -> None:
    fix = fixes.get(fid)
    if fix.state().active:
        try:
            fix.revert()
        except Exception:
            pass
