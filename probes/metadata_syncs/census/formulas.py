"""An argument's truth read through one level of callers, per call, as a formula.

Why: the census reads a parameter's truth as the union over its callers of where each call's
argument may be true or false (census.reach), which loses what ties two parameters of one call
together. 0.5.23 deepseek_v4_backend_hip_radix.py passes `exact_num_tokens or
host_proves_exact_num_tokens` (:1236) to the repeat_interleave helper (`output_size=num_tokens
if exact_num_tokens else None`, :2723-2727), where `host_proves_exact_num_tokens = need_compress
and not attach_decode_streams and extend_seq_lens_cpu is not None and sum(extend_seq_lens_cpu)
== num_tokens` (:1221-1226). The prefill call passes `exact_num_tokens=is_draft`,
`need_compress=not is_draft`, `num_tokens=sum(extend_seq_lens_cpu)` after `assert ...
extend_seq_lens_cpu is not None` (:2211-2236): whatever `is_draft` is, the argument holds; the
sets alone say it may be false on every mode. Here each call into the function is read on its
own: the function's parameters are its arguments there, its locals bound once are their values,
a sub-test is one atom wherever it recurs (so `a` and `not a` cannot both hold), and an equality
of two pure expressions that read the same after that substitution holds.
"""

from __future__ import annotations

import ast
import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diag.probes.metadata_syncs.census.paths import Cond
from diag.probes.source import inner, unparse

CondOf = Callable[[ast.AST], Cond]
# calls whose result depends on their arguments only: two that read alike are equal
_PURE_CALLS = frozenset({"sum", "len", "int", "min", "max", "abs", "bool"})
_MAX_FREE = 8  # free atoms enumerated per state; past it nothing is decided


@dataclass(frozen=True)
class CallArgs:
    """One call as its callee's formula reads it: each parameter's argument (a default where
    the call passes none) and how the caller reads a test at the call (its facts in force)."""

    args: dict[str, ast.AST]
    cond_at: CondOf


