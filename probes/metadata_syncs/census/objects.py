"""Calls through an object a backend holds: `self.indices_updater_prefill.update(...)`.

Why: attention backends hand part of their metadata build to helper objects they make in
`__init__` (0.5.23 aiter_backend.py:490 `self.indices_updater_prefill =
AiterIndicesUpdaterPrefill(model_runner, self)`), whose methods hold sync sites of their own
(aiter_backend.py:4973-4974, a device scalar used as a slice bound, on every non-MLA extend).
A call through such an attribute resolves to the holder class's method, or to the one method an
instance alias binds (`self.update = self.update_single_wrapper`, :4909). The helper object's
attributes copied from the backend that built it (`self.kv_indptr = attn_backend.kv_indptr`,
:4904, where the backend passed itself) are on the device where the backend's are.

Only what the source says: an attribute every assignment of which builds the same class of
this module. An alias bound under an `if`/`elif` chain of `__init__` (0.5.23
flashinfer_backend.py:1615-1621: `self.update` is `update_sliding_window`,
`update_cross_attention` or `update_single_wrapper` by the backend's `dispatch_reason`) resolves
to every method it may bind, each with the tests that choose it as guards on the call
(`choices`), which the configuration then decides or leaves undecided.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from diag.probes.source import inner as _inner


@dataclass
class Objects:
    """What one module's classes hold: `held[B][attr]` the class B's `self.attr` is built
    from; `aliases[C][name]` the method C's `self.name` is bound to; `built_by[C]` the backend
    class that builds C and the parameter of C.__init__ it passes itself as."""

    held: dict[str, dict[str, str]] = field(default_factory=dict)
    aliases: dict[str, dict[str, str]] = field(default_factory=dict)
    built_by: dict[str, tuple[str, str]] = field(default_factory=dict)
    copied: dict[str, dict[str, str]] = field(default_factory=dict)  # C -> {attr: param.attr}
    # C -> {name: ((method, ((test, holds), ...)), ...)}: an alias bound under an if chain
    chosen: dict[str, dict[str, tuple[tuple[str, tuple[tuple[ast.expr, bool], ...]], ...]]] = \
        field(default_factory=dict)


def _self_attr(t: ast.AST) -> str | None:
    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
        return t.attr
    return None


def _assigns(cls: ast.ClassDef) -> list[tuple[ast.FunctionDef, ast.Assign]]:
    out = []
    for m in cls.body:
        if isinstance(m, ast.FunctionDef):
            out += [(m, n) for n in _inner(m) if isinstance(n, ast.Assign) and len(n.targets) == 1]
    return out


def _under_branch(fn: ast.FunctionDef, node: ast.AST) -> bool:
    """Whether `node` sits inside an `if`/`try`/loop of `fn` (not straight in its body)."""
    return node not in fn.body


def _if_paths(stmts: list[ast.stmt], tests: tuple[tuple[ast.expr, bool], ...] = ()
              ) -> list[tuple[ast.Assign, tuple[tuple[ast.expr, bool], ...]]]:
    """Each assignment of `stmts` reached through `if`/`elif`/`else` only, with the tests on
    the way (`(test, holds)`); those under a loop, `try` or `with` are left out."""
    out = []
    for st in stmts:
        if isinstance(st, ast.Assign) and len(st.targets) == 1:
            out.append((st, tests))
        elif isinstance(st, ast.If):
            out += _if_paths(st.body, (*tests, (st.test, True)))
            out += _if_paths(st.orelse, (*tests, (st.test, False)))
    return out


def _init_params(cls: ast.ClassDef) -> list[str]:
    init = next((m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"),
                None)
    return [a.arg for a in init.args.args] if init is not None else []


def objects(classes: dict[str, ast.ClassDef]) -> Objects:
    """The module's `Objects` (module docstring)."""
    out = Objects()
    for bname, b in classes.items():
        seen: dict[str, set[str | None]] = {}
        for _fn, n in _assigns(b):
            attr = _self_attr(n.targets[0])
            if attr is None:
                continue
            v = n.value
            if isinstance(v, ast.Constant) and v.value is None:
                continue  # `self.x = None` first, the object later: still one class
            made = v.func.id if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and \
                v.func.id in classes else None
            seen.setdefault(attr, set()).add(made)
            if made is not None:
                params = _init_params(classes[made])
                passed = [i for i, a in enumerate(v.args) if isinstance(a, ast.Name)
                          and a.id == "self"]
                kw = [k.arg for k in v.keywords if isinstance(k.value, ast.Name)
                      and k.value.id == "self" and k.arg]
                p = params[passed[0] + 1] if passed and passed[0] + 1 < len(params) else \
                    (kw[0] if kw else None)
                if p is not None:
                    out.built_by.setdefault(made, (bname, p))
        held = {a: next(iter(cs)) for a, cs in seen.items() if len(cs) == 1 and None not in cs}
        if held:
            out.held[bname] = held  # type: ignore[assignment]
    for cname, c in classes.items():
        bound: dict[str, set[str]] = {}
        branchy: set[str] = set()
        copied: dict[str, str] = {}
        for fn, n in _assigns(c):
            attr = _self_attr(n.targets[0])
            if attr is None:
                continue
            meth = _self_attr(n.value)
            if meth is not None and any(isinstance(m, ast.FunctionDef) and m.name == meth
                                        for m in c.body):
                bound.setdefault(attr, set()).add(meth)
                if _under_branch(fn, n):
                    branchy.add(attr)
            elif fn.name == "__init__" and isinstance(n.value, ast.Attribute) and \
                    isinstance(n.value.value, ast.Name):
                copied[attr] = f"{n.value.value.id}.{n.value.attr}"
        one = {a: next(iter(ms)) for a, ms in bound.items() if len(ms) == 1 and a not in branchy}
        if one:
            out.aliases[cname] = one
        init = next((m for m in c.body if isinstance(m, ast.FunctionDef)
                     and m.name == "__init__"), None)
        if init is not None:
            picks: dict[str, list[tuple[str, tuple[tuple[ast.expr, bool], ...]]]] = {}
            for n, tests in _if_paths(init.body):
                attr, meth = _self_attr(n.targets[0]), _self_attr(n.value)
                if attr in branchy and meth in bound.get(attr, ()):
                    picks.setdefault(attr, []).append((meth, tests))
            # every binding of the name is one of these (none under a loop, none elsewhere)
            whole = {a: tuple(ps) for a, ps in picks.items()
                     if {m for m, _ in ps} == bound[a] and len(ps) > 1}
            if whole:
                out.chosen[cname] = whole
        if copied:
            out.copied[cname] = copied
    return out


