"""The census's guards: the configuration and host-mirror tests on the way to a site
(`guards_of`, `call_site_guards`), which the paths take both ways and a configuration decides
(probes.metadata_syncs.census_config).
"""

from __future__ import annotations

import ast

from diag.probes.metadata_syncs.census.paths import _CAPTURE_FLAG, _kids, _last_name, _mode_expr
from diag.probes.metadata_syncs.census.sites import Guard, _src
from diag.probes.source import unparse as _unparse
from diag.probes.source import walk_all as _walk

# --- configuration and host-mirror guards ------------------------------------------------
# A branch on a value the configuration fixes (`if self.dcp_size > 1:`) or on whether a host
# mirror is present (`if forward_batch.extend_seq_lens_cpu is not None:`) is not a forward-mode
# test: the paths take it both ways. Each site keeps the guards on the way to it, so that a
# configuration (probes.metadata_syncs.probe) can say which are live, unreachable or undecided.
# Backend attributes and server arguments -> the SpecConfig field that fixes them.
CONFIG_NAMES = {"dcp_size": "dcp_size", "attn_dcp_size": "dcp_size",
                "page_size": "page_size", "topk": "speculative_eagle_topk",
                "speculative_eagle_topk": "speculative_eagle_topk",
                "speculative_num_draft_tokens": "speculative_num_draft_tokens",
                "num_draft_tokens": "speculative_num_draft_tokens",
                "speculative_num_steps": "speculative_num_steps"}
# What the served model decides (probes.metadata_syncs.model_facts): the backend's sliding
# window, from the model runner (0.5.23 load_model_utils.py:144-157).
MODEL_NAMES = {"sliding_window_size": "model:sliding_window_size"}
# Platform flags (sglang.srt.utils `is_hip()` / `_is_hip = is_hip()` / `self.is_npu`): a test of
# one is the platform under audit; diag audits hip and cuda, never npu or xpu.
PLATFORM_NAMES = {"is_hip": "hip", "_is_hip": "hip", "is_cuda": "cuda", "_is_cuda": "cuda",
                  "is_npu": "npu", "_is_npu": "npu", "is_xpu": "xpu", "_is_xpu": "xpu"}
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=",
        ast.Is: "is", ast.IsNot: "is not"}
_NEGATE = {"==": "!=", "!=": "==", ">": "<=", ">=": "<", "<": ">=", "<=": ">", "is": "is not",
           "is not": "is", "true": "false", "false": "true"}
