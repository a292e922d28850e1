"""Calls through an object a backend holds: `self.indices_updater_prefill.update(...)`.

Why: attention backends hand part of their metadata build to helper objects they make in
`__init__` (0.5.23 aiter_backend.py:490 `self.indices_updater_prefill =
AiterIndicesUpdaterPrefill(model_runner, self)`), whose methods hold sync sites of their own
(aiter_backend.py:4973-4974, a device scalar used as a slice bound, on every non-MLA extend).
A call through such an attribute resolves to the holder class's method, or to the one method an
instance alias binds (`self.update = self.update_single_wrapper`, :4909). The helper object's
attributes copied from the backend that built it (`self.kv_indptr = attn_backend.kv_indptr`,
:4904, where the backend passed itself) are on the device where the backend's are.

Only what the source says for certain: an attribute every assignment of which builds the same
class of this module, an alias bound once and not under a branch (conditional aliases, as
flashinfer's `update` of three methods, are left unresolved: which one runs is a configuration
fact this module does not weigh).
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
        if copied:
            out.copied[cname] = copied
    return out


def method_of(objs: Objects, classes: dict[str, ast.ClassDef], holder: str, attr: str,
              meth: str) -> tuple[str, str] | None:
    """(class, method) a call `self.<attr>.<meth>(...)` in a method of `holder` runs, or None
    when the source does not say for certain."""
    cls = objs.held.get(holder, {}).get(attr)
    if cls is None or cls not in classes:
        return None
    name = objs.aliases.get(cls, {}).get(meth, meth)
    if any(isinstance(m, ast.FunctionDef) and m.name == name for m in classes[cls].body):
        return cls, name
    return None


def device_copies(objs: Objects, cls: str, backend_device: set[str]) -> set[str]:
    """The attributes `cls` copies in `__init__` from the backend that builds it (the parameter
    it passes itself as) that are device tensors there."""
    by = objs.built_by.get(cls)
    if by is None:
        return set()
    param = by[1]
    return {a for a, src in objs.copied.get(cls, {}).items()
            if src.split(".", 1)[0] == param and src.split(".", 1)[1] in backend_device}
