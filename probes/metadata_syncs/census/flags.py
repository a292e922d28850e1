"""Start-up flags inlined into the branch tests that read them.

Why: a backend fixes many switches once, in `__init__` or at import, from facts an audit can
decide: 0.5.23 aiter_backend.py:104-106 `_use_fp8_prefill_attn = get_bool_env_var(
"SGLANG_AITER_FP8_PREFILL_ATTN", "True") and is_gfx95_supported()`, :443-445
`self.use_fp8_prefill_attn = _use_fp8_prefill_attn and self.fp8_prefill_num_head is not None`,
then `if self.use_fp8_prefill_attn:` (:2542) in front of two `.item()` reads. Read as it
stands, that test is data (no input decides it, the site `depends`); read through its
definitions it holds the GPU arch and an environment switch, which decide it on an MI300 (gfx942:
false, the reads cannot run) and leave only the model's head count open on an MI355.

A flag is inlined only where it cannot change after start: a module name bound once, at the
module's top level, that no function declares `global`; a `self.<flag>` assigned once in the
backend's class chain (this module's classes), as a statement of `__init__` itself (not under a
branch or loop), and not a class attribute too. A flag whose definition holds no fact an input
decides stays as it is (its text is the clearer one). A negated conjunction of inlined parts
becomes one `any` guard over the negated parts (census.guards), data parts included: it holds
where one decided part holds.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diag.probes.metadata_syncs.census.wrapped import is_held
from diag.probes.source import Modules, index, inner, statements

# `is_gfx95_supported()`, `is_gfx942_supported()`, ...: sglang.srt.utils' arch tests
ARCH_CALL = re.compile(r"^is_gfx\w+_supported$")
# how deep a flag defined from flags is followed (aiter: self flag -> module flag -> calls)
_DEPTH = 3


# the scope of another module's definition: none of this module's names stand for its names
FOREIGN: frozenset[str] = frozenset({"<another module>"})


@dataclass
class Flag:
    expr: ast.expr
    line: int
    text: str  # `self.use_fp8_prefill_attn` / `_use_fp8_prefill_attn` / `is_unified_kv_triton()`
    home: ast.FunctionDef | None = None  # where it is defined (`__init__`; None: the module)
    rel: str | None = None  # its file, where not the builder's
    names: frozenset[str] | None = None  # FOREIGN: another module's definition

    @property
    def scope(self) -> frozenset[str]:
        """The names local to where it is defined (read when first asked)."""
        if self.names is not None:
            return self.names
        return _locals(self.home) if self.home is not None else frozenset()


def module_flags(tree: ast.Module) -> dict[str, Flag]:
    """Top-level `NAME = expr` bound once in the module, never declared `global` (kept on the
    tree)."""
    got = getattr(tree, "_diag_mod_flags", None)
    if got is not None:
        return got
    binds: dict[str, list[ast.stmt]] = {}
    for st in tree.body:
        for name in _bound(st):
            binds.setdefault(name, []).append(st)
    text = getattr(tree, "_diag_source", None)  # (source.parse_text keeps it)
    globals_ = {n for st in statements(tree) if isinstance(st, ast.Global) for n in st.names} \
        if text is None or "global " in text else set()
    out = {}
    for name, sts in binds.items():
        st = sts[0]
        if len(sts) == 1 and name not in globals_ and _plain_assign(st, name):
            out[name] = Flag(st.value, st.lineno, name)  # type: ignore[union-attr]
    tree._diag_mod_flags = out  # type: ignore[attr-defined]
    return out


def _bound(st: ast.stmt) -> set[str]:
    """Names a top-level statement binds (assignments, imports, defs, loops, ...)."""
    if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {st.name}
    if isinstance(st, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in st.names}
    return {n.id for n in ast.walk(st) if isinstance(n, ast.Name)
            and isinstance(n.ctx, (ast.Store, ast.Del))}


def _plain_assign(st: ast.stmt, name: str) -> bool:
    if isinstance(st, ast.Assign):
        return len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and \
            st.targets[0].id == name
    return isinstance(st, ast.AnnAssign) and st.value is not None and \
        isinstance(st.target, ast.Name)


def _targets(st: ast.AST) -> list[ast.AST]:
    """What a statement stores to or deletes, tuples and starred targets unpacked."""
    if isinstance(st, ast.Assign):
        raw = list(st.targets)
    elif isinstance(st, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
        raw = [st.target]
    elif isinstance(st, ast.Delete):
        raw = list(st.targets)
    elif isinstance(st, (ast.With, ast.AsyncWith)):
        raw = [i.optional_vars for i in st.items if i.optional_vars is not None]
    else:
        return []
    out = []
    while raw:
        t = raw.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            raw.extend(t.elts)
        elif isinstance(t, ast.Starred):
            raw.append(t.value)
        else:
            out.append(t)
    return out


def _self_store(n: ast.AST) -> str | None:
    if isinstance(n, ast.Attribute) and isinstance(n.ctx, (ast.Store, ast.Del)) and \
            isinstance(n.value, ast.Name) and n.value.id == "self":
        return n.attr
    return None


def _locals(fn: ast.FunctionDef) -> frozenset[str]:
    """The names `fn` binds: its parameters and every name it stores (kept on the node)."""
    got = getattr(fn, "_diag_bound", None)
    if got is None:
        got = fn._diag_bound = _bound_in(fn)  # type: ignore[attr-defined]
    return got


def _bound_in(fn: ast.FunctionDef) -> frozenset[str]:
    a = fn.args
    params = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}
    params |= {p.arg for p in (a.vararg, a.kwarg) if p is not None}
    # (`inner`: the walk the census keeps on the function, shared with its other readers)
    return frozenset(params | {n.id for n in inner(fn) if type(n) is ast.Name
                               and type(n.ctx) is not ast.Load})


_STORES = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Delete, ast.For, ast.AsyncFor, ast.With,
           ast.AsyncWith)


def store_index(tree: ast.Module) -> tuple[dict[str, dict[str, int]], frozenset[str]]:
    """(per top-level class, how often its methods store each `self.<a>`; the attribute names
    the module stores on anything but `self`, `backend.flag = ...`, which no flag may be), from
    one pass over the module's statements (kept on the tree)."""
    got = getattr(tree, "_diag_stores", None)
    if got is not None:
        return got
    per_class: dict[str, dict[str, int]] = {}
    foreign: set[str] = set()
    for top in tree.body:
        counts = per_class.setdefault(top.name, {}) if isinstance(top, ast.ClassDef) else None
        for st in statements(top):
            if not isinstance(st, _STORES):
                continue
            for t in _targets(st):
                if not isinstance(t, ast.Attribute):
                    continue
                a = _self_store(t)
                if a is None:
                    foreign.add(t.attr)
                elif counts is not None:
                    counts[a] = counts.get(a, 0) + 1
    got = tree._diag_stores = (per_class, frozenset(foreign))  # type: ignore[attr-defined]
    return got