_SWAP = {"==": "==", "!=": "!=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}


def _guard_atom(e: ast.AST, where: str) -> Guard | None:
    flag = e.func if isinstance(e, ast.Call) and not e.args and not e.keywords else e
    if isinstance(flag, (ast.Name, ast.Attribute)) and _last_name(flag) in PLATFORM_NAMES:
        return ("platform", "==", PLATFORM_NAMES[_last_name(flag)], where, _src(e, 60))
    if not (isinstance(e, ast.Compare) and len(e.ops) == 1 and type(e.ops[0]) in _OPS):
        return None
    left, op, right = e.left, _OPS[type(e.ops[0])], e.comparators[0]
    if isinstance(left, ast.Constant) and op in _SWAP:
        left, right, op = right, left, _SWAP[op]
    name = _last_name(left) if isinstance(left, (ast.Attribute, ast.Name)) else ""
    if not isinstance(right, ast.Constant):
        return None
    if name in CONFIG_NAMES and isinstance(right.value, int) and \
            not isinstance(right.value, bool) and op in _SWAP:
        return (CONFIG_NAMES[name], op, right.value, where, _src(e, 60))
    if name in MODEL_NAMES and op in ("is", "is not", *_SWAP) and (
            right.value is None or (isinstance(right.value, int)
                                    and not isinstance(right.value, bool))):
        return (MODEL_NAMES[name], op, right.value, where, _src(e, 60))
    if name.endswith("_cpu") and right.value is None and op in ("is", "is not") and \
            isinstance(left, ast.Attribute):
        return (f"mirror:{name}", op, None, where, _src(e, 60))
    return None


def _data_atom(e: ast.AST, where: str) -> Guard | None:
    """Any other test that is not of the forward mode or a capture flag (those shape the
    paths): a condition on data or the model, which no configuration input decides; kept so
    that a count over a site behind one is never called exact."""
    text = _unparse(e)
    if _mode_expr(e, {}) or "forward_mode" in text or "ForwardMode" in text or any(
            isinstance(n, (ast.Name, ast.Attribute)) and _CAPTURE_FLAG.search(_last_name(n))
            for n in _walk(e)):
        return None
    return (f"data:{_src(e, 60)}", "true", None, where, _src(e, 60))


def guards_of(e: ast.AST, where: str, holds: bool) -> tuple[Guard, ...]:
    """The guards a branch on `e` puts on its body (`holds`) or its `else`: every atom of a
    conjunction on the body, every negated atom of a disjunction on the `else`. Kept on the
    node (the fixpoint reads each test again on every pass)."""
    memo = getattr(e, "_diag_guards", None)
    if memo is None:
        memo = e._diag_guards = {}  # type: ignore[attr-defined]
    key = (where, holds)
    if key not in memo:
        memo[key] = _guards_of(e, where, holds)
    return memo[key]


def _guards_of(e: ast.AST, where: str, holds: bool) -> tuple[Guard, ...]:
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        return guards_of(e.operand, where, not holds)
    if isinstance(e, ast.BoolOp):
        if isinstance(e.op, ast.And) == holds:  # `a and b` true / `a or b` false: each part
            return tuple(g for v in e.values for g in guards_of(v, where, holds))
        return ()
    g = _guard_atom(e, where) or _data_atom(e, where)
    if g is None:
        return ()
    if holds:
        return (g,)
    return ((g[0], _NEGATE[g[1]], g[2], g[3], f"not ({g[4]})"),)


def common_guards(sets: list[frozenset]) -> frozenset:
    """The guards (fact, test, value) every one of `sets` holds, each kept at its first place."""
    keyed = [{g[:3]: g for g in gs} for gs in sets]
    keys = set.intersection(*(set(k) for k in keyed))
    return frozenset(min((k[key] for k in keyed), key=_place) for key in keys)


def _place(g: Guard) -> tuple[str, int]:
    file, _, line = g[3].rpartition(":")
    return file, int(line) if line.isdigit() else 0


def _call_index(cls: ast.ClassDef, rel: str) -> dict[str, list[tuple[str, frozenset]]]:
    """`self.<name>(...)` calls in the class's methods: name -> [(caller, the guards around the
    call in the caller)], from one walk of the class (kept on the node)."""
    out = getattr(cls, "_diag_calls", None)
    if out is not None:
        return out
    out = {}

    def visit(n: ast.AST, caller: str, stack: tuple) -> None:
        if isinstance(n, (ast.If, ast.IfExp)):
            visit(n.test, caller, stack)
            w = f"{rel}:{n.lineno}"
            for part, holds in ((n.body, True), (n.orelse, False)):
                more = stack + guards_of(n.test, w, holds)
                for x in (part if isinstance(part, list) else [part]):
                    visit(x, caller, more)
            return
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                isinstance(n.func.value, ast.Name) and n.func.value.id == "self":
            out.setdefault(n.func.attr, []).append((caller, frozenset(stack)))
        for c in _kids(n):
            visit(c, caller, stack)

    for m in cls.body:
        if isinstance(m, ast.FunctionDef):
            for st in m.body:
                visit(st, m.name, ())
    cls._diag_calls = out  # type: ignore[attr-defined]
    return out


def call_site_guards(cls: ast.ClassDef, method: str, rel: str, depth: int = 0,
                     seen: frozenset = frozenset()) -> frozenset:
    """The guards on every in-class call of `self.<method>(...)` (a named builder called from
    `forward_*`, which the census does not walk): the tests around each call, and those of
    the caller's own callers, kept where every call site has them. A method no other method of
    the class calls is an entry point: no guard."""
    if depth > 4 or method in seen:
        return frozenset()
    sites = [g | call_site_guards(cls, caller, rel, depth + 1, seen | {method})
             for caller, g in _call_index(cls, rel).get(method, []) if caller != method]
    return common_guards(sites) if sites else frozenset()


def _ends(stmts: list[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Raise, ast.Continue,
                                                  ast.Break))
