"""Finding the sites in one builder: `_Scan` walks a builder's body with its paths and guards and
records every sync-prone call with its verdict (`_Kinds` tells device values from host ones).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from diag.probes.metadata_syncs.census.draft_steps import DRAFT_DECODE_MODE, rules_out
from diag.probes.metadata_syncs.census.flags import via_note
from diag.probes.metadata_syncs.census.formulas import (
    CallArgs,
    mentions_params,
    through_callers,
    truth_tested,
)
from diag.probes.metadata_syncs.census.guards import (
    MirrorParams,
    _ends,
    _guard_atom,
    argument_mirror,
    guard_order,
    guards_of,
    is_ragged_layout,
    spec_aliases,
)
from diag.probes.metadata_syncs.census.kinds import _classify, _FnInfo, _Kinds
from diag.probes.metadata_syncs.census.memo import memo_fill
from diag.probes.metadata_syncs.census.paths import (
    ALL,
    NONE,
    Cond,
    _graph_memo_miss,
    _kids,
    _mode_expr,
    assigned_names,
    cond,
    facts_of,
    getattr_read,
    known_value,
    path_class,
    step_paths,
)
from diag.probes.metadata_syncs.census.sites import (
    _DYNAMIC,
    _HOST_READ_METHODS,
    _ONE_D,
    _REDUCTIONS,
    _SIZED,
    Guard,
    Site,
    _src,
)
from diag.probes.metadata_syncs.census.spec_writers import co_set
from diag.probes.source import inner as _inner
from diag.probes.source import unparse as _unparse

# Syncs of a data-dependent op on a CUDA/HIP tensor, read from PyTorch's kernels: `bincount`
# reads the input twice before it launches (aten/src/ATen/native/cuda/SummaryOps.cu
# `_bincount_cuda_template`: `self.min().cpu()` to refuse negative inputs, then
# `self.max().item()` for the number of bins; `minlength` only raises that number, it does not
# spare either read); `nonzero`, `unique`, `masked_select`, `argwhere` read their output size
# once. (A `.tolist()` on the result is a sync of its own, another site.)
_DYNAMIC_SYNCS = {"bincount": 2}
_DYNAMIC_WHY = {"bincount": " (bincount on the device reads min() and max() back: 2 syncs, "
                            "with or without minlength)"}


def _param_atoms(test: ast.AST, holds: bool, params: dict) -> list[tuple[str, bool]]:
    """(parameter, truth) each bare-parameter atom of `test` takes where the branch on it
    goes `holds`: every atom of a conjunction that holds, of a disjunction that fails."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _param_atoms(test.operand, not holds, params)
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.And) != holds:
            return []
        return [a for v in test.values for a in _param_atoms(v, holds, params)]
    if isinstance(test, ast.Name) and test.id in params:
        return [(test.id, holds)]
    return []


def _rebound_before(fn: ast.FunctionDef, name: str, line: int) -> bool:
    """`name` may be rebound in `fn` before a test on `line` runs: a store of it on an
    earlier line, or anywhere in a loop that holds the test (a later pass sees it). What
    the callers bind is then not what the test reads (0.5.23 deepseek_v4_backend.py:3064-3066
    fills `max_seq_len_override` from the batch before testing it)."""
    memo = getattr(fn, "_diag_stores", None)
    if memo is None:
        lines: dict[str, list[int]] = {}
        loops: list[tuple[int, int]] = []
        for n in _inner(fn):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                lines.setdefault(n.id, []).append(n.lineno)
            elif isinstance(n, (ast.For, ast.AsyncFor, ast.While)):
                loops.append((n.lineno, n.end_lineno or n.lineno))
        memo = fn._diag_stores = (lines, loops)  # type: ignore[attr-defined]
    at, loops = memo[0].get(name, []), memo[1]
    return any(x < line for x in at) or any(
        a <= line <= b and any(a <= x <= b for x in at) for a, b in loops)


def _none_tested(fn: ast.FunctionDef) -> frozenset[str]:
    """The names `fn` compares with None (`x is None`, `x is not None`): the only parameters
    whose binding by a call (`_Edge.binds`) can decide a test. Kept on the node."""
    out = getattr(fn, "_diag_none_tested", None)
    if out is None:
        out = fn._diag_none_tested = frozenset(  # type: ignore[attr-defined]
            n.left.id for n in _inner(fn) if isinstance(n, ast.Compare)
            and isinstance(n.left, ast.Name) and len(n.ops) == 1
            and isinstance(n.ops[0], (ast.Is, ast.IsNot))
            and isinstance(n.comparators[0], ast.Constant) and n.comparators[0].value is None)
    return out


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
    # callee parameter -> "none" (None passed or left to a None default) | "mirror:<x>" (the
    # batch's host mirror, `guards.argument_mirror`): what the call binds, for its modes
    binds: dict[str, str] = field(default_factory=dict)
    # the arguments as the callee's formulas read them (census.formulas)
    call: CallArgs | None = field(default=None, compare=False)


# What `_Scan.expr` does nothing for: no call, subscript, test or lambda can lie under a name,
# a constant, a context (`Load`) or an operator. Two thirds of the nodes it was handed on
# 0.5.23 (240k calls per census, 80k of them `Load`).
_INERT = (ast.Name, ast.Constant, ast.expr_context, ast.operator, ast.unaryop, ast.cmpop,
          ast.boolop)


def _expr_kids(node: ast.AST) -> list[ast.AST]:
    """`_kids(node)` less the inert ones, kept on the node (every pass walks them again)."""
    out = getattr(node, "_diag_ekids", None)
    if out is None:
        out = node._diag_ekids = [c for c in _kids(node)  # type: ignore[attr-defined]
                                  if not isinstance(c, _INERT)]
    return out


def _non_blocking(call: ast.Call) -> bool:
    """`non_blocking=` anything but a false constant: the copy does not wait by itself."""
    return any(k.arg == "non_blocking" and not (isinstance(k.value, ast.Constant)
                                                and not k.value.value) for k in call.keywords)