def class_flags(classes: dict[str, ast.ClassDef], backend: str, tree: ast.Module
                ) -> dict[str, Flag]:
    """`self.<flag>` of `backend`'s class chain (its bases defined in this module) assigned once,
    at the top level of an `__init__`, nowhere else (nor stored on another object anywhere in
    the module: `store_index`), and not a class attribute (kept on the class)."""
    cls = classes.get(backend)
    if cls is None:
        return {}
    got = getattr(cls, "_diag_flags", None)
    if got is not None:
        return got
    chain, todo = [], [backend]
    while todo:
        c = classes.get(todo.pop(0))
        if c is None or c in chain:
            continue
        chain.append(c)
        todo += [b.id for b in c.bases if isinstance(b, ast.Name)]
    per_class, foreign = store_index(tree)
    stores: dict[str, int] = {}
    class_attrs: set[str] = set()
    for c in chain:
        for st in c.body:
            if not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                class_attrs |= _bound(st)
        for a, n in per_class.get(c.name, {}).items():
            stores[a] = stores.get(a, 0) + n
    out: dict[str, Flag] = {}
    for c in chain:
        init = next((m for m in c.body if isinstance(m, ast.FunctionDef)
                     and m.name == "__init__"), None)
        if init is None:
            continue
        for st in init.body:
            one = _one_store(st)
            if one is not None:
                a, value, n = one[0], one[1], 1
            elif (both := _either_store(st)) is not None:
                a, value, n = both[0], both[1], 2
            else:
                continue
            if stores.get(a) == n and a not in class_attrs and a not in foreign and \
                    a not in out:
                out[a] = Flag(value, st.lineno, f"self.{a}", init)
    cls._diag_flags = out  # type: ignore[attr-defined]
    return out


