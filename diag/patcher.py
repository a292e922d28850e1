"""One patching mechanism for every fix.

A `Patch` is the set of attribute replacements one fix makes. It resolves every target before it
touches any (never half-applied), keeps the exact original objects (read from `__dict__`, so
classmethod/staticmethod survive), marks its replacements, re-binds other modules' `from X import
f` copies of replaced module functions, patches modules that are not imported yet when they are
imported (wrapt's post-import hooks), and reverts to the identical originals.

`rewrite_function` is the source-level tool: it re-compiles a function from its installed source
after an AST transform, checking first that the source still compiles to the loaded code.
"""

from __future__ import annotations

import ast
import copy
import inspect
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MARK = "__diag_patch__"
_lock = threading.RLock()
_waiting: dict[str, list[Patch]] = {}  # module name -> patches waiting for its import
_hooked: set[str] = set()
_stacks: dict[tuple[int, str], list[Patch]] = {}  # (owner, attribute) -> patches, oldest first


class PatchError(Exception):
    """The code to patch is missing or does not have the expected shape."""


@dataclass
class _Entry:
    module: str
    qualname: str
    make: Callable[[Callable], Callable]
    rebind: bool = False


@dataclass
class _Done:
    owner: Any
    name: str
    original: Any  # the raw __dict__ value (descriptor included)
    replacement: Any
    rebinds: list[tuple[Any, str, Any]] | None = None


def _resolve(module: types.ModuleType, qualname: str) -> tuple[Any, str, Any]:
    owner: Any = module
    parts = qualname.split(".")
    for part in parts[:-1]:
        try:
            owner = vars(owner)[part]
        except KeyError:
            raise PatchError(f"{module.__name__}.{qualname}: {part!r} not found") from None
    name = parts[-1]
    raw = vars(owner).get(name)
    if raw is None:
        raise PatchError(f"{module.__name__}.{qualname} not found")
    return owner, name, raw


def _unwrap_descriptor(raw: Any) -> tuple[Callable, Callable[[Callable], Any]]:
    if isinstance(raw, staticmethod):
        return raw.__func__, staticmethod
    if isinstance(raw, classmethod):
        return raw.__func__, classmethod
    return raw, lambda f: f


def marked(obj: Any, patch_id: str | None = None) -> bool:
    fn = obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj
    mark = getattr(fn, MARK, None)
    return mark is not None and (patch_id is None or mark == patch_id)


def patched_by(obj: Any, patch_id: str) -> bool:
    """Whether `obj` or a function it wraps (the `__wrapped__` chain) carries `patch_id`'s mark:
    a patch stays in effect under a wrapper another patch stacked over it later."""
    for _ in range(16):
        if obj is None:
            return False
        if marked(obj, patch_id):
            return True
        obj = getattr(_plain(obj), "__wrapped__", None)
    return False