def single_locals(fn: ast.FunctionDef) -> dict[str, ast.Assign]:
    """Names `fn` binds exactly once, by a plain `name = value` outside any loop (kept on the
    node)."""
    memo = getattr(fn, "_diag_single_locals", None)
    if memo is not None:
        return memo
    stores: dict[str, int] = {}
    assigns: dict[str, ast.Assign] = {}
    loops = [(n.lineno, n.end_lineno or n.lineno) for n in inner(fn)
             if isinstance(n, (ast.For, ast.AsyncFor, ast.While))]
    for n in inner(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            stores[n.id] = stores.get(n.id, 0) + 1
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and \
                isinstance(n.targets[0], ast.Name):
            assigns[n.targets[0].id] = n
    params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    memo = {k: a for k, a in assigns.items() if stores.get(k) == 1 and k not in params
            and not any(lo <= a.lineno <= hi for lo, hi in loops)}
    fn._diag_single_locals = memo  # type: ignore[attr-defined]
    return memo


def params_of(fn: ast.FunctionDef) -> set[str]:
    return {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}


def stored_names(fn: ast.FunctionDef) -> frozenset[str]:
    """Names `fn` binds or deletes anywhere (kept on the node)."""
    memo = getattr(fn, "_diag_stored", None)
    if memo is None:
        memo = fn._diag_stored = frozenset(  # type: ignore[attr-defined]
            n.id for n in inner(fn) if isinstance(n, ast.Name)
            and isinstance(n.ctx, (ast.Store, ast.Del)))
    return memo


def truth_tested(fn: ast.FunctionDef) -> frozenset[str]:
    """The names `fn` reads as a truth value: a branch's, an assert's or a conditional
    expression's test, an operand of `and` / `or` / `not` (kept on the node). Only such a
    parameter's truth is worth a formula."""
    memo = getattr(fn, "_diag_truth_tested", None)
    if memo is None:
        tests: list[ast.AST] = []
        for n in inner(fn):
            if isinstance(n, (ast.If, ast.While, ast.IfExp, ast.Assert)):
                tests.append(n.test)
            elif isinstance(n, ast.BoolOp):
                tests += n.values
            elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
                tests.append(n.operand)
        memo = fn._diag_truth_tested = frozenset(  # type: ignore[attr-defined]
            t.id for t in tests if isinstance(t, ast.Name))
    return memo


def mentions_params(expr: ast.AST, fn: ast.FunctionDef, line: int, depth: int = 0) -> bool:
    """Whether `expr` reads a parameter of `fn`, directly or through a local bound once
    before `line`."""
    params, locs = params_of(fn), single_locals(fn)
    for n in ast.walk(expr):
        if isinstance(n, ast.Name):
            if n.id in params:
                return True
            a = locs.get(n.id)
            if a is not None and a.lineno < line and depth < 4 and \
                    mentions_params(a.value, fn, line, depth + 1):
                return True
    return False


class _Subst(ast.NodeTransformer):
    """A copy of a test with each parameter replaced by the call's argument."""

    def __init__(self, args: dict[str, ast.AST]) -> None:
        self.args = args

    def visit_Name(self, node: ast.Name) -> ast.AST:
        got = self.args.get(node.id)
        return copy.deepcopy(got) if got is not None else node


def _pure(e: ast.AST) -> bool:
    for n in ast.walk(e):
        if isinstance(n, ast.Call):
            if not (isinstance(n.func, ast.Name) and n.func.id in _PURE_CALLS):
                return False
        elif isinstance(n, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return False
    return True


class _Formula:
    """The test of `fn` as a formula over atoms, for one call into `fn`."""

    def __init__(self, fn: ast.FunctionDef, line: int, here: CondOf, call: CallArgs) -> None:
        self.fn, self.line, self.here, self.call = fn, line, here, call
        stored = stored_names(fn)
        # a parameter the function may rebind is not what the call passed
        self.params = {p for p in params_of(fn) if p not in stored and p in call.args}
        self.locals = single_locals(fn)
        self.stored = stored | params_of(fn)
        self.atoms: dict[str, Cond] = {}

    def build(self, e: ast.AST, side: str = "fn", depth: int = 0) -> Any:
        """("and"|"or", [..]) | ("not", f) | ("const", bool) | ("atom", key)."""
        if isinstance(e, ast.BoolOp):
            return ("and" if isinstance(e.op, ast.And) else "or",
                    [self.build(v, side, depth) for v in e.values])
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            return ("not", self.build(e.operand, side, depth))
        if isinstance(e, ast.Constant) and isinstance(e.value, bool):
            return ("const", e.value)
        if side == "fn" and isinstance(e, ast.Name) and depth < 6:
            if e.id in self.params:
                return self.build(self.call.args[e.id], "caller", depth + 1)
            a = self.locals.get(e.id)
            if a is not None and a.lineno < self.line:
                return self.build(a.value, "fn", depth + 1)
        if side == "fn":
            names = {n.id for n in ast.walk(e) if isinstance(n, ast.Name)}
            if names & self.params and not names & (self.stored - self.params):
                # a test of parameters alone (and globals): the caller's, on its arguments
                e, side = _Subst({k: v for k, v in self.call.args.items()
                                  if k in self.params}).visit(copy.deepcopy(e)), "caller"
        if isinstance(e, ast.Compare) and len(e.ops) == 1 and isinstance(e.ops[0], ast.Eq) \
                and _pure(e) and unparse(e.left) == unparse(e.comparators[0]):
            return ("const", True)
        key = f"{side}:{unparse(e)}"
        if key not in self.atoms:
            self.atoms[key] = (self.here if side == "fn" else self.call.cond_at)(e)
        return ("atom", key)


def _value(f: Any, val: dict[str, bool]) -> bool:
    kind = f[0]
    if kind == "const":
        return f[1]
    if kind == "atom":
        return val[f[1]]
    if kind == "not":
        return not _value(f[1], val)
    parts = (_value(p, val) for p in f[1])
    return all(parts) if kind == "and" else any(parts)


def through_callers(expr: ast.AST, fn: ast.FunctionDef, line: int, here: CondOf,
                    calls: list[tuple[frozenset, CallArgs]], state: frozenset
                    ) -> tuple[frozenset, frozenset] | None:
    """(where `expr` may be true, where false) on `state`, read per call into `fn` (each with
    the (mode, phase) pairs it reaches `fn` on); None where a pair of `state` no call reaches
    or a call is past what is enumerated: the sets' answer stands there."""
    true: set = set()
    false: set = set()
    covered: set = set()
    for reach, call in calls:
        on = state & reach
        if not on:
            continue
        form = _Formula(fn, line, here, call)
        f = form.build(expr)
        keys = list(form.atoms)
        for s in on:
            free = [k for k in keys if s in form.atoms[k].true and s in form.atoms[k].false
                    or s not in form.atoms[k].true and s not in form.atoms[k].false]
            if len(free) > _MAX_FREE:
                return None
            fixed = {k: s in form.atoms[k].true for k in keys if k not in free}
            for bits in itertools.product((False, True), repeat=len(free)):
                if _value(f, fixed | dict(zip(free, bits))):
                    true.add(s)
                else:
                    false.add(s)
        covered |= on
    if covered != set(state):
        return None
    return frozenset(true), frozenset(false)