def _one_store(st: ast.stmt) -> tuple[str, ast.expr] | None:
    """`self.a = v` / `self.a: T = v`: (a, v)."""
    target = st.targets[0] if isinstance(st, ast.Assign) and len(st.targets) == 1 \
        else st.target if isinstance(st, ast.AnnAssign) and st.value is not None else None
    a = _self_store(target) if target is not None else None
    return (a, st.value) if a else None  # type: ignore[attr-defined]


def _either_store(st: ast.stmt) -> tuple[str, ast.expr] | None:
    """`if c: self.a = x` / `else: self.a = y`, one statement each (0.5.23 aiter_backend.py:529-534
    `self.use_triton_unified_attention = True` under `if self.use_sliding_window_kv_pool:`, else
    `get_bool_env_var("SGLANG_USE_AITER_UNIFIED_ATTN")`): (a, the test it equals), a constant
    arm folded (`c or y`), else `(c and x) or (not c and y)`."""
    if not (isinstance(st, ast.If) and len(st.body) == 1 and len(st.orelse) == 1):
        return None
    x, y = _one_store(st.body[0]), _one_store(st.orelse[0])
    if x is None or y is None or x[0] != y[0]:
        return None
    c, xv, yv = st.test, x[1], y[1]

    def lit(v: ast.expr) -> bool | None:
        return v.value if isinstance(v, ast.Constant) and isinstance(v.value, bool) else None

    def neg(e: ast.expr) -> ast.expr:
        return ast.copy_location(ast.UnaryOp(ast.Not(), e), e)

    def op(kind: ast.boolop, *vals: ast.expr) -> ast.expr:
        return ast.copy_location(ast.BoolOp(kind, list(vals)), st)

    lx, ly = lit(xv), lit(yv)
    if lx is not None and ly is not None:
        value = c if lx and not ly else neg(c) if ly and not lx else xv
    elif lx is True:
        value = op(ast.Or(), c, yv)
    elif lx is False:
        value = op(ast.And(), neg(c), yv)
    elif ly is True:
        value = op(ast.Or(), neg(c), xv)
    elif ly is False:
        value = op(ast.And(), c, xv)
    else:
        value = op(ast.Or(), op(ast.And(), c, xv), op(ast.And(), neg(c), yv))
    return x[0], value