class Patch:
    """The replacements of one fix, applied and reverted as a unit."""

    def __init__(self, patch_id: str) -> None:
        self.id = patch_id
        self.entries: list[_Entry] = []
        self.done: list[_Done] = []
        self.wanted = False
        self.errors: list[str] = []  # failures of deferred (on-import) application
        self.on_applied: list[Callable[[str], None]] = []

    def add(self, module: str, qualname: str, make: Callable[[Callable], Callable],
            rebind: bool = False) -> Patch:
        """Replace `module.qualname` (a function or method) by `make(original_function)`."""
        self.entries.append(_Entry(module, qualname, make, rebind))
        return self

    @property
    def modules(self) -> list[str]:
        return sorted({e.module for e in self.entries})

    @property
    def applied(self) -> bool:
        return bool(self.done)

    @property
    def pending(self) -> list[str]:
        done = {d.owner.__name__ if isinstance(d.owner, types.ModuleType) else None
                for d in self.done}
        return [m for m in self.modules if self.wanted and m not in sys.modules and m not in done]

    def apply(self) -> None:
        """Patch loaded modules now (all or nothing) and the others when they are imported."""
        with _lock:
            if self.wanted:
                return
            loaded = [m for m in self.modules if m in sys.modules]
            self._apply_modules(loaded)  # raises PatchError before changing anything
            self.wanted = True
            for m in self.modules:
                if m not in loaded:
                    _waiting.setdefault(m, []).append(self)
                    if m not in _hooked:
                        # imported here: wrapt's import (asyncio, importlib.metadata) costs
                        # ~30 ms, and `diag diagnose` judges the fixes without applying one
                        import wrapt

                        _hooked.add(m)
                        wrapt.register_post_import_hook(_on_import, m)

    def revert(self) -> None:
        """Restore the identical original objects; forget any pending on-import patching.

        A patch applied later on the same attribute (e.g. a counter over a fix) wraps this
        one's replacement: it is taken off, this one reverted, and it is put back on the
        original, so reverting the lower patch really removes it.
        """
        with _lock:
            self.wanted = False
            for waiting in _waiting.values():
                if self in waiting:
                    waiting.remove(self)
            above = self._patches_above()
            for p in reversed(above):
                p._undo()
            self._undo()
            for p in above:
                p._apply_modules([m for m in p.modules if m in sys.modules])

    def _patches_above(self) -> list[Patch]:
        out: list[Patch] = []
        for d in self.done:
            stack = _stacks.get((id(d.owner), d.name), [])
            if self in stack:
                out += [p for p in stack[stack.index(self) + 1:] if p not in out]
        return sorted(out, key=lambda p: min(_stacks_order(p)))

    def _undo(self) -> None:
        for d in reversed(self.done):
            if vars(d.owner).get(d.name) is d.replacement:
                setattr(d.owner, d.name, d.original)
            if d.rebinds is not None:  # copies taken before or after the patch
                _rebind(_plain(d.replacement), d.original, skip=d.owner)
            stack = _stacks.get((id(d.owner), d.name), [])
            if self in stack:
                stack.remove(self)
        self.done.clear()

    def _apply_modules(self, names: list[str]) -> None:
        plan: list[tuple[_Entry, Any, str, Any, Any]] = []
        for e in self.entries:
            if e.module not in names:
                continue
            owner, name, raw = _resolve(sys.modules[e.module], e.qualname)
            if marked(raw, self.id):
                continue  # already ours: idempotent
            func, rewrap = _unwrap_descriptor(raw)
            if not callable(func):
                raise PatchError(f"{e.module}.{e.qualname} is not callable")
            new = e.make(func)
            setattr(new, MARK, self.id)
            plan.append((e, owner, name, raw, rewrap(new)))
        for e, owner, name, raw, new in plan:
            done = _Done(owner, name, raw, new)
            setattr(owner, name, new)
            _stacks.setdefault((id(owner), name), []).append(self)
            if e.rebind and isinstance(owner, types.ModuleType):
                done.rebinds = _rebind(raw, _plain(new), skip=owner)
            self.done.append(done)
        for e in {p[0].module for p in plan}:
            for cb in self.on_applied:
                cb(e)


def _stacks_order(p: Patch) -> list[int]:
    """Where `p` sits in the stacks it is on (lower first), to re-apply in the same order."""
    return [stack.index(p) for stack in _stacks.values() if p in stack] or [0]


def _plain(obj: Any) -> Any:
    return obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj


def _rebind(original: Any, new: Any, skip: Any) -> list[tuple[Any, str, Any]]:
    """Other modules that did `from X import f` hold their own reference: point them at `new`."""
    out = []
    for mod in list(sys.modules.values()):
        if mod is None or mod is skip:
            continue
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for attr, val in items:
            if val is original:
                setattr(mod, attr, new)
                out.append((mod, attr, original))
    return out


def _on_import(module: types.ModuleType) -> None:
    with _lock:
        for patch in list(_waiting.get(module.__name__, [])):
            _waiting[module.__name__].remove(patch)
            if not patch.wanted:
                continue
            try:
                patch._apply_modules([module.__name__])
            except Exception as e:  # never break the user's import
                patch.errors.append(f"{module.__name__}: {type(e).__name__}: {e}")


# ----------------------------------------------------------------------------- source rewriting


