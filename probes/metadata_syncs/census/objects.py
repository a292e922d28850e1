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
this module, or of another attention module (imported; its methods are followed in their own
file, `reach._builders`), directly or through a factory method of the holder. An alias bound under an `if`/`elif` chain of `__init__` (0.5.23
flashinfer_backend.py:1615-1621: `self.update` is `update_sliding_window`,
`update_cross_attention` or `update_single_wrapper` by the backend's `dispatch_reason`) resolves
to every method it may bind, each with the tests that choose it as guards on the call
(`choices`), which the configuration then decides or leaves undecided.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

Tests = tuple[tuple[ast.expr, bool], ...]  # the (test, holds) of the ifs on the way


def _self_attr(t: ast.AST) -> str | None:
    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
        return t.attr
    return None


def _stmt_assigns(stmts: list[ast.stmt], tests: Tests = (), plain: bool = True
                  ) -> list[tuple[ast.Assign, Tests, bool]]:
    """Each one-target assignment among `stmts` and the statements nested in them (not in a
    nested def or class), with the `if` tests on the way and whether only `if`s lead to it
    (`plain`: not under a loop, `try` or `with`). Statements only: cheap beside a full walk."""
    out: list[tuple[ast.Assign, Tests, bool]] = []
    for st in stmts:
        if isinstance(st, ast.Assign) and len(st.targets) == 1:
            out.append((st, tests, plain))
        elif isinstance(st, ast.If):
            out += _stmt_assigns(st.body, (*tests, (st.test, True)), plain)
            out += _stmt_assigns(st.orelse, (*tests, (st.test, False)), plain)
        elif isinstance(st, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            out += _stmt_assigns(st.body + st.orelse if hasattr(st, "orelse") else st.body,
                                 tests, False)
        elif isinstance(st, ast.Try):
            for part in (st.body, st.orelse, st.finalbody, *(h.body for h in st.handlers)):
                out += _stmt_assigns(part, tests, False)
    return out


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}


class Objects:
    """What one module's classes hold, read per class when first asked (most classes never
    are): `held(B)[attr]` the class B's `self.attr` is built from; `aliases(C)[name]` the method
    C's `self.name` is bound to; `chosen(C)[name]` the methods an alias bound under an if chain
    may be, with the tests that choose each; `built_by[C]` the backend class that builds C and
    the parameter of C.__init__ it passes itself as; `copied(C)[attr]` the `param.attr` C's
    `__init__` copies."""

    def __init__(self, classes: dict[str, ast.ClassDef],
                 foreign: Callable[[str], bool] = lambda _: False) -> None:
        self.classes = classes
        self.foreign = foreign  # a name imported from another attention module's class
        self.built_by: dict[str, tuple[str, str]] = {}
        self._held: dict[str, dict[str, str]] = {}
        self._own: dict[str, tuple[dict[str, str], dict[str, tuple[tuple[str, Tests], ...]],
                                   dict[str, str]]] = {}

    def held(self, b: str) -> dict[str, str]:
        if b not in self._held:
            self._held[b] = self._read_held(b)
        return self._held[b]

    def _read_held(self, bname: str) -> dict[str, str]:
        b = self.classes.get(bname)
        if b is None:
            return {}
        seen: dict[str, set[str | None]] = {}
        for m in _methods(b).values():
            for n, _tests, _plain in _stmt_assigns(m.body):
                attr = _self_attr(n.targets[0])
                if attr is None:
                    continue
                v = n.value
                if isinstance(v, ast.Constant) and v.value is None:
                    continue  # `self.x = None` first, the object later: still one class
                made = self._made(b, v)
                seen.setdefault(attr, set()).add(made)
                if made is not None and made in self.classes:
                    self._note_builder(bname, made, v)
        return {a: next(iter(cs)) for a, cs in seen.items()  # type: ignore[misc]
                if len(cs) == 1 and None not in cs}

    def _made(self, b: ast.ClassDef, v: ast.AST, factory: bool = True) -> str | None:
        """The class `v` builds: `C(...)` of this module or one imported from another attention
        module, or (`factory`) `self._m(...)` whose every return builds one class or is None
        (0.5.23 flashattention_backend.py:241 `self.local_attn_builder =
        self._maybe_init_local_attn_builder(model_runner)`, returning None or
        `LocalAttentionMetadataBuilder(...)` of local_attention.py, :383-397)."""
        if not isinstance(v, ast.Call):
            return None
        if isinstance(v.func, ast.Name):
            name = v.func.id
            return name if name in self.classes or self.foreign(name) else None
        meth = _self_attr(v.func)
        m = _methods(b).get(meth or "")
        if not factory or m is None:
            return None
        if not hasattr(m, "_diag_made"):  # kept on the method: one read per factory
            rets = [r.value for r in ast.walk(m) if isinstance(r, ast.Return)]
            made = {self._made(b, r, False) for r in rets
                    if r is not None and not (isinstance(r, ast.Constant) and r.value is None)}
            m._diag_made = made.pop() if len(made) == 1 else None  # type: ignore[attr-defined]
        return m._diag_made  # type: ignore[attr-defined]

    def _note_builder(self, bname: str, made: str, call: ast.Call) -> None:
        init = _methods(self.classes[made]).get("__init__")
        params = [a.arg for a in init.args.args] if init is not None else []
        passed = [i for i, a in enumerate(call.args) if isinstance(a, ast.Name) and a.id == "self"]
        kw = [k.arg for k in call.keywords if isinstance(k.value, ast.Name)
              and k.value.id == "self" and k.arg]
        p = params[passed[0] + 1] if passed and passed[0] + 1 < len(params) else \
            (kw[0] if kw else None)
        if p is not None:
            self.built_by.setdefault(made, (bname, p))

    def own(self, cname: str) -> tuple[dict[str, str], dict[str, tuple[tuple[str, Tests], ...]],
                                       dict[str, str]]:
        """(aliases, chosen, copied) of class `cname`."""
        if cname not in self._own:
            self._own[cname] = self._read_own(cname)
        return self._own[cname]

    def _read_own(self, cname: str) -> tuple[dict[str, str],
                                             dict[str, tuple[tuple[str, Tests], ...]],
                                             dict[str, str]]:
        c = self.classes.get(cname)
        if c is None:
            return {}, {}, {}
        names = _methods(c)
        bound: dict[str, set[str]] = {}
        branchy: set[str] = set()
        picks: dict[str, list[tuple[str, Tests]]] = {}
        unplain: set[str] = set()
        copied: dict[str, str] = {}
        for fn in names.values():
            for n, tests, plain in _stmt_assigns(fn.body):
                attr = _self_attr(n.targets[0])
                if attr is None:
                    continue
                meth = _self_attr(n.value)
                if meth is not None and meth in names:
                    bound.setdefault(attr, set()).add(meth)
                    if tests or not plain:
                        branchy.add(attr)
                    if fn.name == "__init__" and plain:
                        picks.setdefault(attr, []).append((meth, tests))
                    else:
                        unplain.add(attr)
                elif fn.name == "__init__" and isinstance(n.value, ast.Attribute) and \
                        isinstance(n.value.value, ast.Name):
                    copied[attr] = f"{n.value.value.id}.{n.value.attr}"
        aliases = {a: next(iter(ms)) for a, ms in bound.items()
                   if len(ms) == 1 and a not in branchy}
        # every binding of the name is one of these: in __init__, under ifs only
        chosen = {a: tuple(ps) for a, ps in picks.items()
                  if a in branchy and a not in unplain and len(ps) > 1}
        return aliases, chosen, copied


def objects(classes: dict[str, ast.ClassDef],
            foreign: Callable[[str], bool] = lambda _: False) -> Objects:
    """The module's `Objects` (module docstring), read lazily."""
    return Objects(classes, foreign)


def held_class(objs: Objects, holder: str, attr: str) -> str | None:
    """The class `holder`'s `self.<attr>` holds, of this module or imported (`Objects.held`)."""
    return objs.held(holder).get(attr)


def method_of(objs: Objects, holder: str, attr: str, meth: str) -> tuple[str, str] | None:
    """(class, method) a call `self.<attr>.<meth>(...)` in a method of `holder` runs, or None
    when the source does not say for certain."""
    cls = objs.held(holder).get(attr)
    if cls is None or cls not in objs.classes:
        return None
    aliases, chosen, _ = objs.own(cls)
    if meth in chosen:
        return None  # a conditional alias shadows the method of its name (`choices`)
    name = aliases.get(meth, meth)
    return (cls, name) if name in _methods(objs.classes[cls]) else None


def choices(objs: Objects, holder: str, attr: str, meth: str
            ) -> list[tuple[str, str, Tests]]:
    """(class, method, tests) for each method a call `self.<attr>.<meth>(...)` may run where
    `meth` is an alias bound under an if chain (`Objects.own`); [] otherwise."""
    cls = objs.held(holder).get(attr)
    if cls is None or cls not in objs.classes:
        return []
    picks = objs.own(cls)[1].get(meth, ())
    names = _methods(objs.classes[cls])
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
    return {a for a, src in objs.own(cls)[2].items()
            if src.split(".", 1)[0] == param and src.split(".", 1)[1] in backend_device}


def held_call(f: ast.AST) -> tuple[str, str] | None:
    """(attr, meth) of a call's function `self.<attr>.<meth>`, else None."""
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) and \
            isinstance(f.value.value, ast.Name) and f.value.value.id == "self":
        return f.value.attr, f.attr
    return None
