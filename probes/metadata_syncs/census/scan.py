"""Finding the sites in one builder: `_Scan` walks a builder's body with its paths and guards and
records every sync-prone call with its verdict (`_Kinds` tells device values from host ones).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from diag.probes.metadata_syncs.census.guards import _ends, guards_of
from diag.probes.metadata_syncs.census.paths import (
    NONE,
    _graph_memo_miss,
    _kids,
    _mode_expr,
    cond,
    path_class,
    step_paths,
)
from diag.probes.metadata_syncs.census.sites import (
    _DEVICE_FIELDS,
    _DYNAMIC,
    _FACTORIES,
    _HOST_READ_METHODS,
    _REDUCTIONS,
    _SAME_KIND,
    _SCALAR_CALLS,
    _SIZED,
    Guard,
    Site,
    _src,
)
from diag.probes.source import inner as _inner
from diag.probes.source import unparse as _unparse


class _Kinds:
    """Guesses whether an expression is a device tensor, a host value, a scalar, or unknown."""

    def __init__(self, fn: ast.FunctionDef, facts: dict[str, str] | None = None,
                 assigned: dict[str, list[tuple[int, ast.AST]]] | None = None) -> None:
        self.params: dict[str, str] = {}
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        for a in args:
            ann = _unparse(a.annotation) if a.annotation is not None else ""
            fact = (facts or {}).get(a.arg)
            if fact in ("host", "host-set"):  # every caller in the file passes a host value
                self.params[a.arg] = "host"
            elif a.arg.endswith("_cpu") or "List" in ann or "list" in ann:
                self.params[a.arg] = "host"
            elif "Tensor" in ann:
                self.params[a.arg] = "tensor"
            elif ann in ("int", "bool", "float"):
                self.params[a.arg] = "scalar"
        self.config: set[str] = set()
        self.device: set[str] = set()
        # (backend, call) -> the helper's def, when the call is to a same-class method or a
        # same-module function (set by _Scan): its return value is read through
        self.helper: Any = None
        self.assigned = assigned if assigned is not None else _FnInfo(fn, {}).assigned

    def of(self, e: ast.AST, line: int, depth: int = 0) -> str:
        if depth > 16:  # a chain of assignments and ops, read back to where it starts
            return "unknown"
        if isinstance(e, ast.Constant):
            return "scalar"
        if isinstance(e, ast.Name):
            if e.id.endswith("_cpu"):
                return "host"
            prior = [(ln, v) for ln, v in self.assigned.get(e.id, []) if ln <= line]
            if prior:
                ln, value = prior[-1]
                return self.of(value, ln - 1, depth + 1)
            if e.id in self.params:
                return self.params[e.id]
            return "tensor" if e.id in _DEVICE_FIELDS else "unknown"  # a well-known name
        if isinstance(e, ast.Attribute):
            if e.attr.endswith("_cpu"):
                return "host"
            if isinstance(e.value, ast.Name) and e.value.id != "self":
                prior = [(ln, v) for ln, v in self.assigned.get(_unparse(e), []) if ln <= line]
                if prior:  # a local object's field assigned earlier in the function
                    return self.of(prior[-1][1], prior[-1][0] - 1, depth + 1)
            if isinstance(e.value, ast.Name) and e.value.id == "self" and e.attr in self.config:
                return "scalar"  # set from the server arguments (a Python number)
            if isinstance(e.value, ast.Name) and e.value.id == "self" and e.attr in self.device:
                return "tensor"  # made on the device in the class (a buffer)
            if e.attr in _DEVICE_FIELDS:
                return "tensor"
            return "unknown"
        if isinstance(e, ast.Subscript):
            if isinstance(e.value, ast.Attribute) and e.value.attr == "shape":
                return "scalar"  # `t.shape[0]`: a Python int, read from the host metadata
            return self.of(e.value, line, depth + 1)
        if isinstance(e, ast.UnaryOp):  # `~mask_cpu`, `-t`
            return self.of(e.operand, line, depth + 1)
        if isinstance(e, ast.Compare) and len(e.comparators) == 1:
            e = ast.BinOp(e.left, ast.Add(), e.comparators[0])  # `a == b`: the kinds of a, b
        if isinstance(e, ast.BinOp):
            kinds = {self.of(e.left, line, depth + 1), self.of(e.right, line, depth + 1)}
            for k in ("tensor", "host", "unknown"):
                if k in kinds:
                    return k
            return "scalar"
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "getattr" \
                and len(e.args) >= 2 and isinstance(e.args[1], ast.Constant) and \
                isinstance(e.args[1].value, str):  # getattr(forward_batch, "name", None)
            return self.of(ast.Attribute(e.args[0], e.args[1].value, ast.Load()), line, depth + 1)
        if isinstance(e, ast.Call):
            f = e.func
            fname = _unparse(f)
            if fname in _SCALAR_CALLS:
                return "scalar"
            if self.helper is not None:
                k = self._helper_kind(e, line, depth)
                if k is not None:
                    return k
            dev = [k.value for k in e.keywords if k.arg == "device"]
            if dev and not (isinstance(dev[0], ast.Constant) and dev[0].value == "cpu"):
                return "tensor"  # made on (or copied to) the device
            if isinstance(f, ast.Attribute):
                if f.attr == "to" and any(isinstance(a, ast.Constant) and a.value == "cpu"
                                          for a in [*e.args, *(k.value for k in e.keywords)]):
                    return "host"
                if f.attr in ("tolist", "item"):
                    return "host"
                if f.attr == "cpu":
                    return "host"
                if isinstance(f.value, ast.Name) and f.value.id == "F" and e.args:
                    return self.of(e.args[0], line, depth + 1)  # torch.nn.functional op
                if isinstance(f.value, ast.Name) and f.value.id == "torch":
                    dev = [k for k in e.keywords if k.arg == "device"]
                    if dev and isinstance(dev[0].value, ast.Constant) and dev[0].value.value == "cpu":
                        return "host"
                    if dev:
                        return "tensor"
                    if f.attr.endswith("_like") and e.args:
                        return self.of(e.args[0], line, depth + 1)
                    # a factory without device= makes a host tensor; an op follows its
                    # inputs (`torch.count_nonzero(seq_lens_cpu == v)` is a host tensor)
                    if f.attr in _FACTORIES:
                        return "host"
                    kinds = {self.of(a, line, depth + 1) for a in e.args
                             if not isinstance(a, ast.Constant)}
                    # a torch op runs where its tensors live: host only when a host input
                    # is seen and no device one (else the device, as before)
                    return "host" if "host" in kinds and "tensor" not in kinds else "tensor"
                if f.attr in _SAME_KIND:
                    return self.of(f.value, line, depth + 1)
            return "unknown"
        return "unknown"


    def _helper_kind(self, call: ast.Call, line: int, depth: int) -> str | None:
        """A same-class/same-module helper's result: `Tensor` annotated, or what it returns
        when every return is a call fed one of this call's device tensors (`get_dcp_lens(lens,
        ...)`); None when the helper says nothing."""
        found = self.helper(call)
        if found is None:
            return None
        fn = found[1]
        ann = _unparse(fn.returns) if fn.returns is not None else ""
        if ann.startswith(("int", "bool", "float", "List", "list", "Optional[int")):
            return "scalar" if not ann.startswith(("List", "list")) else "host"
        if ann in ("torch.Tensor", "Tensor"):
            return "tensor"
        rets = [n.value for n in _inner(fn) if isinstance(n, ast.Return) and n.value is not None]
        if rets and all(isinstance(r, ast.Call) and _unparse(r.func) not in _SCALAR_CALLS
                        for r in rets) and any(
                self.of(a, line, depth + 1) == "tensor" for a in call.args):
            return "tensor"
        return None


def _classify(kind: str, what: str) -> tuple[str, str]:
    if kind == "host":
        return "host-mirror", f"{what} is a host value (a *_cpu mirror or a host copy)"
    if kind == "tensor":
        return "syncs", f"{what} is a device tensor"
    if kind == "scalar":
        return "", ""
    return "cannot-tell", f"cannot tell whether {what} lives on the device"


@dataclass
class _Edge:
    """A call from one builder to another (a same-class method or a module function)."""

    callee: tuple[str, str]  # (qualname, backend)
    state: frozenset
    unknown: bool  # the call sits under a forward-mode test the census cannot read
    args: dict[str, str]  # callee parameter -> "none" | "host" | "host-set" | "other"
    truth: dict[str, tuple[frozenset, frozenset]] = field(default_factory=dict)
    # callee parameter -> (pairs where the argument may be true, where it may be false)
    at: str = ""  # `file:line Caller.qualname` of the call
    guards: frozenset = frozenset()  # the guards around the call (and its caller's own)


class _FnInfo:
    """What a builder's body says by itself (its assignments), whatever its callers pass: read
    once per builder, not on every pass of the fixpoint in `_analyse`."""

    def __init__(self, fn: ast.FunctionDef, helpers: dict[str, ast.AST]) -> None:
        mode_vars: list[str] = []
        counts: dict[str, int] = {}
        single: list[ast.Assign] = []  # `name = value`, in walk order
        # name -> [(line, value)] of `name = value` / `name: T = value` (for _Kinds)
        self.assigned: dict[str, list[tuple[int, ast.AST]]] = {}
        for n in _inner(fn):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        counts[t.id] = counts.get(t.id, 0) + 1
                if len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                    single.append(n)
                    self.assigned.setdefault(n.targets[0].id, []).append((n.lineno, n.value))
                    text = _unparse(n.value)
                    if "forward_mode" in text and not text.endswith("forward_mode"):
                        mode_vars.append(n.targets[0].id)
                elif len(n.targets) == 1 and isinstance(n.targets[0], ast.Tuple) and \
                        isinstance(n.value, ast.Tuple) and \
                        len(n.targets[0].elts) == len(n.value.elts):
                    # `num_token, num_seq = a.shape[0], b.shape[0]`: each name its own value
                    for t, v in zip(n.targets[0].elts, n.value.elts):
                        if isinstance(t, ast.Name):
                            counts[t.id] = counts.get(t.id, 0) + 1
                            self.assigned.setdefault(t.id, []).append((n.lineno, v))
                elif len(n.targets) == 1 and isinstance(n.targets[0], ast.Attribute) and \
                        isinstance(n.targets[0].value, ast.Name) and \
                        n.targets[0].value.id != "self":
                    # `metadata.encoder_lens_int32 = forward_batch.encoder_lens.to(...)`: a
                    # local object's field, read back by its dotted name
                    self.assigned.setdefault(_unparse(n.targets[0]), []).append(
                        (n.lineno, n.value))
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value:
                self.assigned.setdefault(n.target.id, []).append((n.lineno, n.value))
        self.mode_vars = ",".join(mode_vars)
        self.names = set(counts)  # every name assigned in the body
        # names assigned once from a forward-mode test (read through by `cond`)
        self.locals = {n.targets[0].id: n.value for n in single
                       if counts.get(n.targets[0].id) == 1 and _mode_expr(n.value, helpers)}


class _Scan:
    """One builder walked statement by statement, with the (mode, phase) pairs that reach each
    statement: branches narrow them, an early `return` removes its branch from what follows."""

    def __init__(self, fn: ast.FunctionDef, qual: str, backend: str, rel: str,
                 facts: dict[str, str], resolve: Any,
                 params: dict[str, tuple[frozenset, frozenset]] | None = None,
                 info: _FnInfo | None = None) -> None:
        self.fn, self.qual, self.backend, self.rel = fn, qual, backend, rel
        self.resolve = resolve
        helpers = getattr(resolve, "mode_helpers", {})
        if info is None:
            info = _FnInfo(fn, helpers)
        self.facts = facts | {"@mode-vars": info.mode_vars}
        self.guards: dict[str, frozenset] = getattr(resolve, "mode_guards", {})
        self.env = {"helpers": helpers,
                    "params": {k: v for k, v in (params or {}).items()
                               if k not in info.names},
                    "locals": info.locals}
        self.kinds = _Kinds(fn, facts, info.assigned)
        host_attrs = getattr(resolve, "host_attrs", None)
        self.kinds.config = host_attrs(backend) if host_attrs else set()
        device_attrs = getattr(resolve, "device_attrs", None)
        self.kinds.device = device_attrs(backend) - self.kinds.config if device_attrs else set()
        self.kinds.helper = lambda c: resolve(backend, c, fn)
        self.sites: list[Site] = []
        self.with_os: list[Site] = []
        self.edges: list[_Edge] = []
        self.chain: tuple[str, ...] = ()  # set by _analyse: the calls that reach it
        self.stack: list[Guard] = []  # the guards around the statement being read

    def run(self, state: frozenset, unknown: bool, guards: frozenset = frozenset()) -> None:
        self.stack = sorted(guards, key=lambda g: (g[3], g[0], g[1]))
        self.block(self.fn.body, state, unknown)

    def _where(self, node: ast.AST) -> str:
        return f"{self.rel}:{getattr(node, 'lineno', 0)}"

    def guarded(self, guards: tuple[Guard, ...], stmts: list[ast.stmt], state: frozenset,
                unknown: bool) -> frozenset:
        self.stack.extend(guards)
        try:
            return self.block(stmts, state, unknown)
        finally:
            del self.stack[len(self.stack) - len(guards):]

    # statements -> the state that falls through
    def block(self, stmts: list[ast.stmt], state: frozenset, unknown: bool) -> frozenset:
        pushed = 0
        for st in stmts:
            state = self.stmt(st, state, unknown)
            if isinstance(st, ast.If) and _ends(st.body) and not st.orelse:
                # `if self.dcp_size == 1: return`: what follows runs where it does not hold
                more = guards_of(st.test, self._where(st), False)
                self.stack.extend(more)
                pushed += len(more)
        if pushed:
            del self.stack[len(self.stack) - pushed:]
        return state

    def stmt(self, st: ast.stmt, state: frozenset, unknown: bool) -> frozenset:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return state  # nested definitions run elsewhere, if at all
        if isinstance(st, (ast.If, ast.While, ast.Assert)):
            self.truth_test(st.test, state, unknown)
        if isinstance(st, ast.If) and _graph_memo_miss(st.test):
            # `if bs not in self.decode_cuda_graph_metadata:` fills a per-batch-size cache of
            # graph metadata: the first call for a size is its capture, so the body runs there
            self.expr(st.test, state, unknown)
            capture = frozenset((m, "capture") for m, _ in state)
            return self.block(st.body, capture, unknown) | self.block(st.orelse, state, unknown)
        if isinstance(st, ast.If):
            self.expr(st.test, state, unknown)
            c = cond(st.test, self.facts, self.env)
            unk = unknown or c.unknown
            w = self._where(st)
            return self.guarded(guards_of(st.test, w, True), st.body, state & c.true, unk) | \
                self.guarded(guards_of(st.test, w, False), st.orelse, state & c.false, unk)
        if isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
            self.expr(st.iter if not isinstance(st, ast.While) else st.test, state, unknown)
            # a loop body runs a number of times the census does not count: never exact
            loop = (("data:loop", "true", None, self._where(st),
                     "in a loop (runs a data-dependent number of times)"),)
            self.guarded(loop, st.body, state, unknown)
            self.block(st.orelse, state, unknown)
            return state
        if isinstance(st, (ast.With, ast.AsyncWith)):
            for item in st.items:
                self.expr(item.context_expr, state, unknown)
            return self.block(st.body, state, unknown)
        if isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            out = self.block(st.body, state, unknown)
            for h in st.handlers:
                out |= self.block(h.body, state, unknown)
            out = self.block(st.orelse, out, unknown)
            return self.block(st.finalbody, out, unknown) if st.finalbody else out
        if isinstance(st, (ast.Assign, ast.Expr)) and isinstance(st.value, ast.Call) and \
                isinstance(st.value.func, ast.Attribute) and \
                st.value.func.attr in self.guards and any(
                    "forward_mode" in _unparse(a) for a in st.value.args):
            self.expr(st.value, state, unknown)  # `bucket = _GraphBucket.of(forward_mode)`
            return state & self.guards[st.value.func.attr]
        if isinstance(st, ast.Assert):  # what follows runs only where it holds
            self.expr(st.test, state, unknown)
            c = cond(st.test, self.facts, self.env)
            return state & c.true
        if isinstance(st, ast.Match):
            self.expr(st.subject, state, unknown)
            for case in st.cases:
                self.block(case.body, state, unknown)
            return state
        for child in _kids(st):
            if isinstance(child, ast.expr):
                self.expr(child, state, unknown)
        if isinstance(st, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
            return NONE
        return state

    def expr(self, e: ast.AST, state: frozenset, unknown: bool) -> None:
        if isinstance(e, ast.Lambda):
            return
        if isinstance(e, ast.IfExp):
            self.expr(e.test, state, unknown)
            c = cond(e.test, self.facts, self.env)
            w = self._where(e)
            for part, holds, st in ((e.body, True, c.true), (e.orelse, False, c.false)):
                more = guards_of(e.test, w, holds)
                self.stack.extend(more)
                self.expr(part, state & st, unknown or c.unknown)
                del self.stack[len(self.stack) - len(more):]
            return
        if isinstance(e, ast.BoolOp):  # `a and b` runs b only where a holds
            pushed = 0
            for v in e.values:
                self.expr(v, state, unknown)
                c = cond(v, self.facts, self.env)
                state = state & (c.true if isinstance(e.op, ast.And) else c.false)
                unknown = unknown or c.unknown
                more = guards_of(v, self._where(e), isinstance(e.op, ast.And))
                self.stack.extend(more)
                pushed += len(more)
            if pushed:
                del self.stack[len(self.stack) - pushed:]
            return
        if isinstance(e, ast.Call):
            self.call(e, state, unknown)
        elif isinstance(e, ast.Subscript):
            self.subscript(e, state, unknown)
        for child in _kids(e):
            self.expr(child, state, unknown)

    def _device_scalar(self, b: ast.AST | None, line: int) -> bool:
        """A device tensor element (or a name bound to one) used where Python needs an int."""
        return isinstance(b, (ast.Subscript, ast.Name, ast.Attribute, ast.BinOp)) and \
            self.kinds.of(b, line) == "tensor"

    def subscript(self, e: ast.Subscript, state: frozenset, unknown: bool) -> None:
        """`x[n:]` / `x[:t[-1]]` with a device bound (`__index__` reads it back), and
        `x[t > 0]` / `x[mask]` of a device bool mask (a data-dependent size): one sync each."""
        sl, line = e.slice, e.lineno
        if isinstance(sl, ast.Slice):
            for b in (sl.lower, sl.upper, sl.step):
                if b is not None and self._device_scalar(b, line):
                    self.add(b, state, unknown, "slice-bound", "syncs",
                             f"slice bound `{_src(b, 40)}` is a device scalar", 1)
            return
        mask = sl
        if isinstance(sl, ast.Name):
            prior = [v for ln, v in self.kinds.assigned.get(sl.id, []) if ln <= line]
            mask = prior[-1] if prior else sl
        if isinstance(mask, ast.Compare) and len(mask.ops) == 1 and not isinstance(
                mask.ops[0], (ast.Is, ast.IsNot, ast.In, ast.NotIn)) and \
                self.kinds.of(mask.left, line) == "tensor":
            self.add(e, state, unknown, "bool-mask", "syncs",
                     f"indexing with the device bool mask `{_src(mask, 40)}` (data-dependent "
                     f"size)", 1)

    def truth_test(self, test: ast.AST, state: frozenset, unknown: bool) -> None:
        """`if torch.all(t == n):` / `if t.any():` of a device tensor: `bool()` reads it back."""
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test = test.operand
        if not isinstance(test, ast.Call) or not isinstance(test.func, ast.Attribute) or \
                test.func.attr not in ("all", "any"):
            return
        f = test.func
        is_torch = isinstance(f.value, ast.Name) and f.value.id == "torch"
        arg = (test.args[0] if test.args else None) if is_torch else f.value
        if arg is None:
            return
        inner = arg.left if isinstance(arg, ast.Compare) else arg
        verdict, why = _classify(self.kinds.of(inner, test.lineno), f"`{_src(inner, 40)}`")
        if verdict:
            self.add(test, state, unknown, "bool()", verdict,
                     why + "; a branch on it reads the result back", 1)

    def call(self, call: ast.Call, state: frozenset, unknown: bool) -> None:
        target = self.resolve(self.backend, call, self.fn)
        if target is not None:
            (cqual, cfn) = target
            args, truth = self._args(cfn, call, state)
            self.edges.append(_Edge((cqual, self.backend), state, unknown, args, truth,
                                    f"{self.rel}:{call.lineno} {self.qual}",
                                    frozenset(self.stack)))
        self.check(call, state, unknown)

    def _args(self, callee: ast.FunctionDef, call: ast.Call, state: frozenset
              ) -> tuple[dict[str, str], dict[str, tuple[frozenset, frozenset]]]:
        params = [a.arg for a in callee.args.posonlyargs + callee.args.args]
        if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
            params = params[1:]
        defaults = dict(zip([a.arg for a in callee.args.args][::-1],
                            callee.args.defaults[::-1]))
        defaults |= {a.arg: d for a, d in zip(callee.args.kwonlyargs, callee.args.kw_defaults)
                     if d is not None}
        given: dict[str, ast.AST] = dict(zip(params, call.args))
        if any(isinstance(a, ast.Starred) for a in call.args) or \
                any(k.arg is None for k in call.keywords):
            return {}, {}  # *args / **kwargs: the census cannot match arguments to parameters
        given |= {k.arg: k.value for k in call.keywords if k.arg}
        out = {}
        truth = {}
        for name in params + [a.arg for a in callee.args.kwonlyargs]:
            value = given.get(name, defaults.get(name))
            if value is None:
                continue
            c = cond(value, self.facts, self.env)
            truth[name] = (state & c.true, state & c.false)
            if isinstance(value, ast.Constant) and value.value is None:
                out[name] = "none"
            elif name in given and self.kinds.of(value, call.lineno) == "host":
                # a host value made here (`t.tolist()`, a list) is never None: a caller-side
                # fallback `if p is None: p = x.tolist()` cannot run for it
                out[name] = "host-set" if isinstance(value, (
                    ast.Call, ast.List, ast.ListComp, ast.Tuple, ast.BinOp)) else "host"
            else:
                out[name] = "other"
        return out, truth

    def add(self, call: ast.Call, state: frozenset, unknown: bool, kind: str, verdict: str,
            why: str, n: int) -> None:
        if not verdict:
            return
        pclass = path_class(state, unknown)
        syncs = n if verdict == "syncs" else 0  # what the call costs where it runs
        if pclass == "unreachable":
            verdict, why = "unreachable", "in a branch that cannot run (its condition " \
                "contradicts the branches around it, or no caller reaches it)"
        elif pclass == "capture-only" and verdict != "host-mirror":
            verdict, why = "capture-only", "runs only while a graph is captured"
        self.sites.append(Site(self.rel, call.lineno, self.qual, self.backend, _src(call), kind,
                               verdict, why, syncs, call.col_offset,
                               step_paths(state), pclass,
                               guards=tuple(dict.fromkeys(self.stack))))

    def check(self, call: ast.Call, state: frozenset, unknown: bool) -> None:
        kinds, rel, qual, backend = self.kinds, self.rel, self.qual, self.backend
        f = call.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        is_torch = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
            f.value.id == "torch"
        line = call.lineno

        def add(kind: str, verdict: str, why: str, n: int) -> None:
            self.add(call, state, unknown, kind, verdict, why, n)

        if name == "repeat_interleave":
            kw = {k.arg: k.value for k in call.keywords}
            if is_torch:
                reps = call.args[1] if len(call.args) > 1 else kw.get("repeats")
            else:
                reps = call.args[0] if call.args else kw.get("repeats")
            if reps is None:
                return
            out_size = kw.get("output_size")
            if isinstance(out_size, ast.Name) and self.facts.get(out_size.id) == "none":
                out_size = None  # every caller passes None for it
            if out_size is not None and not (isinstance(out_size, ast.Constant)
                                             and out_size.value is None):
                self.with_os.append(Site(rel, line, qual, backend, _src(call), name, "no-sync",
                                         "output_size given", 0, call.col_offset,
                                         step_paths(state), path_class(state, unknown)))
                if not isinstance(out_size, ast.IfExp):
                    return
                add(name, "cannot-tell", "output_size is conditional (None on some calls)", 2)
                return
            verdict, why = _classify(kinds.of(reps, line), f"repeats `{_src(reps, 40)}`")
            if verdict == "syncs":
                why += "; no output_size: PyTorch reads the total back (2 syncs)"
            add(name, verdict, why, 2)
        elif isinstance(f, ast.Attribute) and name in _HOST_READ_METHODS and not call.args:
            verdict, why = _classify(kinds.of(f.value, line), f"`{_src(f.value, 40)}`")
            add(name, verdict, why, 1)
        elif isinstance(f, ast.Attribute) and name == "to" and any(
                isinstance(a, ast.Constant) and a.value == "cpu"
                for a in [*call.args, *(k.value for k in call.keywords)]) and not any(
                k.arg == "non_blocking" and not (isinstance(k.value, ast.Constant)
                                                 and not k.value.value)
                for k in call.keywords):  # a non-blocking copy does not wait by itself
            verdict, why = _classify(kinds.of(f.value, line), f"`{_src(f.value, 40)}`")
            add("to(cpu)", verdict, why, 1)
        elif name in _DYNAMIC and (is_torch or isinstance(f, ast.Attribute)):
            arg = call.args[0] if is_torch and call.args else f.value if not is_torch else None
            if arg is None:
                return
            verdict, why = _classify(kinds.of(arg, line), f"`{_src(arg, 40)}`")
            if verdict == "syncs":
                why += f"; {name} has a data-dependent output size"
            add(name, verdict, why, 1)
        elif name in _SIZED and ((is_torch and not name.startswith("new_")) or (
                name.startswith("new_") and isinstance(f, ast.Attribute))):
            args = list(call.args[:_SIZED[name]] if _SIZED[name] else call.args)
            if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
                args = list(args[0].elts)
            args += [k.value for k in call.keywords if k.arg in ("size", "start", "end")]
            for a in args:
                if self._device_scalar(a, line):
                    self.add(a, state, unknown, "size", "syncs",
                             f"size `{_src(a, 40)}` of {name} is a device scalar", 1)
        elif isinstance(f, ast.Name) and name in ("int", "float", "bool") and len(call.args) == 1:
            arg = call.args[0]
            if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and \
                    arg.func.attr in _REDUCTIONS:
                inner = arg.func.value
                if isinstance(inner, ast.Name) and inner.id == "torch" and arg.args:
                    inner = arg.args[0]  # bool(torch.all(x)): x is read
                verdict, why = _classify(kinds.of(inner, line), f"`{_src(inner, 40)}`")
                add(f"{name}()", verdict, why, 1)
            elif isinstance(arg, (ast.Subscript, ast.Name)):
                # int(t[i]) of a device tensor reads one element back; a name only when the
                # census knows it holds a device tensor (ints of Python values are common)
                k = kinds.of(arg, line)
                if k == "tensor" or (k == "host" and isinstance(arg, ast.Subscript)):
                    verdict, why = _classify(k, f"`{_src(arg, 40)}`")
                    add(f"{name}()", verdict, why, 1)
