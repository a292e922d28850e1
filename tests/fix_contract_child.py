"""Child process for tests/test_fix_contract.py: every registered fix against the REAL modules
of one SGLang release, through the fix contract (`Fix.apply/revert/state`) and the orchestrator.

Run as `.venv-sglang/bin/python tests/fix_contract_child.py VERSION` with `tests/standins` (the
torchvision STAND-IN: its CUDA wheels do not load against CPU torch), the release tree and the
worktree on PYTHONPATH (`DIAG_RELEASE_ROOT` names the tree). Prints `RESULT {json}`.

Per fix: its applicability; when `applicable`, the modules its patch names are imported, the
original objects recorded, then apply -> applied (every attribute replaced and marked) -> apply
again (the same replacement objects) -> revert -> the identical originals -> revert again says
"not applied". When not applicable: apply patches nothing and says why.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def _owner(module: str, qualname: str) -> tuple[Any, str]:
    owner: Any = sys.modules[module]
    *path, name = qualname.split(".")
    for part in path:
        owner = vars(owner)[part]
    return owner, name


def cycle(fid: str, target) -> dict[str, Any]:
    from diag import fixes
    from diag.errors import FixError
    from diag.fixes import orchestrator
    from diag.fixes.base import APPLICABLE, NotApplied
    from diag.patcher import marked

    fix = fixes.get(fid)
    a = orchestrator.judge(fid, target, "hip")
    rec: dict[str, Any] = {"status": a.status, "reason": a.reason}
    if a.status != APPLICABLE:
        try:
            rec["apply_state"] = fix.apply(target, "hip").state
        except FixError:
            rec["apply_state"] = fix.state().state
        rec["patched"] = bool(fix.patches())
    else:
        entries = [(e.module, e.qualname) for e in fix.build_patch(target).entries]
        for m in sorted({m for m, _ in entries}):
            try:
                importlib.import_module(m)
            except Exception as e:
                rec["import_error"] = f"import {m}: {type(e).__name__}: {e}"
                return rec
        where = {q: _owner(m, q) for m, q in entries}
        originals = {q: vars(o)[n] for q, (o, n) in where.items()}
        rec["entries"] = sorted(where)
        rec["state_after_apply"] = fix.apply(target, "hip").state
        after = {q: vars(o)[n] for q, (o, n) in where.items()}
        rec["replaced"] = all(after[q] is not originals[q] for q in where)
        rec["marked"] = all(marked(after[q], fid) for q in where)
        rec["state_after_apply_again"] = fix.apply(target, "hip").state
        rec["apply_again_same_objects"] = all(vars(o)[n] is after[q] for q, (o, n) in where.items())
        rec["state_after_revert"] = fix.revert().state
        rec["originals_identical"] = all(vars(o)[n] is originals[q] for q, (o, n) in where.items())
        rec["state"] = fix.state().state
    try:
        fix.revert()
        rec["revert_when_not_applied"] = "no error"
    except NotApplied as e:
        rec["revert_when_not_applied"] = str(e)
    return rec


def with_dependencies(target) -> dict[str, Any]:
    """The orchestrator on the real classes: apply a fix with its dependencies, then revert the
    dependency: its dependant comes off first, and every original is back."""
    from diag import fixes
    from diag.fixes import orchestrator
    from diag.fixes.base import APPLICABLE

    out: dict[str, Any] = {}
    for spec in fixes.specs():
        if not spec.depends_on or orchestrator.judge(spec.id, target, "hip").status != APPLICABLE:
            continue
        chain = orchestrator.order([spec.id])
        entries = {f: [(e.module, e.qualname) for e in fixes.get(f).build_patch(target).entries]
                   for f in chain if orchestrator.judge(f, target, "hip").status == APPLICABLE}
        where = {q: _owner(m, q) for es in entries.values() for m, q in es}
        originals = {q: vars(o)[n] for q, (o, n) in where.items()}
        res = orchestrator.apply([spec.id], target, "hip")
        back = orchestrator.revert(list(spec.depends_on))
        out[spec.id] = {
            "applied": {f: o.state for f, o in res.items()},
            "reverted_order": list(back),
            "reverted": {f: o.state for f, o in back.items()},
            "originals_identical": all(vars(o)[n] is originals[q]
                                       for q, (o, n) in where.items()),
        }
    return out


def main() -> None:
    from diag import fixes
    from diag.target import from_path

    target = from_path(Path(os.environ["DIAG_RELEASE_ROOT"]))
    res: dict[str, Any] = {"version": sys.argv[1], "fixes": {}}
    for spec in fixes.specs():
        try:
            res["fixes"][spec.id] = cycle(spec.id, target)
        except Exception as e:
            res["fixes"][spec.id] = {"crash": f"{type(e).__name__}: {e}",
                                     "traceback": traceback.format_exc()[-2000:]}
    try:
        res["dependencies"] = with_dependencies(target)
    except Exception as e:
        res["dependencies"] = {"crash": f"{type(e).__name__}: {e}"}
    print("RESULT " + json.dumps(res))


if __name__ == "__main__":
    main()
