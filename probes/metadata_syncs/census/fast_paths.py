"""GPU fast paths: a backend method that asks whether its device kernels can serve a batch, true
on every GPU diag audits, so that the host fallback after `if self.<m>(...): ...; return`
cannot run there.

Why: QSA's graph replay (sglang 0.5.20-0.5.23) first tries `_can_replay_with_gpu_kernels` and
returns; only after it comes "Host-fallback staging only (non-CUDA pools) ... never the serving
path" with a `seq_lens[:bs].cpu()` (0.5.23 qwen_sparse_attn_backend.py:1015-1031) and the host
layout that calls `repeat_interleave` (:1034 -> :455). Counted as live, those are syncs a GPU
server never makes. The method is recognised by its shape, and each of its tests is decided
from the source, never from a table kept here:

- `self.A is None: return False`, where the class sets `self.A` while it captures a graph (a
  replay follows its capture);
- `<tensor>.is_cuda` of a batch tensor: true on a GPU (ROCm's torch reports `cuda` too);
- a helper `torch.device(d).type == "cuda" and isinstance(pool, C)`: the device as above; the
  pool is a C where the class reads from its pool an attribute that only C sets (the only
  `self.<attr> =` under sglang/srt/mem_cache is in C's class).

Anything else in the method, or a part not found, leaves it undecided (both ways, as before).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from diag.probes.source import ModuleIndex, Modules, parse_file, unparse, walk_all


def _body(fn: ast.FunctionDef) -> list[ast.stmt]:
    """The statements that decide: no docstring, no (lazy) import."""
    out = [s for s in fn.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
    if out and isinstance(out[0], ast.Expr) and isinstance(out[0].value, ast.Constant):
        out = out[1:]
    return out


def _self_attr(e: ast.AST) -> str | None:
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return e.attr
    return None


def _set_at_capture(cls: ast.ClassDef, attr: str) -> tuple[str, int] | None:
    """(method, line): where a capture method of the class sets `self.<attr>`."""
    for m in cls.body:
        if isinstance(m, ast.FunctionDef) and "capture" in m.name:
            for n in walk_all(m):
                if isinstance(n, ast.Assign) and any(_self_attr(t) == attr for t in n.targets):
                    return m.name, n.lineno
    return None


def _is_cuda_type(e: ast.AST) -> bool:
    """`torch.device(d).type == "cuda"`."""
    return isinstance(e, ast.Compare) and len(e.ops) == 1 and isinstance(e.ops[0], ast.Eq) \
        and isinstance(e.comparators[0], ast.Constant) and e.comparators[0].value == "cuda" \
        and isinstance(e.left, ast.Attribute) and e.left.attr == "type" \
        and unparse(e.left.value).startswith("torch.device(")


class _Reader:
    def __init__(self, tree: ast.Module, rel: str, modules: Modules | None) -> None:
        self.tree, self.rel, self.modules = tree, rel, modules
        self.here = ModuleIndex(tree)
        self._only: dict[tuple[str, str], bool] = {}

    def _only_setter(self, cls_path: str, cls_name: str, attr: str) -> bool:
        """Whether, of every pool module under sglang/srt/mem_cache, only `cls_name` in
        `cls_path` sets `self.<attr>`."""
        key = (cls_name, attr)
        if key not in self._only:
            assert self.modules is not None
            base = self.modules.target.file("srt/mem_cache")
            pat = re.compile(rf"\bself\.{re.escape(attr)}\s*=[^=]")
            needle = f"self.{attr}"  # a plain find first: the regex alone costs ~70 ms here
            files = [p for p in base.rglob("*.py")
                     if needle in (text := p.read_text(encoding="utf-8", errors="replace"))
                     and pat.search(text)] if base.is_dir() else []
            ok = [p.resolve() for p in files] == [Path(cls_path).resolve()]
            if ok:
                tree = parse_file(Path(cls_path))  # the shared, cached parse
                owners = {c.name for c in (tree.body if tree else []) if isinstance(
                    c, ast.ClassDef) and any(
                    isinstance(n, ast.Assign) and any(_self_attr(t) == attr for t in n.targets)
                    for n in walk_all(c))}
                ok = owners == {cls_name}
            self._only[key] = ok
        return self._only[key]

    def _pool_is(self, cls: ast.ClassDef, pool: ast.AST, kind: ast.AST,
                 mod: ModuleIndex) -> str | None:
        """Where the class proves its pool is `kind`: a read `self.<pool>.<attr>` of an
        attribute only that pool class sets."""
        if self.modules is None or not isinstance(kind, ast.Name):
            return None
        bound = self.modules.resolve(mod, kind.id)
        if bound is None or not isinstance(bound.node, ast.ClassDef):
            return None
        pool_name = pool.attr if isinstance(pool, ast.Attribute) else getattr(pool, "id", "")
        for n in walk_all(cls):
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and \
                    _self_attr(n.value) == pool_name and \
                    self._only_setter(str(bound.path), kind.id, n.attr):
                return (f"the pool is a {kind.id}: {self.rel}:{n.lineno} reads "
                        f"`{unparse(n)}`, which only {kind.id} sets "
                        f"({self.modules.relpath(bound.path)})")
        return None

    def _helper_true(self, cls: ast.ClassDef, call: ast.Call) -> str | None:
        """`f(pool, x.device)` whose body is `return torch.device(d).type == "cuda" and
        isinstance(pool, C)`, with the class's pool a C."""
        if self.modules is None or not isinstance(call.func, ast.Name) or len(call.args) != 2:
            return None
        bound = self.modules.resolve(self.here, call.func.id)
        if bound is None or not isinstance(bound.node, ast.FunctionDef):
            return None
        fn = bound.node
        body = _body(fn)
        params = [a.arg for a in fn.args.args]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or len(params) != 2 or \
                not isinstance(body[0].value, ast.BoolOp) or \
                not isinstance(body[0].value.op, ast.And):
            return None
        parts = body[0].value.values
        inst = [p for p in parts if isinstance(p, ast.Call) and isinstance(p.func, ast.Name)
                and p.func.id == "isinstance" and len(p.args) == 2
                and isinstance(p.args[0], ast.Name) and p.args[0].id == params[0]]
        if len(parts) != 2 or not any(_is_cuda_type(p) for p in parts) or len(inst) != 1:
            return None
        mod = self.modules.module(bound.dotted)
        why = self._pool_is(cls, call.args[0], inst[0].args[1], mod) if mod else None
        if why is None:
            return None
        line = fn.lineno
        return (f"{self.modules.relpath(bound.path)}:{line} `{fn.name}` is true on a GPU "
                f"(the device is `cuda` under ROCm too; {why})")

    def method(self, cls: ast.ClassDef, fn: ast.FunctionDef) -> str | None:
        body = _body(fn)
        reasons = []
        if len(body) == 2 and isinstance(body[0], ast.If) and not body[0].orelse:
            test, then = body[0].test, body[0].body
            attr = _self_attr(test.left) if isinstance(test, ast.Compare) else None
            if not (attr and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is)
                    and isinstance(test.comparators[0], ast.Constant)
                    and test.comparators[0].value is None and len(then) == 1
                    and isinstance(then[0], ast.Return)
                    and isinstance(then[0].value, ast.Constant)
                    and then[0].value.value is False):
                return None
            cap = _set_at_capture(cls, attr)
            if cap is None:
                return None
            reasons.append(f"`self.{attr}` is set by `{cap[0]}` ({self.rel}:{cap[1]}), "
                           "before any replay")
            body = body[1:]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or \
                not isinstance(body[0].value, ast.BoolOp) or \
                not isinstance(body[0].value.op, ast.And):
            return None
        for part in body[0].value.values:
            if isinstance(part, ast.Attribute) and part.attr == "is_cuda":
                reasons.append(f"`{unparse(part)}` is true on a GPU")
                continue
            why = self._helper_true(cls, part) if isinstance(part, ast.Call) else None
            if why is None:
                return None
            reasons.append(why)
        return (f"`{fn.name}` ({self.rel}:{fn.lineno}) is true on every GPU: "
                + "; ".join(reasons))


def gpu_true_methods(tree: ast.Module, rel: str, modules: Modules | None) -> dict[str, str]:
    """method name -> why it is true on a GPU, for the recognised fast-path predicates of the
    module's classes (names that start `_can_` or `can_` only: cheap to skip the rest)."""
    out: dict[str, str] = {}
    reader: _Reader | None = None
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and re.match(r"_?can_\w*(gpu|cuda|device)", fn.name):
                reader = reader or _Reader(tree, rel, modules)
                why = reader.method(cls, fn)
                if why:
                    out[fn.name] = why
    return out

