"""One-time cache fills: `if self._x is None: ...; self._x = ...` runs once per backend object.

Why: a copy or read-back that fills a cache the backend keeps is paid on the first pass only,
not per step (0.5.19 dsa_backend.py:2657-2660, 0.5.23 :3127-3130: `identity_scale =
self._q8kv8_identity_scale; if identity_scale is None: identity_scale = torch.tensor([1.0],
device=dev); self._q8kv8_identity_scale = identity_scale`, the attribute None from `__init__`
(0.5.19 :438, 0.5.23 :701) and assigned nowhere else). A cache on the per-forward metadata
(`if metadata.x is None: metadata.x = ...`) is filled once per forward: still per step, not
matched here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from diag.probes.metadata_syncs.census.objects import _self_attr as self_attr
from diag.probes.metadata_syncs.census.paths import getattr_read


def _self_attr(e: ast.AST) -> str | None:
    """`self.a` or `getattr(self, "a"[, default])`: "a"."""
    return self_attr(getattr_read(e) or e)


def _tested(test: ast.AST) -> ast.AST | None:
    """What `x is None`, `not x` and `not hasattr(self, "a")` test to be absent."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is) \
            and isinstance(test.comparators[0], ast.Constant) \
            and test.comparators[0].value is None:
        return test.left
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        e = test.operand
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "hasattr":
            return ast.Call(ast.Name("getattr", ast.Load()), e.args, [])
        return e
    return None


def _own_nodes(stmts: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of `stmts` and those nested in them, nested function and class bodies
    left out (they run elsewhere); statements only: assignments are statements, and a full
    walk of every expression costs several times as much."""
    todo: list[ast.stmt] = list(stmts)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield n
        for part in ("body", "orelse", "finalbody"):
            todo.extend(getattr(n, part, ()))
        for h in getattr(n, "handlers", ()):
            todo.extend(h.body)
        for c in getattr(n, "cases", ()):
            todo.extend(c.body)


def _local_source(fn: ast.AST, name: str, line: int) -> str | None:
    """The attribute a local holds at `line`: its last plain assignment before, `n = self.a`
    (the function's assignments indexed once, on the node)."""
    index = getattr(fn, "_diag_locals", None)
    if index is None:
        index = {}
        for n in _own_nodes(getattr(fn, "body", [])):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        index.setdefault(t.id, []).append(
                            (n.lineno, _self_attr(n.value) if len(n.targets) == 1 else None))
        fn._diag_locals = index  # type: ignore[attr-defined]
    before = [(ln, a) for ln, a in index.get(name, ()) if ln < line]
    return max(before, key=lambda x: x[0])[1] if before else None


def memo_fill(st: ast.If, fn: ast.AST) -> str | None:
    """The attribute `st` fills once: its test finds `self.<a>` empty (directly, or through a
    local read from it) and its body stores `self.<a> = ...`; else None (kept on the node:
    every pass of the scan asks again)."""
    if not hasattr(st, "_diag_memo"):
        st._diag_memo = _memo_fill(st, fn)  # type: ignore[attr-defined]
    return st._diag_memo  # type: ignore[attr-defined]


def _memo_fill(st: ast.If, fn: ast.AST) -> str | None:
    e = _tested(st.test)
    if e is None:
        return None
    attr = _self_attr(e)
    if attr is None and isinstance(e, ast.Name):
        attr = _local_source(fn, e.id, st.lineno)
    if attr is None:
        return None
    for n in _own_nodes(st.body):
        if isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(_self_attr(t) == attr for t in targets if isinstance(t, ast.Attribute)):
                return attr
        elif isinstance(n, ast.Expr) and isinstance(c := n.value, ast.Call) and isinstance(
                c.func, ast.Name) and c.func.id == "setattr" and len(c.args) == 3 and _self_attr(
                    ast.Call(ast.Name("getattr", ast.Load()), c.args[:2], [])) == attr:
            return attr
    return None


def emptied(cls: ast.ClassDef) -> set[str]:
    """The `self.<a>` a method other than `__init__` sets to None (or deletes): a cache emptied
    again, per step perhaps, whose fill is not once per process (kept on the node)."""
    out = getattr(cls, "_diag_emptied", None)
    if out is None:
        out = set()
        for m in cls.body:
            if not isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) or m.name == "__init__":
                continue
            for n in _own_nodes(m.body):
                if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) \
                        and n.value.value is None:
                    out |= {a for t in n.targets if (a := _self_attr(t))}
                elif isinstance(n, ast.Delete):
                    out |= {a for t in n.targets if (a := _self_attr(t))}
        cls._diag_emptied = out  # type: ignore[attr-defined]
    return out