def method_of(objs: Objects, classes: dict[str, ast.ClassDef], holder: str, attr: str,
              meth: str) -> tuple[str, str] | None:
    """(class, method) a call `self.<attr>.<meth>(...)` in a method of `holder` runs, or None
    when the source does not say for certain."""
    cls = objs.held.get(holder, {}).get(attr)
    if cls is None or cls not in classes or meth in objs.chosen.get(cls, {}):
        return None  # a conditional alias shadows the method of its name (`choices`)
    name = objs.aliases.get(cls, {}).get(meth, meth)
    if any(isinstance(m, ast.FunctionDef) and m.name == name for m in classes[cls].body):
        return cls, name
    return None


def choices(objs: Objects, classes: dict[str, ast.ClassDef], holder: str, attr: str,
            meth: str) -> list[tuple[str, str, tuple[tuple[ast.expr, bool], ...]]]:
    """(class, method, tests) for each method a call `self.<attr>.<meth>(...)` may run where
    `meth` is an alias bound under an if chain (`Objects.chosen`); [] otherwise."""
    cls = objs.held.get(holder, {}).get(attr)
    if cls is None or cls not in classes:
        return []
    names = {m.name for m in classes[cls].body if isinstance(m, ast.FunctionDef)}
    picks = objs.chosen.get(cls, {}).get(meth, ())
    if not picks or any(m not in names for m, _ in picks):
        return []
    return [(cls, m, tests) for m, tests in picks]


def device_copies(objs: Objects, cls: str, backend_device: set[str]) -> set[str]:
    """The attributes `cls` copies in `__init__` from the backend that builds it (the parameter
    it passes itself as) that are device tensors there."""
    by = objs.built_by.get(cls)
    if by is None:
        return set()
    param = by[1]
    return {a for a, src in objs.copied.get(cls, {}).items()
            if src.split(".", 1)[0] == param and src.split(".", 1)[1] in backend_device}