def _blocking_copy(call: ast.Call, positional: bool) -> bool:
    """The call copies to a device that is not the CPU and does not ask for a non-blocking
    copy: `device=d`, or (`positional`) a first argument that names a device (`d`, `"cuda"`);
    `.cuda()` names its device itself."""
    if _non_blocking(call):
        return False
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr == "cuda":
        return True
    dev = next((k.value for k in call.keywords if k.arg == "device"), None)
    if dev is None and positional and call.args:
        a = call.args[0]
        named = _unparse(a).rsplit(".", 1)[-1]
        dev = a if "device" in named or (isinstance(a, ast.Constant) and isinstance(
            a.value, str) and a.value.startswith("cuda")) else None
    if dev is None:
        return False
    return not (isinstance(dev, ast.Constant) and (dev.value is None or str(dev.value)
                                                   .startswith("cpu")))


def _recognised(atom: ast.AST) -> bool:
    """An atom census.guards decides as it stands (a flag is never inlined over one)."""
    return _guard_atom(atom, "") is not None


def _inline_ragged(fn: ast.FunctionDef, test: ast.AST) -> ast.AST:
    """`x is not None` where `x` is bound once in `fn`, to the speculative input's ragged
    layout (`guards.is_ragged_layout`; 0.5.23 flashattention_backend.py:1038-1041): the same
    test of the value it holds. Any other test is returned as it is."""
    if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and
            len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot))):
        return test
    aliases = getattr(fn, "_diag_ragged", None)
    if aliases is None:  # name -> the layout read it alone binds (`inner`: kept on `fn`)
        nodes = _inner(fn)
        reads = {t.id: n.value for n in nodes if isinstance(n, ast.Assign)
                 and len(n.targets) == 1 and isinstance(t := n.targets[0], ast.Name)
                 and is_ragged_layout(n.value)}
        binds = [n for n in nodes if reads and isinstance(n, ast.Name)
                 and n.id in reads and isinstance(n.ctx, (ast.Store, ast.Del))]
        aliases = fn._diag_ragged = {  # type: ignore[attr-defined]
            name: v for name, v in reads.items() if sum(b.id == name for b in binds) == 1}
    value = aliases.get(test.left.id)
    if value is None:
        return test
    got = getattr(test, "_diag_inlined", None)
    if got is None:
        got = test._diag_inlined = ast.copy_location(  # type: ignore[attr-defined]
            ast.Compare(value, test.ops, test.comparators), test)
    return got