@dataclass
class FnFlags:
    """The flags a builder's tests may read: its class chain's (when `self` is the backend) and
    its module's, less the names it binds itself."""

    read_selfs: Callable[[], dict[str, Flag]]
    read_mods: Callable[[], dict[str, Flag]]
    fn: ast.FunctionDef
    rel: str
    # a zero-argument function whose body is one `return <test>`, by the name a call uses
    # (this module's or one it imports: `function_flag`); None: not read
    read_fn: Callable[[str], Flag | None] = lambda name: None
    memo: dict[int, tuple[ast.AST, ast.AST, tuple[str, ...]]] = field(default_factory=dict)
    _local: frozenset[str] | None = None
    _selfs: dict[str, Flag] | None = None
    _mods: dict[str, Flag] | None = None

    @property
    def selfs(self) -> dict[str, Flag]:
        """The class chain's flags, read when a test first names `self.<x>`."""
        if self._selfs is None:
            self._selfs = self.read_selfs()
        return self._selfs

    @property
    def mods(self) -> dict[str, Flag]:
        """The module's flags, read when a test first names a bare name."""
        if self._mods is None:
            self._mods = self.read_mods()
        return self._mods

    @property
    def local(self) -> frozenset[str]:
        """The names the builder binds itself (read once, when a test names a module flag)."""
        if self._local is None:
            self._local = _locals(self.fn)
        return self._local

    def inline(self, test: ast.AST, recognised: Callable[[ast.AST], bool]
               ) -> tuple[ast.AST, tuple[str, ...]]:
        """(the test with each inlinable flag replaced by its definition, the flags replaced as
        `text (file:line)`); `recognised(atom)`: an atom census.guards decides as it stands
        (never replaced)."""
        hit = self.memo.get(id(test))
        if hit is None or hit[0] is not test:  # (the node kept with it: an id is reused)
            used: list[str] = []
            new = self._sub(test, None, 0, recognised, used)
            hit = self.memo[id(test)] = (test, new, tuple(dict.fromkeys(used)))
        return hit[1], hit[2]

    def _flag(self, e: ast.AST, local: frozenset[str] | None) -> Flag | None:
        """`local`: the names bound where `e` stands (None: the builder's own, read lazily;
        `FOREIGN`: another module's, whose names this module's flags never stand for)."""
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and \
                e.value.id == "self":
            return self.selfs.get(e.attr) if local is not FOREIGN else None
        if local is FOREIGN:
            return None
        if isinstance(e, ast.Name) and e.id in self.mods and \
                e.id not in (self.local if local is None else local):
            return self.mods[e.id]
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and not e.args and \
                not e.keywords and e.func.id not in (self.local if local is None else local):
            return self.read_fn(e.func.id)
        return None

    def _sub(self, e: ast.AST, local: frozenset[str] | None, depth: int,
             recognised: Callable[[ast.AST], bool], used: list[str]) -> ast.AST:
        if isinstance(e, ast.BoolOp):
            vals = [self._sub(v, local, depth, recognised, used) for v in e.values]
            if all(a is b for a, b in zip(vals, e.values, strict=True)):
                return e
            out = ast.copy_location(ast.BoolOp(e.op, vals), e)
            out._diag_flag = True  # type: ignore[attr-defined]
            return out
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            v = self._sub(e.operand, local, depth, recognised, used)
            return e if v is e.operand else ast.copy_location(ast.UnaryOp(ast.Not(), v), e)
        if depth >= _DEPTH or (isinstance(e, ast.Call) and recognised(e)):
            return e
        if (none_test := self._none_test(e, local, depth, recognised, used)) is not None:
            return none_test
        f = self._flag(e, local)
        if f is None or recognised(e):  # an atom census.guards decides as it stands stays
            return e
        deeper: list[str] = []
        # names in a self flag's definition are `__init__`'s locals or the module's
        new = self._sub(f.expr, f.scope, depth + 1, recognised, deeper)
        if not _decides(new, recognised):
            return e
        used.append(f"{f.text} ({f.rel or self.rel}:{f.line})")
        used.extend(deeper)
        if isinstance(new, ast.BoolOp) and not getattr(new, "_diag_flag", False):
            new = ast.copy_location(ast.BoolOp(new.op, list(new.values)), new)
            new._diag_flag = True  # type: ignore[attr-defined]
        return new

    def _none_test(self, e: ast.AST, local: frozenset[str] | None, depth: int,
                   recognised: Callable[[ast.AST], bool], used: list[str]) -> ast.AST | None:
        """`flag is not None` where the flag is `A if c else None` (0.5.23 aiter_backend.py:
        432-441 `self.fp8_prefill_num_head = (self.check_fp8_prefill_num_head(...) if
        self.use_mla else None)`): `c and A is not None` (`is None`: `not c or A is None`);
        None where `e` is no such test or `c` decides nothing."""
        if not (isinstance(e, ast.Compare) and len(e.ops) == 1 and
                isinstance(e.left, (ast.Attribute, ast.Name)) and
                isinstance(e.ops[0], (ast.Is, ast.IsNot)) and
                isinstance(e.comparators[0], ast.Constant) and e.comparators[0].value is None):
            return None
        f = self._flag(e.left, local)
        x = f.expr if f is not None else None
        if not (isinstance(x, ast.IfExp) and isinstance(x.orelse, ast.Constant) and
                x.orelse.value is None):
            return None
        deeper: list[str] = []
        c = self._sub(x.test, f.scope, depth + 1, recognised, deeper)  # type: ignore[union-attr]
        if not _decides(c, recognised):
            return None
        a = ast.copy_location(ast.Compare(x.body, [e.ops[0]], [e.comparators[0]]), e)
        if isinstance(e.ops[0], ast.IsNot):
            out = ast.BoolOp(ast.And(), [c, a])
        else:
            out = ast.BoolOp(ast.Or(), [ast.copy_location(ast.UnaryOp(ast.Not(), c), e), a])
        out = ast.copy_location(out, e)
        out._diag_flag = True  # type: ignore[attr-defined]
        used.append(f"{f.text} ({f.rel or self.rel}:{f.line})")  # type: ignore[union-attr]
        used.extend(deeper)
        return out


def _decides(e: ast.AST, recognised: Callable[[ast.AST], bool]) -> bool:
    """Whether some boolean atom of `e` is one census.guards decides."""
    if isinstance(e, ast.BoolOp):
        return any(_decides(v, recognised) for v in e.values)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        return _decides(e.operand, recognised)
    return recognised(e)


