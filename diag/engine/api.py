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
    """Apply fixes in this process (when SGLang is imported, for modules not loaded yet), their
    dependencies first (`diag.fixes.orchestrator`), and request them for child processes.
    Returns {id: {state, reason}} (dependencies included); raises FixError, with nothing left
    applied by this call, when one is refused."""
    from diag.fixes import orchestrator

    chosen = _ids(ids)
    res = orchestrator.apply(chosen, atomic=True)
    bad = [o for o in res.values() if not o.ok and o.state != "not-needed"]
    if bad:
        raise FixError("; ".join(f"{o.fix}: {o.state}: {o.reason}" for o in bad))
    active = [f for f, o in res.items() if o.state in ("applied", "pending")]
    _export(list(dict.fromkeys(_requested() + active)))
    return {f: {"state": o.state, "reason": o.reason} for f, o in res.items()}


def revert(*ids: str) -> dict[str, dict[str, Any]]:
    """Revert fixes in this process (the applied fixes depending on them first) and stop
    requesting them for children started afterwards. `all` means every applied fix; a fix named
    that is not applied raises FixError (the others are still reverted)."""
    from diag.fixes import orchestrator

    chosen = applied() if any(str(i).strip() == "all" for i in ids) else _ids(ids)
    res = orchestrator.revert(chosen)
    _export([x for x in _requested() if x not in chosen and not (x in res and res[x].ok)])
    bad = [o for o in res.values() if not o.ok]
    if bad:
        raise FixError("; ".join(o.reason for o in bad))
    return {f: {"state": o.state, "reason": o.reason} for f, o in res.items()}


def applied() -> list[str]:
    """Fix ids applied (or waiting for their module's import) in this process."""
    from diag.fixes import orchestrator

    return [f for f, st in orchestrator.states().items() if st.active]


@contextlib.contextmanager
def fixes_applied(*ids: str) -> Iterator[dict[str, dict[str, Any]]]:
    """Apply fixes for the block, then revert the ones this block applied."""
    before = set(applied())
    env_before = os.environ.get("DIAG_FIXES")
    states = apply(*ids)
    try:
        yield states
    finally:
        mine = [f for f, st in states.items() if f not in before
                and st.get("state") in ("applied", "pending")]
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