def find_def(tree: ast.AST, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    node: ast.AST = tree
    for part in qualname.split("."):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    child.name == part:
                node = child
                break
        else:
            raise PatchError(f"{qualname}: {part!r} not found in the source")
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise PatchError(f"{qualname} is not a function in the source")
    return node


def _find_code(module_code: types.CodeType, qualname: str, lineno: int) -> types.CodeType | None:
    last = qualname.rsplit(".", 1)[-1]
    stack = [module_code]
    while stack:
        for c in stack.pop().co_consts:
            if isinstance(c, types.CodeType):
                if getattr(c, "co_qualname", qualname) == qualname and c.co_name == last \
                        and c.co_firstlineno == lineno:
                    return c
                stack.append(c)
    return None


def _same_code(a: types.CodeType, b: types.CodeType) -> bool:
    if (a.co_code, a.co_names, a.co_varnames, a.co_freevars) != \
            (b.co_code, b.co_names, b.co_varnames, b.co_freevars):
        return False
    ca = [c for c in a.co_consts if isinstance(c, types.CodeType)]
    cb = [c for c in b.co_consts if isinstance(c, types.CodeType)]
    return len(ca) == len(cb) and all(_same_code(x, y) for x, y in zip(ca, cb))


def rewrite_function(func: Callable, qualname: str,
                     transform: Callable[[ast.FunctionDef], ast.FunctionDef],
                     source: str | None = None, filename: str | None = None) -> Callable:
    """Re-compile `func` from its source after `transform`, with its own globals and closure.

    Raises PatchError when the source on disk no longer compiles to the loaded code (the
    installed file was edited, or another patch replaced the function).
    """
    func = inspect.unwrap(func) if hasattr(func, "__wrapped__") and not hasattr(func, "__code__") \
        else func
    code = func.__code__
    filename = filename or code.co_filename
    if source is None:
        try:
            with open(filename, encoding="utf-8") as fh:
                source = fh.read()
        except OSError as e:
            raise PatchError(f"cannot read the source of {qualname}: {e}") from None
    # The whole module is compiled so the function keeps its context (class cell, imports).
    tree = ast.parse(source, filename)
    node = find_def(tree, qualname)
    lineno = code.co_firstlineno
    original = _find_code(compile(tree, filename, "exec"), qualname, lineno)
    if original is None or not _same_code(original, code):
        raise PatchError(f"{qualname}: the source in {filename} does not match the loaded code")
    new_node = transform(copy.deepcopy(node))
    parent = _parent_body(tree, node)
    parent[parent.index(node)] = new_node
    ast.fix_missing_locations(tree)
    new_code = _find_code(compile(tree, filename, "exec"), qualname, lineno)
    if new_code is None or new_code.co_freevars != code.co_freevars:
        raise PatchError(f"{qualname}: the rewritten function changes its closure")
    if len(new_node.args.defaults) != len(node.args.defaults):
        raise PatchError(f"{qualname}: the rewrite changes the positional defaults")
    new = types.FunctionType(new_code, func.__globals__, func.__name__, func.__defaults__,
                             func.__closure__)
    new.__kwdefaults__ = _kwdefaults(func, new_node, qualname, filename)
    new.__module__ = func.__module__
    new.__qualname__ = func.__qualname__
    new.__doc__ = func.__doc__
    new.__dict__.update(func.__dict__)
    new.__wrapped__ = func
    return new


def _kwdefaults(func: Callable, node: ast.FunctionDef, qualname: str, filename: str
                ) -> dict[str, Any] | None:
    """Keyword-only defaults of the rewritten def: the original objects for the parameters it
    had, new ones evaluated in the function's globals for parameters the transform added."""
    old = func.__kwdefaults__ or {}
    out: dict[str, Any] = {}
    for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults):
        if default is None:
            continue
        if arg.arg in old:
            out[arg.arg] = old[arg.arg]
            continue
        try:
            expr = compile(ast.Expression(default), filename, "eval")
            out[arg.arg] = eval(expr, func.__globals__)  # noqa: S307 - our own transform's AST
        except Exception as e:
            raise PatchError(f"{qualname}: cannot evaluate the default of the new parameter "
                             f"{arg.arg!r}: {type(e).__name__}: {e}") from None
    return out or None


def _parent_body(tree: ast.AST, node: ast.AST) -> list:
    for parent in ast.walk(tree):
        body = getattr(parent, "body", None)
        if isinstance(body, list) and any(child is node for child in body):
            return body
    raise PatchError("internal: function node has no parent")