def fn_flags(tree: ast.Module, classes: dict[str, ast.ClassDef], backend: str,
             fn: ast.FunctionDef, rel: str, defining: str | None,
             modules: Modules | None = None) -> FnFlags:
    """The flags `fn` (a function of this module; `defining`: the class it is a method of) may
    read: `self` is the backend only where `fn` is a method of the backend's chain."""
    mine = defining is not None and is_held(classes, backend, defining)  # (its chain)
    return FnFlags((lambda: class_flags(classes, backend, tree)) if mine
                   else dict,
                   lambda: module_flags(tree), fn, rel,
                   lambda name: function_flag(tree, rel, name, modules))


def function_flag(tree: ast.Module, rel: str, name: str, modules: Modules | None
                  ) -> Flag | None:
    """`name()` where `name` is a function of this module, or one it imports from sglang
    (`Modules.resolve`, lazy imports too), that takes no argument and whose body is one
    `return <test>` (a docstring aside; `@lru_cache` or not): 0.5.23
    dsv4/unified_kv_gate.py:12-15 `is_unified_kv_triton()` returns `is_hip() and
    envs.SGLANG_HACK_FLASHMLA_BACKEND.get() == "unified_kv_triton"`. Another module's test is
    read without its names (`FOREIGN`). Kept on the tree per name."""
    memo = getattr(tree, "_diag_fn_flags", None)
    if memo is None:
        memo = tree._diag_fn_flags = {}  # type: ignore[attr-defined]
    if name in memo:
        return memo[name]
    idx = index(tree)
    node, where, home = idx.funcs.get(name), rel, None
    # only the attention package's modules, which the census parses anyway: a helper of
    # `sglang.srt.utils` (`get_global_server_args()`) is not one, and would cost a parse
    if node is None and modules is not None and \
            idx.imports.get(name, "").startswith("sglang.srt.layers.attention"):
        bound = modules.resolve(idx, name)
        if bound is not None and isinstance(bound.node, ast.FunctionDef):
            node, where, home = bound.node, modules.relpath(bound.path), FOREIGN
    out = None
    a = node.args if node is not None else None
    if a is not None and not (a.posonlyargs or a.args or a.kwonlyargs or a.vararg or a.kwarg):
        body = [st for st in node.body if not (isinstance(st, ast.Expr) and  # type: ignore[union-attr]
                                               isinstance(st.value, ast.Constant))]
        if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
            out = Flag(body[0].value, body[0].lineno, f"{name}()", None, where, home)
    memo[name] = out
    return out


VIA = " [read through "


def via_note(used: tuple[str, ...]) -> str:
    """What a guard's text gets when a flag's definition brought it in."""
    return f"{VIA}{', '.join(used)}]" if used else ""


def env_read(e: Any) -> tuple[str, str, str | None] | None:
    """(name, reader, default) of a boolean environment read: `get_bool_env_var("N")` /
    `get_bool_env_var("N", "True")` (reader `get_bool_env_var`, default its literal, else the
    function's own "false": 0.5.23 utils/common.py:1424), `envs.N.get()` (reader `envs`, default
    None: census.count fills in the release's `N = EnvBool(...)`)."""
    if not isinstance(e, ast.Call):
        return None
    f = e.func
    if isinstance(f, ast.Name) and f.id == "get_bool_env_var" and not e.keywords and \
            1 <= len(e.args) <= 2 and all(isinstance(a, ast.Constant) and
                                          isinstance(a.value, str) for a in e.args):
        default = e.args[1].value if len(e.args) == 2 else "false"  # type: ignore[attr-defined]
        return e.args[0].value, "get_bool_env_var", default  # type: ignore[attr-defined]
    if isinstance(f, ast.Attribute) and f.attr == "get" and not e.args and not e.keywords and \
            isinstance(f.value, ast.Attribute) and isinstance(f.value.value, ast.Name) and \
            f.value.value.id == "envs" and f.value.attr.isupper():
        return f.value.attr, "envs", None
    return None


def arch_call(e: Any) -> str | None:
    """`is_gfx95_supported()` -> its name; else None."""
    if isinstance(e, ast.Call) and not e.args and not e.keywords:
        f = e.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
            else ""
        if ARCH_CALL.match(name):
            return name
    return None