class _Scan:
    """One builder walked statement by statement, with the (mode, phase) pairs that reach each
    statement: branches narrow them, an early `return` removes its branch from what follows."""

    def __init__(self, fn: ast.FunctionDef, qual: str, backend: str, rel: str,
                 facts: dict[str, str], resolve: Any,
                 params: dict[str, tuple[frozenset, frozenset]] | None = None,
                 info: _FnInfo | None = None, mirrors: MirrorParams = (),
                 pguards: dict[tuple[str, bool], frozenset] | None = None,
                 spec_params: tuple[str, ...] = ()) -> None:
        self.fn, self.qual, self.backend, self.rel = fn, qual, backend, rel
        self.pguards = pguards or {}  # (parameter, truth) -> its callers' guards (reach.py)
        self.mirrors = mirrors  # parameters its callers bind to a host mirror (guards.py)
        self.per_mode = any(isinstance(m, tuple) for _, m in mirrors)  # (reach.mode_binds)
        # what its multi-step owner sets on the spec input before a draft-decode call
        sets = getattr(resolve, "spec_sets", {}).get(backend)
        # (names bound to the spec input: its locals, the parameters its callers bind to it)
        self.spec = (spec_aliases(fn) + spec_params, sets) if sets else ()
        self.resolve = resolve
        flags_for = getattr(resolve, "fn_flags", None)
        self.flags = flags_for(backend, fn) if flags_for is not None else None
        helpers = getattr(resolve, "mode_helpers", {})
        if info is None:
            info = _FnInfo(fn, helpers)
        self.facts = facts | {"@mode-vars": info.mode_vars}
        self.guards: dict[str, frozenset] = getattr(resolve, "mode_guards", {})
        self.env = {"helpers": helpers, "gpu": getattr(resolve, "gpu_true", {}),
                    "params": {k: v for k, v in (params or {}).items()
                               if k not in info.names},
                    "locals": info.locals, "fields": info.fields,
                    "none_on_verify": getattr(resolve, "none_on_verify", None),
                    "none_on_idle": getattr(resolve, "none_on_idle", None),
                    "prefix_on_draft_extend": getattr(resolve, "prefix_on_draft_extend", None)}
        self.kinds = _Kinds(fn, facts, info)
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
        self.memo: list[str] = []  # the one-time cache fills around it (census.memo)
        # why a branch around it cannot run, where a writer fact decided it (co_set_value)
        self.dead: list[str] = []
        self.dead_why: dict[int, str] = {}
        # each call into it: the pairs it reaches it on, its arguments (set by _analyse)
        self.in_calls: list[tuple[frozenset, CallArgs]] = []
        self.used_formula = False  # an argument's truth was read through its callers

    def run(self, state: frozenset, unknown: bool, guards: frozenset = frozenset()) -> None:
        self.stack = sorted(guards, key=guard_order)
        self.known: list[tuple[str | None, bool, str]] = []  # facts in force (paths.facts_of)
        self.block(self.fn.body, state, unknown)

    def cond(self, test: ast.AST) -> Cond:
        """`paths.cond`, and a test the branches around it already decided: an `if a:` nested
        in `if not a:` (or after `if a: return`) cannot run; nor `elif b is not None:` after
        `if a is not None:` where every writer of the speculative input's `b` sets `a` too
        (census.spec_writers)."""
        return self.cond_known(test, {k: h for k, h, _ in self.known if k is not None}
                               if self.known else {})

    def cond_known(self, test: ast.AST, known: dict[str, bool]) -> Cond:
        """`cond` with the facts `known` in force."""
        c = cond(test, self.facts, self.env)
        if known and c.true == ALL and c.false == ALL:
            v = known_value(test, known)
            if v is None:
                v = self.co_set_value(test)
            if v is not None:
                return Cond(ALL, NONE, c.unknown) if v else Cond(NONE, ALL, c.unknown)
        return c

    def spec_field(self, e: ast.AST, line: int, depth: int = 0) -> str | None:
        """The speculative input's field `e` reads: `spec_info.f`, `getattr(spec_info, "f",
        None)`, or a local every reaching assignment binds to one of these."""
        if isinstance(e, ast.Name) and depth < 3:
            prior = self.kinds.prior(e.id, line)
            vals = {self.spec_field(v, ln, depth + 1) if v is not None else None
                    for ln, v in (self.kinds.reaching(prior, line) if prior else [])}
            return vals.pop() if len(vals) == 1 else None
        e = getattr_read(e) or e
        if isinstance(e, ast.Attribute) and _unparse(e.value).split(".")[-1] == "spec_info":
            return e.attr
        return None

    def co_set_value(self, test: ast.AST) -> bool | None:
        """`b is not None` (`b is None`) where a fact in force says `a is None` and every writer
        of the speculative input's `b` sets `a` beside it: false (true)."""
        root = getattr(self.resolve, "root", None)
        if root is None or not (isinstance(test, ast.Compare) and len(test.ops) == 1 and
                                isinstance(test.ops[0], (ast.Is, ast.IsNot)) and
                                isinstance(test.comparators[0], ast.Constant) and
                                test.comparators[0].value is None):
            return None
        b = self.spec_field(test.left, test.lineno)
        if b is None:
            return None
        for key, holds, _ in self.known:
            if key is None or not holds or not key.endswith(" is None"):
                continue
            try:
                left = ast.parse(key[: -len(" is None")], mode="eval").body
            except SyntaxError:
                continue
            a = self.spec_field(left, test.lineno)
            if a is None or a == b or not (writers := co_set(root, b, a)):
                continue
            self.dead_why[id(test)] = (
                f"`{_src(test, 40)}` cannot hold where `{_src(left, 30)}` is None: every writer "
                f"of the speculative input's {b} sets {a} beside it ({writers})")
            return isinstance(test.ops[0], ast.Is)
        return None

    def learn(self, test: ast.AST, holds: bool) -> int:
        """Put the facts a branch on `test` establishes in force; how many were pushed."""
        more = facts_of(test, holds)
        self.known.extend((k, h, k) for k, h in more)
        return len(more)

    def forget(self, names: set[str]) -> None:
        """A statement rebinds `names`: the facts that mention one are no longer known (kept
        as tombstones so that the stack keeps its length)."""
        if not names or not self.known:
            return
        for i, (k, h, text) in enumerate(self.known):
            if k is not None and any(n in text for n in names):
                self.known[i] = (None, h, text)

    def branch(self, test: ast.AST, holds: bool, guards: tuple[Guard, ...],
               stmts: list[ast.stmt], state: frozenset, unknown: bool) -> frozenset:
        n = self.learn(test, holds)
        try:
            return self.guarded(guards, stmts, state, unknown)
        finally:
            del self.known[len(self.known) - n:]

    def guards_of(self, test: ast.AST, where: str, holds: bool) -> tuple[Guard, ...]:
        """`guards.guards_of`, with the parameters this builder's callers bind to a mirror;
        a branch on a parameter that only some callers may pass so adds those callers'
        common guards (`pguards`)."""
        mirrors = self.mirrors
        if self.per_mode:  # less a parameter the callee may rebind before this test
            line = int(where.rpartition(":")[2] or 0)
            mirrors = tuple((p, m) for p, m in mirrors if not isinstance(m, tuple)
                            or not _rebound_before(self.fn, p, line))
        test = _inline_ragged(self.fn, test)
        own = guards_of(test, where, holds, mirrors, self.spec) or \
            self.mode_scoped(test, where, holds, mirrors)
        own = self.through_flags(test, where, holds, mirrors, own)
        if not self.pguards:
            return own
        more = [g for p in _param_atoms(test, holds, self.env["params"])
                for g in self.pguards.get(p, ())]
        return own + tuple(sorted(set(more) - set(own) - set(self.stack),
                                  key=guard_order))

    def through_flags(self, test: ast.AST, where: str, holds: bool, mirrors: MirrorParams,
                      own: tuple[Guard, ...]) -> tuple[Guard, ...]:
        """`own` (the test's guards as it stands), or those of the test with its start-up flags
        inlined (census.flags) where that gives any: each guard a flag's definition brought in
        names the flags it was read through."""
        flags = self.flags
        if flags is None:
            return own
        new, used = flags.inline(test, _recognised)
        if new is test:
            return own
        got = guards_of(new, where, holds, mirrors, self.spec)
        if not got:
            return own
        had = {g[:3] for g in own}
        note = via_note(used)
        return tuple(g if g[:3] in had else (*g[:4], g[4] + note, *g[5:]) for g in got)

    def mode_scoped(self, test: ast.AST, where: str, holds: bool, mirrors: MirrorParams
                    ) -> tuple[Guard, ...]:
        """`mode_test and x` false (or `mode_test or x` true): on the modes where the mode test
        holds (fails), `x` is false (true): one guard scoped to those modes, ("on", "true",
        (modes, x's guard)), where `x` is a configuration or release fact (a data test stays
        out, as in any negated conjunction). 0.5.19 flashattention_backend.py:535 `if
        forward_mode.is_target_verify() and self.topk > 1:` puts `topk <= 1` on its `else`
        on target-verify batches only."""
        if not isinstance(test, ast.BoolOp) or isinstance(test.op, ast.And) == holds or \
                len(test.values) != 2:
            return ()
        memo = getattr(test, "_diag_scoped", None)  # every pass asks again
        if memo is None:
            memo = test._diag_scoped = {}  # type: ignore[attr-defined]
            test._diag_names = {  # type: ignore[attr-defined]
                n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        # what else `cond` reads: what the callers pass for a parameter named in the test
        params = self.env["params"]
        key = (where, holds, mirrors, self.spec, tuple(
            (n, params[n]) for n in test._diag_names if n in params))
        if key not in memo:
            memo[key] = self._mode_scoped(test, where, holds, mirrors)
        return memo[key]

    def _mode_scoped(self, test: ast.BoolOp, where: str, holds: bool, mirrors: MirrorParams
                     ) -> tuple[Guard, ...]:
        modes = [v for v in test.values if _mode_expr(v, self.env["helpers"])]
        rest = [v for v in test.values if v not in modes]
        if len(modes) != 1 or len(rest) != 1:
            return ()
        c = cond(modes[0], self.facts, self.env)
        if c.unknown:
            return ()
        on = step_paths(c.true if isinstance(test.op, ast.And) else c.false)
        inner = guards_of(rest[0], where, holds, mirrors, self.spec)
        if not on or len(inner) != 1 or inner[0][0].startswith("data:"):
            return ()  # a data test stays out, as in any negated conjunction
        return (("on", "true", (on, inner[0]), where,
                 _src(test, 90) if holds else f"not ({_src(test, 90)})"),)

    def spec_state(self, state: frozenset) -> frozenset:
        """`state` less the per-step draft-decode pairs a test around the statement rules
        out: the multi-step owner sets the spec input there (census.draft_steps)."""
        if not self.spec or (DRAFT_DECODE_MODE, "step") not in state:
            return state
        if any(rules_out(g, DRAFT_DECODE_MODE) for g in self.stack):
            return state - {(DRAFT_DECODE_MODE, "step")}
        return state

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
        pushed = learned = 0
        for st in stmts:
            state = self.stmt(st, state, unknown)
            if self.known and not isinstance(st, (ast.Expr, ast.Return, ast.Raise,
                                                  ast.Assert)):
                self.forget(assigned_names(st))
            if isinstance(st, ast.If) and _ends(st.body) and not st.orelse:
                # `if self.dcp_size == 1: return`: what follows runs where it does not hold
                more = self.guards_of(st.test, self._where(st), False)
                self.stack.extend(more)
                pushed += len(more)
                learned += self.learn(st.test, False)
            elif isinstance(st, ast.Assert):
                # `assert seq_lens_cpu is not None`: what follows runs where it holds (0.5.19
                # deepseek_v4_backend_hip_radix.py:1009, then `x if seq_lens_cpu is not None
                # else None` at :1037-1039 passes x)
                learned += self.learn(st.test, True)
                if self.spec:  # `assert spec_info is None` (0.5.23 triton_backend.py:1411)
                    more = [g for g in self.guards_of(st.test, self._where(st), True)
                            if g[0].startswith(("spec:", "any"))]
                    self.stack.extend(more)
                    pushed += len(more)
        if pushed:
            del self.stack[len(self.stack) - pushed:]
        if learned:
            del self.known[len(self.known) - learned:]
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
        if isinstance(st, ast.If) and (attr := memo_fill(st, self.fn)) and \
                attr not in getattr(self.resolve, "emptied", lambda _: ())(self.backend):
            # `if self._x is None: ...; self._x = ...`: the body fills a cache the backend
            # keeps, on the first pass only (census.memo); the rest runs as ever
            self.expr(st.test, state, unknown)
            once = frozenset((m, "once") for m, _ in state)
            self.memo.append(f"`self.{attr}` ({self._where(st)})")
            try:
                body = self.block(st.body, once, unknown)
            finally:
                self.memo.pop()
            # later passes skip the body: what follows runs on every path it reached
            return (state if body else NONE) | self.block(st.orelse, state, unknown)
        if isinstance(st, ast.If):
            self.expr(st.test, state, unknown)
            c = self.cond(st.test)
            unk = unknown or c.unknown
            w = self._where(st)
            dead = self.dead_why.get(id(st.test))
            self.dead.append(dead if dead and not c.true else "")
            try:
                body = self.branch(st.test, True, self.guards_of(st.test, w, True), st.body,
                                   state & c.true, unk)
            finally:
                self.dead.pop()
            self.dead.append(dead if dead and not c.false else "")
            try:
                return body | self.branch(st.test, False, self.guards_of(st.test, w, False),
                                          st.orelse, state & c.false, unk)
            finally:
                self.dead.pop()
        if isinstance(st, (ast.For, ast.AsyncFor, ast.While)):
            self.expr(st.iter if not isinstance(st, ast.While) else st.test, state, unknown)
            # a loop body runs a number of times the census does not count: never exact
            loop = (("data:loop", "true", None, self._where(st),
                     "in a loop (runs a data-dependent number of times)"),)
            if self.known:  # a later pass of the body sees what it rebinds
                self.forget(assigned_names(st))
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
            self.truth_test(e.test, state, unknown)
            self.expr(e.test, state, unknown)
            c = self.cond(e.test)
            w = self._where(e)
            for part, holds, st in ((e.body, True, c.true), (e.orelse, False, c.false)):
                more = self.guards_of(e.test, w, holds)
                self.stack.extend(more)
                n = self.learn(e.test, holds)
                self.expr(part, state & st, unknown or c.unknown)
                del self.stack[len(self.stack) - len(more):]
                del self.known[len(self.known) - n:]
            return
        if isinstance(e, ast.BoolOp):  # `a and b` runs b only where a holds
            tested = getattr(e, "_diag_truth_read", False)
            last = e.values[-1]
            for v, st, unk in self.operands(e, state, unknown, self._where(e)):
                if not tested and v is not last:
                    # outside a branch's test `and`/`or` still read each operand's truth
                    # but the last's (`x = t.any() and y`: bool() of `t.any()`)
                    self.truth_test(v, st, unk)
                self.expr(v, st, unk)
            return
        if isinstance(e, ast.Call):
            self.call(e, state, unknown)
        elif isinstance(e, ast.Subscript):
            self.subscript(e, state, unknown)
        elif isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not) and \
                not getattr(e, "_diag_truth_read", False):
            self.truth_test(e, state, unknown)  # `x = not t.any()`: bool() of `t.any()`
        elif isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
            # `[0] * n` / `"x" * n`: a sequence repeated a device scalar's times (__index__)
            for seq, n in ((e.left, e.right), (e.right, e.left)):
                if isinstance(seq, (ast.List, ast.Tuple, ast.ListComp)) or (
                        isinstance(seq, ast.Constant) and isinstance(seq.value, str)):
                    if self._device_scalar(n, e.lineno):
                        self.add(n, state, unknown, "size", "syncs",
                                 f"`{_src(n, 40)}` repeats a Python sequence and is a device "
                                 "scalar", 1)
        for child in _expr_kids(e):
            self.expr(child, state, unknown)

    def _device_scalar(self, b: ast.AST | None, line: int) -> bool:
        """A device tensor element, a reduction of one (`t.sum()`, `t.max()`) or a name bound to
        one, used where Python needs an int (`__index__` / `__int__` read it back)."""
        if isinstance(b, ast.Call) and not (isinstance(b.func, ast.Attribute)
                                            and b.func.attr in _REDUCTIONS):
            return False
        return isinstance(b, (ast.Subscript, ast.Name, ast.Attribute, ast.BinOp, ast.Call)) \
            and self.kinds.of(b, line) == "tensor"

    def _zero_dim(self, b: ast.AST, line: int, depth: int = 0) -> bool:
        """A 0-dim device tensor: an element of a per-request 1-D batch field at a Python
        integer (`req_pool_indices[seq_idx]`), a full reduction (`t.max()`), or a name every
        assignment reaching `line` binds to one."""
        if depth > 3:
            return False
        if isinstance(b, ast.Subscript):
            v = b.value
            last = v.id if isinstance(v, ast.Name) else v.attr if isinstance(
                v, ast.Attribute) else ""
            return last in _ONE_D and not isinstance(b.slice, (ast.Slice, ast.Tuple)) and \
                self.kinds.of(b.slice, line) == "scalar" and self.kinds.of(v, line) == "tensor"
        if isinstance(b, ast.Call):
            return isinstance(b.func, ast.Attribute) and b.func.attr in _REDUCTIONS and \
                not b.args and not b.keywords and self.kinds.of(b.func.value, line) == "tensor"
        if isinstance(b, ast.Name):
            prior = self.kinds.prior(b.id, line)
            vals = [v for _, v in self.kinds.reaching(prior, line)] if prior else []
            return bool(vals) and all(v is not None and self._zero_dim(v, line, depth + 1)
                                      for v in vals)
        return False

    def subscript(self, e: ast.Subscript, state: frozenset, unknown: bool) -> None:
        """`x[n:]` / `x[:t[-1]]` with a device bound (`__index__` reads it back), `x[i, a:b]`
        with a 0-dim device integer `i` (PyTorch's indexing reads it back,
        `tensor.item<int64_t>()`, then selects), and `x[t > 0]` / `x[mask]` of a device bool mask
        (a data-dependent size): one sync each."""
        sl, line = e.slice, e.lineno
        dims = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        # 0.5.23 torch_native_backend.py:139 `req_to_token[req_pool_idx, start_kv:end_kv]`,
        # `req_pool_idx = req_pool_indices[seq_idx]` (:138): one read for the index
        ints = [d for d in dims if not isinstance(d, ast.Slice) and self._zero_dim(d, line)]
        if any(isinstance(d, ast.Slice) for d in dims):
            # `x[a:b]` and `x[:, a:b, :]`: each device bound is read back, one site per subscript
            # with a sync per bound (0.5.23 torch_native_backend.py:127, both bounds from the
            # request loop's device lengths)
            bounds = [b for d in dims if isinstance(d, ast.Slice)
                      for b in (d.lower, d.upper, d.step)
                      if b is not None and self._device_scalar(b, line)]
            if bounds or ints:
                what = [f"slice bound{'s' if len(bounds) > 1 else ''} "
                        f"{', '.join(f'`{_src(b, 30)}`' for b in bounds)}"] if bounds else []
                what += [f"integer index{'es' if len(ints) > 1 else ''} "
                         f"{', '.join(f'`{_src(b, 30)}`' for b in ints)}"] if ints else []
                n = len(bounds) + len(ints)
                self.add((bounds or ints)[0], state, unknown, "slice-bound", "syncs",
                         f"{' and '.join(what)} {'are device scalars' if n > 1 else 'is a device scalar'}"
                         + ("; a 0-dim device integer index is read back (`item`) before the "
                            "select" if ints else ""), n)
            return
        if ints:
            self.add(ints[0], state, unknown, "index", "syncs",
                     f"integer index{'es' if len(ints) > 1 else ''} "
                     f"{', '.join(f'`{_src(b, 30)}`' for b in ints)}: a 0-dim device integer "
                     f"index is read back (`item`) before the select", len(ints))
            return
        mask = sl
        if isinstance(sl, ast.Name):
            prior = [v for _, v in self.kinds.prior(sl.id, line)]
            mask = prior[-1] if prior else sl
        if isinstance(mask, ast.Compare) and len(mask.ops) == 1 and not isinstance(
                mask.ops[0], (ast.Is, ast.IsNot, ast.In, ast.NotIn)) and \
                self.kinds.of(mask.left, line) == "tensor":
            self.add(e, state, unknown, "bool-mask", "syncs",
                     f"indexing with the device bool mask `{_src(mask, 40)}` (data-dependent "
                     f"size)", 1)

    def compare_test(self, test: ast.Compare, state: frozenset, unknown: bool) -> None:
        """`if t.max() > n:` / `if cu[-1] == total:` with a device scalar on one side: the
        comparison is a device tensor, and the branch calls `bool()` on it (sglang 0.5.23
        kda_backend.py / xpu_backend.py compare host values only: no site). Identity and
        membership tests, and comparisons with None, read nothing."""
        if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in test.ops):
            return
        sides = [test.left, *test.comparators]
        if any(isinstance(x, ast.Constant) and x.value is None for x in sides):
            return
        for x in sides:
            if self._device_scalar(x, test.lineno):
                self.add(test, state, unknown, "bool()", "syncs",
                         f"`{_src(x, 40)}` is a device scalar; a branch on `{_src(test, 50)}` "
                         f"reads the comparison back", 1)
                return

    def truth_test(self, test: ast.AST, state: frozenset, unknown: bool) -> None:
        """`if torch.all(t == n):` / `if t.any():` / `if t.max() > n:` of a device tensor:
        `bool()` reads it back (one sync per test that runs)."""
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test._diag_truth_read = True  # type: ignore[attr-defined]  (expr: not again)
            test = test.operand
        if isinstance(test, ast.BoolOp):  # `a and b`: each operand is a test of its own
            test._diag_truth_read = True  # type: ignore[attr-defined]  (expr: not again)
            for v in test.values:
                self.truth_test(v, state, unknown)
            return
        if isinstance(test, ast.Compare):
            self.compare_test(test, state, unknown)
            return
        if isinstance(test, (ast.Name, ast.Attribute, ast.Subscript)) and \
                self._device_scalar(test, test.lineno):
            # `if t:` / `if t[0]:` of a device tensor: bool() reads its one element back
            self.add(test, state, unknown, "bool()", "syncs",
                     f"`{_src(test, 40)}` is a device tensor; a branch on it reads it back", 1)
            return
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
            picks = [(target[0], target[1], ())]
        else:  # a conditional alias: each method it may bind, under the tests that choose it
            alts = getattr(self.resolve, "alternatives", None)
            picks = [(q, d, tuple(g for t, holds in tests
                                  for g in guards_of(t, self._where(t), holds)))
                     for q, d, tests in (alts(self.backend, call, self.fn) if alts else ())]
        state = self.spec_state(state)
        for cqual, cfn, chosen in picks:
            args, truth, binds, given = self._args(cfn, call, state)
            callee = getattr(self.resolve, "owner", {}).get(id(cfn), self.backend)
            self.edges.append(_Edge((cqual, callee), state, unknown, args, truth,
                                    f"{self.rel}:{call.lineno} {self.qual}",
                                    frozenset(self.stack) | frozenset(chosen), binds, given))
        self.check(call, state, unknown)

    def _args(self, callee: ast.FunctionDef, call: ast.Call, state: frozenset
              ) -> tuple[dict[str, str], dict[str, tuple[frozenset, frozenset]],
                         dict[str, str], CallArgs | None]:
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
            # *args / **kwargs: the census cannot match arguments to parameters
            return {}, {}, {}, None
        given |= {k.arg: k.value for k in call.keywords if k.arg}
        out: dict[str, str] = {}
        truth = {}
        binds: dict[str, str] = {}
        known = {k: h for k, h, _ in self.known if k is not None}
        none_tested = _none_tested(callee)
        passed: dict[str, ast.AST] = {}
        for name in params + [a.arg for a in callee.args.kwonlyargs]:
            value = given.get(name, defaults.get(name))
            if value is None:
                continue
            value = passed[name] = _settled(value, known)
            c = cond(value, self.facts, self.env)
            if state & c.true & c.false and self.in_calls and isinstance(
                    value, (ast.BoolOp, ast.UnaryOp)) and \
                    name in truth_tested(callee) and mentions_params(value, self.fn,
                                                                      call.lineno):
                # a test true and false on a pair: read it per call into this function,
                # where its parameters are the arguments (census.formulas; a bare name has no
                # two atoms to tie)
                self.used_formula = True
                got = through_callers(value, self.fn, call.lineno, self.cond, self.in_calls,
                                      state)
                if got is not None:
                    c = Cond(got[0], got[1], c.unknown)
            truth[name] = (state & c.true, state & c.false)
            if name in given and name in none_tested and \
                    (m := argument_mirror(value, self.fn, call.lineno, mirrors=self.mirrors)):
                binds[name] = f"mirror:{m}"
            if isinstance(value, ast.Constant) and value.value is None:
                out[name] = "none"
                if name in none_tested:
                    binds[name] = "none"
            elif name in given and self.kinds.of(value, call.lineno) == "host":
                # a host value made here (`t.tolist()`, a list), or one the branches around
                # the call prove set (`else` of `if fb.seq_lens_cpu is None`), is never None:
                # a callee's fallback `if p is None: p = x.tolist()` cannot run for it (0.5.23
                # qwen_sparse_attn_backend.py:2087-2093 -> :2050-2051)
                out[name] = "host-set" if isinstance(value, (
                    ast.Call, ast.List, ast.ListComp, ast.Tuple, ast.BinOp)) or \
                    _known_set(value, known) else "host"
            elif name in given and self.kinds.of(value, call.lineno) == "tensor":
                # a device tensor handed down: the callee's `int(p.max())` reads it back
                # (0.5.23 qwen_sparse_attn_backend.py:632 -> :311)
                out[name] = "tensor"
            else:
                out[name] = "other"
        return out, truth, binds, CallArgs(passed, lambda e, k=known: self.cond_known(e, k))

    def add(self, call: ast.Call, state: frozenset, unknown: bool, kind: str, verdict: str,
            why: str, n: int) -> None:
        if not verdict:
            return
        state = self.spec_state(state)
        pclass = path_class(state, unknown)
        syncs = n if verdict == "syncs" else 0  # what the call costs where it runs
        if pclass == "unreachable":
            verdict, why = "unreachable", self._fast_path_why() or next(
                (d for d in reversed(self.dead) if d), "") or (
                "in a branch that cannot run (its condition contradicts the branches around "
                "it, or no caller reaches it)")
        elif pclass == "capture-only" and verdict != "host-mirror":
            verdict, why = "capture-only", "runs only while a graph is captured"
        elif pclass == "once" and verdict != "host-mirror":
            fill = f"fills the cache {self.memo[-1]}" if self.memo else \
                "reached only from the fill of a cache the backend keeps"
            verdict, why = "once", f"runs on the first pass only: it {fill}, which later " \
                f"passes reuse ({why})"
        # a helper object's method counts for the backend that holds it (census.objects)
        backend = getattr(self.resolve, "held_by", {}).get(self.backend, self.backend)
        self.sites.append(Site(self.rel, call.lineno, self.qual, backend, _src(call), kind,
                               verdict, why, syncs, call.col_offset,
                               step_paths(state), pclass,
                               guards=tuple(dict.fromkeys(self.stack))))

    def _fast_path_why(self) -> str:
        """Why a site after `if self.<fast path>(...): ...; return` cannot run on a GPU."""
        for g in self.stack:
            name = g[0].removeprefix("data:self.").split("(", 1)[0]
            if g[0].startswith("data:self.") and g[1] == "false" and name in self.env["gpu"]:
                return (f"after the GPU fast path at {g[3]}, which returns first on every GPU: "
                        f"{self.env['gpu'][name]}")
        return ""

    def conditional_output_size(self, call: ast.Call, reps: ast.AST, out_size: ast.IfExp,
                                state: frozenset, unknown: bool) -> None:
        """`output_size=n if exact else None` (sglang 0.5.20 deepseek_v4_backend_hip_radix.py:
        1348, 0.5.23 :2726): no sync where the test holds; where it does not, the 2 syncs of a
        repeat_interleave without output_size. The test is read like a branch (a parameter's
        callers, the configuration, a data test kept as a guard); which arm is None decides."""
        c = self.cond(out_size.test)
        none_body = isinstance(out_size.body, ast.Constant) and out_size.body.value is None
        bare = state & (c.true if none_body else c.false)
        if not bare:
            return  # every path that reaches it passes the size
        verdict, why = _classify(self.kinds.of(reps, call.lineno), f"repeats `{_src(reps, 40)}`")
        if verdict == "syncs":
            why += f"; output_size is None where `{_src(out_size.test, 40)}` is " \
                f"{'true' if none_body else 'false'}: PyTorch reads the total back (2 syncs)"
        more = self.guards_of(out_size.test, self._where(out_size), none_body)
        self.stack.extend(more)
        self.add(call, bare, unknown or c.unknown, "repeat_interleave", verdict, why, 2)
        del self.stack[len(self.stack) - len(more):]

    def conditional_device(self, call: ast.Call, value: ast.AST, kind: str, state: frozenset,
                           unknown: bool) -> bool:
        """`(a_cpu if c else a).tolist()`, or the read of a local bound once to such a choice:
        a device tensor on one arm and a host value on the other syncs only where the device
        arm is taken. Counted there, the arm's test kept as a guard (the configuration and the
        release's host-mirror facts decide it, as a branch's); where no path takes the device
        arm, a host read. True where the value is such a choice (the site is added), else
        False (the caller reads the value's kind as ever)."""
        x = value
        if isinstance(x, ast.Name):
            prior = self.kinds.prior(x.id, call.lineno)
            x = prior[0][1] if len(prior) == 1 else None
        if not isinstance(x, ast.IfExp):
            return False
        arms = (self.kinds.of(x.body, x.lineno), self.kinds.of(x.orelse, x.lineno))
        if sorted(arms) not in (["host", "tensor"], ["scalar", "tensor"]):
            return False
        device_holds = arms[0] == "tensor"
        c = self.cond(x.test)
        taken = state & (c.true if device_holds else c.false)
        what = f"`{_src(value, 40)}`"
        if not taken:
            self.add(call, state, unknown, kind, "host-mirror",
                     f"{what} is a host value: `{_src(x.test, 40)}` never takes its device arm "
                     "here", 1)
            return True
        more = self.guards_of(x.test, self._where(x), device_holds)
        self.stack.extend(more)
        self.add(call, taken, unknown or c.unknown, kind, "syncs",
                 f"{what} is a device tensor where `{_src(x.test, 40)}` is "
                 f"{'true' if device_holds else 'false'} (a host value on the other arm)", 1)
        del self.stack[len(self.stack) - len(more):]
        return True

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
                self.conditional_output_size(call, reps, out_size, state, unknown)
                return
            verdict, why = _classify(kinds.of(reps, line), f"repeats `{_src(reps, 40)}`")
            if verdict == "syncs":
                why += "; no output_size: PyTorch reads the total back (2 syncs)"
            add(name, verdict, why, 2)
        elif isinstance(f, ast.Attribute) and name in _HOST_READ_METHODS and not call.args:
            if self.conditional_device(call, f.value, name, state, unknown):
                return None
            verdict, why = _classify(kinds.of(f.value, line), f"`{_src(f.value, 40)}`")
            add(name, verdict, why, 1)
        elif isinstance(f, ast.Attribute) and name == "to" and any(
                isinstance(a, ast.Constant) and a.value == "cpu"
                for a in [*call.args, *(k.value for k in call.keywords)]) and \
                not _non_blocking(call):  # a non-blocking copy does not wait by itself
            verdict, why = _classify(kinds.of(f.value, line), f"`{_src(f.value, 40)}`")
            add("to(cpu)", verdict, why, 1)
        elif name in _DYNAMIC and (is_torch or isinstance(f, ast.Attribute)):
            arg = call.args[0] if is_torch and call.args else f.value if not is_torch else None
            if arg is None:
                return
            verdict, why = _classify(kinds.of(arg, line), f"`{_src(arg, 40)}`")
            if verdict == "syncs":
                why += f"; {name} has a data-dependent output size"
            add(name, verdict, why + _DYNAMIC_WHY.get(name, ""), _DYNAMIC_SYNCS.get(name, 1))
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
        elif name in _SHAPED and isinstance(f, ast.Attribute) and not is_torch:
            # `x.view(n, -1)` / `x.expand(n, d)` / `x.narrow(0, s, n)`: a size (or narrow's
            # start) is a Python int; a device scalar there is read back through __index__
            args = list(call.args[_SHAPED[name]:])
            if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
                args = list(args[0].elts)
            for a in args:
                if self._device_scalar(a, line):
                    self.add(a, state, unknown, "size", "syncs",
                             f"size `{_src(a, 40)}` of {name} is a device scalar", 1)
        elif name in _CLAMPS and (is_torch or isinstance(f, ast.Attribute)):
            # `x.clamp(0, t[-1] - 1)`: beside a Python number PyTorch's parser picks the Scalar
            # overload and reads a 0-dim tensor bound as a Scalar (`aten._local_scalar_dense`,
            # an `.item()`); with tensors or None on both sides the Tensor overload reads
            # nothing (0.5.19 hybrid_linear_attn_backend.py:344, 0.5.23 :443)
            bounds = list(call.args[1:3] if is_torch else call.args[0:2]) + [
                k.value for k in call.keywords if k.arg in ("min", "max")]
            if any(kinds.of(b, line) == "scalar" for b in bounds):
                for b in bounds:
                    if self._device_scalar(b, line):
                        self.add(b, state, unknown, "scalar-arg", "syncs",
                                 f"bound `{_src(b, 40)}` of {name} is a device scalar beside a "
                                 f"Python number: read back as a Scalar", 1)
        elif (is_torch and name in ("tensor", "as_tensor") and call.args
              and _blocking_copy(call, False) and kinds.of(call.args[0], line) != "tensor") or (
                isinstance(f, ast.Attribute) and not is_torch and name in ("to", "cuda")
                and _blocking_copy(call, True) and kinds.of(f.value, line) == "host"):
            # A blocking copy from host memory (no `non_blocking=True`): PyTorch's
            # `copy_kernel_cuda` calls `memcpy_and_sync`, which waits for the stream to drain
            # (and the sync debug mode reports it), like a read back
            what = call.args[0] if is_torch else f.value
            add("h2d", "syncs", f"`{_src(what, 40)}` is host data copied to the device without "
                "non_blocking: the copy waits for the stream", 1)
        elif isinstance(f, ast.Attribute) and not is_torch and name == "new_tensor" \
                and call.args and kinds.of(call.args[0], line) != "tensor":
            # `t.new_tensor([n])`: host data onto `t`'s device (or `device=`), the same blocking
            # copy as torch.tensor(data, device=d) (0.5.19 flashattention_backend.py:1540,
            # 0.5.23 :1764)
            if any(k.arg == "device" for k in call.keywords):
                if not _blocking_copy(call, False):
                    return
                verdict, why = "syncs", "`device=` names a device"
            else:
                verdict, why = _classify(kinds.of(f.value, line), f"`{_src(f.value, 40)}`")
                if verdict == "host-mirror":
                    return  # a host tensor's new_tensor stays on the host
            if verdict == "syncs":
                why += f"; new_tensor copies the host data `{_src(call.args[0], 30)}` there " \
                    "without non_blocking: the copy waits for the stream"
            add("h2d", verdict, why, 1)
        elif is_torch and name == "equal" and len(call.args) == 2:
            # `torch.equal(a, b)` returns a Python bool: it reads the comparison back from the
            # device (0.5.23 aiter_backend.py:1358-1359, the ASM context-gather self-check)
            ks = [kinds.of(a, line) for a in call.args]
            verdict, why = _classify("tensor" if "tensor" in ks else "host" if ks == [
                "host", "host"] else "unknown", f"`{_src(call.args[0], 40)}`")
            add("equal", verdict, why + ("; torch.equal returns a Python bool"
                                         if verdict == "syncs" else ""), 1)
        elif isinstance(f, ast.Name) and name == "range":
            # `range(t)` / `range(t[i], n)`: range calls __index__ on each bound
            for a in call.args:
                if self._device_scalar(a, line):
                    self.add(a, state, unknown, "size", "syncs",
                             f"range bound `{_src(a, 40)}` is a device scalar", 1)
        elif isinstance(f, ast.Name) and name in ("int", "float", "bool") and len(call.args) == 1:
            arg = call.args[0]
            if name != "bool" or not isinstance(arg, ast.BoolOp):
                self._conversion(name, arg, line, add)
                return
            # `bool(m is not None and m.any())`: `and`/`or` read each operand's truth but the
            # last, bool() the last; an operand runs only where the ones before it let it (0.5.19
            # hybrid_linear_attn_backend.py:137-140: the mask's `.any()` only when it is set)
            # (and where its paths let it: a field a target-verify batch leaves None makes
            # `m is not None` false there, census.batch_fields)
            arg._diag_truth_read = True  # type: ignore[attr-defined]  (expr: not again)
            for v, st, unk in self.operands(arg, state, unknown, self._where(call)):

                def add_at(kind: str, verdict: str, why: str, n: int,
                           st: frozenset = st, unk: bool = unk) -> None:
                    self.add(call, st, unk, kind, verdict, why, n)

                self._conversion(name, v, line, add_at)

    def operands(self, e: ast.BoolOp, state: frozenset, unknown: bool, where: str
                 ) -> Iterator[tuple[ast.expr, frozenset, bool]]:
        """Each operand of `a and b` (`a or b`) with the paths it runs on and, pushed on the
        guard stack while it is read, the data guards of the operands before it: `b` runs
        only where `a` holds (fails). The guards come off when the walk ends."""
        holds = isinstance(e.op, ast.And)
        pushed = 0
        try:
            for v in e.values:
                yield v, state, unknown
                c = cond(v, self.facts, self.env)
                state, unknown = state & (c.true if holds else c.false), unknown or c.unknown
                more = self.guards_of(v, where, holds)
                self.stack.extend(more)
                pushed += len(more)
        finally:
            if pushed:
                del self.stack[len(self.stack) - pushed:]

    def _conversion(self, name: str, arg: ast.AST, line: int, add: Any) -> None:
        """`int(x)` / `float(x)` / `bool(x)` of one value: a reduction of a device tensor, or an
        element (a name) the census knows is on the device."""
        kinds = self.kinds
        if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and \
                arg.func.attr in _REDUCTIONS:
            inner = arg.func.value
            if isinstance(inner, ast.Name) and inner.id in ("torch", "np", "numpy") \
                    and arg.args:
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


# ops with a Scalar and a Tensor overload of their bounds (`clamp(Tensor, Scalar?, Scalar?)`)
_CLAMPS = ("clamp", "clamp_", "clip", "clip_")
# Tensor methods whose arguments from this index on are sizes (narrow: its start and length)
_SHAPED = {"view": 0, "reshape": 0, "expand": 0, "repeat": 0, "tile": 0, "narrow": 1,
           "unflatten": 1}


def _settled(value: ast.AST, known: dict[str, bool]) -> ast.AST:
    """An argument as the facts in force leave it: `a if t else b` with `t` decided is `a`
    (or `b`)."""
    while isinstance(value, ast.IfExp) and known:
        v = known_value(value.test, known)
        if v is None:
            break
        value = value.body if v else value.orelse
    return value


def _known_set(value: ast.AST, known: dict[str, bool]) -> bool:
    """Whether the facts in force say `value is None` is false."""
    if not known or not isinstance(value, (ast.Name, ast.Attribute)):
        return False
    return known_value(ast.Compare(value, [ast.Is()], [ast.Constant(None)]), known) is False
