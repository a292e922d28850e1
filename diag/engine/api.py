"""In-process API for `sglang.Engine` users and notebooks.

`sglang.Engine` starts its schedulers as spawned children, so a fix applied only in your process
does not reach them. Set the environment before creating the engine and the children start the
agent themselves (through the plugin entry point, SGLang 0.5.11+)::

    import diag.api
    diag.api.apply("all")             # this process now, and the engine's children (DIAG_FIXES)
    engine = sglang.Engine(...)

`apply`/`revert` change this process at once and export the choice in `DIAG_FIXES` for children
started afterwards; a running engine is changed through its run directory
(`diag fix apply ID --run-dir DIR`, or `diag.engine.rundir.request`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from diag.errors import FixError


def _ids(ids: tuple[str, ...]) -> list[str]:
    from diag import fixes

    known = fixes.all_ids()
    out: list[str] = []
    for i in ids:
        for x in (s.strip() for s in str(i).split(",") if s.strip()):
            if x == "all":
                out.extend(k for k in known if k not in out)
            elif x not in known:
                raise FixError(f"unknown fix {x!r} (known: {', '.join(known)}, all)")
            elif x not in out:
                out.append(x)
    return out


def _export(ids: list[str]) -> None:
    if ids:
        os.environ["DIAG_FIXES"] = ",".join(ids)
    else:
        os.environ.pop("DIAG_FIXES", None)


def _requested() -> list[str]:
    return [x for x in os.environ.get("DIAG_FIXES", "").split(",") if x]


def apply(*ids: str) -> dict[str, dict[str, Any]]:
    """Apply fixes in this process (when SGLang is imported, for modules not loaded yet) and
    request them for child processes. Returns {id: {state, reason}}; raises FixError (nothing
    changed for that fix) when one is refused."""
    from diag import fixes
    from diag.fixes.base import APPLICABLE, UPSTREAM
    from diag.target import find_importable

    out: dict[str, dict[str, Any]] = {}
    target = find_importable()
    applied: list[str] = []
    for fid in _ids(ids):
        fix = fixes.get(fid)
        if target is not None:
            from diag.engine.agent import _platform

            a = fix.applies_to(target, _platform())
            if a.status == UPSTREAM:
                out[fid] = {"state": "upstream", "reason": a.reason}
                continue
            if a.status != APPLICABLE:
                for done in applied:
                    fixes.get(done).revert()
                raise FixError(f"{fid}: {a.status}: {a.reason}")
        try:
            fix.apply()
        except Exception as e:
            for done in applied:
                fixes.get(done).revert()
            raise FixError(f"{fid}: {e}") from None
        applied.append(fid)
        out[fid] = {"state": "applied" if fix.is_applied() else "pending", "reason": ""}
    _export(list(dict.fromkeys(_requested() + applied)))
    return out


def revert(*ids: str) -> None:
    """Revert fixes in this process and stop requesting them for children started afterwards."""
    from diag import fixes

    chosen = _ids(ids)
    for fid in chosen:
        fix = fixes.get(fid)
        if not fix.revertible:
            raise FixError(f"{fid} cannot be reverted")
        fix.revert()
    _export([x for x in _requested() if x not in chosen])


def applied() -> list[str]:
    """Fix ids applied (or waiting for their module's import) in this process."""
    from diag import fixes

    out = []
    for fid in fixes.all_ids():
        with contextlib.suppress(Exception):
            if fid in fixes._instances and fixes.get(fid).is_applied():
                out.append(fid)
    return out


@contextlib.contextmanager
def fixes_applied(*ids: str) -> Iterator[dict[str, dict[str, Any]]]:
    """Apply fixes for the block, then revert the ones this block applied."""
    before = set(applied())
    env_before = os.environ.get("DIAG_FIXES")
    states = apply(*ids)
    try:
        yield states
    finally:
        mine = [f for f in _ids(ids) if f not in before and states.get(f, {}).get("state") !=
                "upstream"]
        if mine:
            revert(*mine)
        if env_before is None:
            os.environ.pop("DIAG_FIXES", None)
        else:
            os.environ["DIAG_FIXES"] = env_before


def safe_point() -> None:
    """Apply pending control requests of this process's agent now (DIAG_CONTROL=manual)."""
    from diag.engine import agent

    a = agent.current()
    if a is not None:
        try:
            a.poll()
            a.safe_point()
        except Exception as e:
            a.error("safe_point", e)


def __getattr__(name: str) -> Any:
    # The profiler teardown context managers live with their fix; re-exported here.
    if name in ("controlled_teardown", "controlled_profile"):
        from diag.fixes import profiler_controlled_teardown as m

        return getattr(m, name)
    raise AttributeError(name)
