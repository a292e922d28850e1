"""`diag kit compare A.json B.json`: two kit runs (two hosts, two releases) side by side: the
environment, then each check's status and headline figure. Input that is not a kit JSON of this
schema's major version is refused with one line (`KitFileError`), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from diag.errors import DiagError, clip
from diag.kit.report import KIND, env_line
from diag.schemas import SCHEMA_VERSION


class KitFileError(DiagError):
    """A file `diag kit compare` cannot read as a kit JSON (exit 3)."""


def load(path: str) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise KitFileError(f"{clip(path)}: cannot read: {getattr(e, 'strerror', None) or e}") \
            from None
    try:
        doc = json.loads(text)
    except ValueError:
        raise KitFileError(f"{clip(path)}: not JSON (a kit.json from `diag kit run` is)") \
            from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise KitFileError(f"{clip(path)}: not a kit JSON (its kind is "
                           f"{clip(repr(doc.get('kind')) if isinstance(doc, dict) else type(doc).__name__)}"
                           f", not {KIND!r})")
    v = doc.get("schema_version")
    major = str(v).split(".")[0]
    if major != str(SCHEMA_VERSION):
        raise KitFileError(f"{clip(path)}: kit schema version {clip(repr(v))}, this diag reads "
                           f"major version {SCHEMA_VERSION} (use the diag that wrote it)")
    if not isinstance(doc.get("checks"), list) or not all(
            isinstance(c, dict) and isinstance(c.get("id"), str) for c in doc["checks"]):
        raise KitFileError(f"{clip(path)}: a kit JSON without a list of checks")
    return doc


def _headline(c: dict[str, Any] | None) -> str:
    if c is None:
        return "absent"
    v = c.get("values") or {}
    fig = ""
    if isinstance(v.get("ratio"), dict):
        r = v["ratio"]
        fig = f" {r.get('ratio', 0):.3f} ({r.get('lo', 0):.3f}-{r.get('hi', 0):.3f})"
    elif "ready_s" in v:
        fig = f" {v['ready_s']} s"
    elif v.get("outcome") and c.get("status") == "not-run":
        fig = f" ({v['outcome']})"
    return f"{c.get('status')}{fig}"


def compare(a: dict[str, Any], b: dict[str, Any], names: tuple[str, str]) -> dict[str, Any]:
    ca = {c["id"]: c for c in a["checks"]}
    cb = {c["id"]: c for c in b["checks"]}
    ids = list(ca) + [i for i in cb if i not in ca]
    rows = [{"id": i, "a": _headline(ca.get(i)), "b": _headline(cb.get(i)),
             "same": (ca.get(i) or {}).get("status") == (cb.get(i) or {}).get("status")}
            for i in ids]
    return {"schema_version": SCHEMA_VERSION, "kind": "diag-kit-compare",
            "files": list(names),
            "environment": [env_line(a.get("environment") or {}),
                            env_line(b.get("environment") or {})],
            "server": [(a.get("server") or {}).get("describe"),
                       (b.get("server") or {}).get("describe")],
            "exit_code": [a.get("exit_code"), b.get("exit_code")], "checks": rows}


def render(doc: dict[str, Any]) -> str:
    a, b = doc["files"]
    lines = [f"A: {a}", f"   {doc['environment'][0]}", f"   server: {doc['server'][0]}",
             f"B: {b}", f"   {doc['environment'][1]}", f"   server: {doc['server'][1]}", ""]
    w = max([len("check")] + [len(r["id"]) for r in doc["checks"]])
    wa = max([1] + [len(r["a"]) for r in doc["checks"]])
    lines.append(f"{'check':<{w}}  {'A':<{wa}}  B")
    for r in doc["checks"]:
        lines.append(f"{r['id']:<{w}}  {r['a']:<{wa}}  {r['b']}{'' if r['same'] else '  *'}")
    lines.append(f"exit codes: A {doc['exit_code'][0]}, B {doc['exit_code'][1]}; * the status "
                 "differs")
    return "\n".join(lines)
