"""The census's guards: the configuration and host-mirror tests on the way to a site
(`guards_of`, `call_site_guards`), which the paths take both ways and a configuration decides
(probes.metadata_syncs.census_config).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from diag.probes.metadata_syncs.census.draft_steps import DRAFT_DECODE_MODE, SPEC
from diag.probes.metadata_syncs.census.flags import arch_call, env_read
from diag.probes.metadata_syncs.census.paths import (
    _CAPTURE_FLAG,
    _kids,
    _last_name,
    _mode_expr,
    assigned_names,
)
from diag.probes.metadata_syncs.census.sites import Guard, _src
from diag.probes.source import inner as _inner
from diag.probes.source import spans_line, text_lines
from diag.probes.source import unparse as _unparse
from diag.probes.source import walk_all as _walk

# --- configuration and host-mirror guards ------------------------------------------------
# A branch on a value the configuration fixes (`if self.dcp_size > 1:`) or on whether a host
# mirror is present (`if forward_batch.extend_seq_lens_cpu is not None:`) is not a forward-mode
# test: the paths take it both ways. Each site keeps the guards on the way to it, so that a
# configuration (probes.metadata_syncs.probe) can say which are live, unreachable or undecided.
# Backend attributes and server arguments -> the SpecConfig field that fixes them.
# `self.dcp_world_size` is the attention DCP size (`self.dcp_world_size =
# get_parallel().attn_dcp_size`: 0.5.23 aiter_backend.py:387, flashmla_backend.py:118; 0.5.19
# flashmla_backend.py:112).
CONFIG_NAMES = {"dcp_size": "dcp_size", "attn_dcp_size": "dcp_size",
                "dcp_world_size": "dcp_size",
                "page_size": "page_size", "topk": "speculative_eagle_topk",
                "speculative_eagle_topk": "speculative_eagle_topk",
                "speculative_num_draft_tokens": "speculative_num_draft_tokens",
                "num_draft_tokens": "speculative_num_draft_tokens",
                "speculative_num_steps": "speculative_num_steps"}
# Start-up switches that are a configuration test: `get_parallel().dcp_enabled` is `dcp_size >
# 1` (0.5.23 runtime_context.py:169 `dcp_enabled=cfg.dcp_size > 1`; 0.5.19 :348-353 and 0.5.17
# :242-248, the DCP group's world size above 1).
CONFIG_FLAGS = {"dcp_enabled": ("dcp_size", ">", 1)}
# What the served model decides (probes.metadata_syncs.model_facts): the backend's sliding
# window, from the model runner (0.5.23 load_model_utils.py:144-157).
MODEL_NAMES = {"sliding_window_size": "model:sliding_window_size"}
# flashinfer's wrapper dispatch, a model fact as the backend sets it (0.5.23
# flashinfer_backend.py:411-419): SLIDING_WINDOW where the model runner has a sliding window,
# CROSS_ATTENTION for an encoder-decoder model (configs/model_config.py:871), else None.
DISPATCH = {"SLIDING_WINDOW": ("model:sliding_window_size", "is not", None),
            "CROSS_ATTENTION": ("model:encoder_decoder", "==", True)}
# fa3's chunked local attention, built only for a model_config `is_local_attention_model`
# (Llama 4): `self.local_attn_builder is not None` (0.5.23 flashattention_backend.py:383-386),
# `self.has_local_attention` (0.5.19 :227, 0.5.23 :243)
LOCAL_BUILDER, LOCAL_FLAG = "local_attn_builder", "has_local_attention"
# Backend flags (`self.<flag>`) the model decides: the local-attention flag above; fa3's
# prefill-aware sliding window, the model runner's flag from the model class (0.5.23
# flashattention_backend.py:257, model_executor/model_runner.py:1357-1360); and MLA: every
# backend's `self.use_mla` is `model_config.attention_arch == AttentionArch.MLA` or the model
# runner's `use_mla_backend`, the same test (0.5.9 - 0.5.23, 79 assignments; 0.5.23
# aiter_backend.py:385, model_executor/model_runner.py:406)
MODEL_FLAGS = {LOCAL_FLAG: "model:local_attention",
               "is_prefill_aware_swa": "model:prefill_aware_swa", "use_mla": "model:mla"}
# `forward_batch.encoder_lens` is set for every batch of an encoder-decoder target model and
# for no other (0.5.23 managers/schedule_batch.py:3128-3129 -> :2748; ForwardBatch.init_new
# copies it, model_executor/forward_batch_info.py:1076); the graph runners pass an
# `encoder_lens` argument likewise: their buffer exists only for such a model
# (model_executor/runner/base_runner.py:160-165, decode_cuda_graph_runner.py:217) and the
# draft-extend runners pass None (speculative/eagle_draft_extend_cuda_graph_runner.py:652)
ENCODER_LENS = "encoder_lens"
# The speculative input's ragged verify layout (`getattr(forward_batch.spec_info,
# "ragged_verify_layout", None)`, 0.5.23 flashattention_backend.py:1038-1041): the class default
# None (speculative/spec_info.py:408) except for an algorithm whose `supports_ragged_verify()`
# is true (:160-164). The census fills in that list from the release (`RAGGED_FACT`'s value:
# (algorithms, where), census.count); the configuration's algorithm decides.
RAGGED, RAGGED_FACT = "ragged_verify_layout", "algo:ragged_verify"
# Platform flags (sglang.srt.utils `is_hip()` / `_is_hip = is_hip()` / `self.is_npu`): a test of
# one is the platform under audit; diag audits hip and cuda, never npu or xpu.
PLATFORM_NAMES = {"is_hip": "hip", "_is_hip": "hip", "is_cuda": "cuda", "_is_cuda": "cuda",
                  "is_npu": "npu", "_is_npu": "npu", "is_xpu": "xpu", "_is_xpu": "xpu"}
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=",
        ast.Is: "is", ast.IsNot: "is not"}
_NEGATE = {"==": "!=", "!=": "==", ">": "<=", ">=": "<", "<": ">=", "<=": ">", "is": "is not",
           "is not": "is", "true": "false", "false": "true"}
_SWAP = {"==": "==", "!=": "!=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}
# Guards a fact of the release decides, no configuration given (census_config.release_paths)
_RELEASE_FACTS = ("spec:", "mirror:", "bind:")
# (names bound to forward_batch.spec_info, ((attribute, where set), ...)): what a per-step
# backend's multi-step owner sets before every draft-decode call (census.draft_steps)
SpecFacts = tuple
# (parameter, host mirror) pairs of one function (`param_mirrors`), or (parameter, ((mode,
# binding, calls), ...)) where the binding differs by mode (`reach.mode_binds`); a memo key
MirrorParams = tuple[tuple[str, Any], ...]


def _spec_atom(e: ast.AST, where: str, spec: SpecFacts) -> Guard | None:
    """`spec_info is None` / `spec_info.kv_indptr is None` (spec_info bound to
    `forward_batch.spec_info`) in a per-step backend whose multi-step owner sets that on every
    draft-decode call (census.draft_steps): (`spec:<attr>`, op, ((mode, where set), ...))."""
    if not spec or not (isinstance(e, ast.Compare) and len(e.ops) == 1 and
                        isinstance(e.ops[0], (ast.Is, ast.IsNot)) and
                        isinstance(e.comparators[0], ast.Constant) and
                        e.comparators[0].value is None):
        return None
    aliases, attrs = spec
    left, op = e.left, _OPS[type(e.ops[0])]

    def is_spec(x: ast.AST) -> bool:
        return (isinstance(x, ast.Name) and x.id in aliases) or _unparse(x) == SPEC

    if is_spec(left):  # the spec input itself: set wherever one of its attributes is
        attr, at = "", attrs[0][1]
    elif isinstance(left, ast.Attribute) and is_spec(left.value) and left.attr in dict(attrs):
        attr, at = left.attr, dict(attrs)[left.attr]
    else:
        return None
    return (f"spec:{attr}", op, ((DRAFT_DECODE_MODE, at),), where, _src(e, 60))


def _guard_atom(e: ast.AST, where: str, mirrors: MirrorParams = (), spec: SpecFacts = ()
                ) -> Guard | None:
    if spec and (g := _spec_atom(e, where, spec)) is not None:
        return g
    if (arch := arch_call(e)) is not None:  # the GPU arch (value: census.switches.fill)
        return (f"arch:{arch}", "==", None, where, _src(e, 60))
    if (env := env_read(e)) is not None:  # a boolean switch (value: reader, default, where)
        return (f"env:{env[0]}", "==", (env[1], env[2], None), where, _src(e, 60))
    flag = e.func if isinstance(e, ast.Call) and not e.args and not e.keywords else e
    if isinstance(flag, (ast.Name, ast.Attribute)) and _last_name(flag) in PLATFORM_NAMES:
        return ("platform", "==", PLATFORM_NAMES[_last_name(flag)], where, _src(e, 60))
    if isinstance(e, ast.Attribute) and e.attr in MODEL_FLAGS and _is_self(e.value):
        return (MODEL_FLAGS[e.attr], "==", True, where, _src(e, 60))
    if isinstance(e, ast.Attribute) and e.attr in CONFIG_FLAGS:
        return (*CONFIG_FLAGS[e.attr], where, _src(e, 60))
    if not (isinstance(e, ast.Compare) and len(e.ops) == 1 and type(e.ops[0]) in _OPS):
        return None
    left, op, right = e.left, _OPS[type(e.ops[0])], e.comparators[0]
    if isinstance(right, ast.Constant) and isinstance(right.value, str) and \
            op in ("==", "!=") and (env := env_read(left)) is not None and env[1] == "envs":
        # `envs.N.get() == "x"` of an EnvStr (its default: census.switches.fill)
        return (f"env:{env[0]}", op, ("envs-str", None, None, right.value), where,
                _src(e, 60))
    if isinstance(left, ast.Attribute) and isinstance(right, ast.Constant) and \
            right.value is None and op in ("is", "is not"):
        if left.attr == LOCAL_BUILDER and _is_self(left.value):
            return ("model:local_attention", "==" if op == "is not" else "!=", True, where,
                    _src(e, 60))
        if left.attr == RAGGED and _unparse(left.value).endswith("spec_info"):
            return (RAGGED_FACT, "==" if op == "is not" else "!=", None, where, _src(e, 60))
        if left.attr == ENCODER_LENS and isinstance(left.value, ast.Name) and \
                left.value.id == "forward_batch":
            return ("model:encoder_lens", "==" if op == "is not" else "!=", True, where,
                    _src(e, 60))
    if isinstance(left, ast.Constant) and op in _SWAP:
        left, right, op = right, left, _SWAP[op]
    name = _last_name(left) if isinstance(left, (ast.Attribute, ast.Name)) else ""
    if name == "dispatch_reason" and isinstance(right, ast.Attribute) and \
            right.attr in DISPATCH and op in ("==", "!=", "is", "is not"):
        fact, dop, value = DISPATCH[right.attr]
        dop = dop if op in ("==", "is") else _NEGATE[dop]
        return (fact, dop, value, where, _src(e, 90))
    if not isinstance(right, ast.Constant):
        return None
    bound = dict(mirrors).get(name) if mirrors and isinstance(left, ast.Name) else None
    if bound and right.value is None and op in ("is", "is not"):
        if isinstance(bound, tuple):  # what the calls bind it to, per mode (reach.mode_binds)
            return (f"bind:{name}", op, bound, where, _src(e, 60))
        # a parameter every caller binds to the batch's mirror (`param_mirrors`): its test
        return (f"mirror:{bound}", op, None, where, _src(e, 60))
    if is_ragged_layout(left) and right.value is None and op in ("is", "is not"):
        return (RAGGED_FACT, "==" if op == "is not" else "!=", None, where, _src(e, 60))
    if isinstance(left, ast.Name) and left.id == ENCODER_LENS and right.value is None and \
            op in ("is", "is not"):  # the graph runners' argument, set likewise
        return ("model:encoder_lens", "==" if op == "is not" else "!=", True, where,
                _src(e, 60))
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


def is_ragged_layout(e: ast.AST) -> bool:
    """`getattr(<...>.spec_info, "ragged_verify_layout", None)`."""
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and \
        e.func.id == "getattr" and len(e.args) == 3 and \
        isinstance(e.args[1], ast.Constant) and e.args[1].value == RAGGED and \
        isinstance(e.args[2], ast.Constant) and e.args[2].value is None and \
        _unparse(e.args[0]).endswith("spec_info")


def _is_self(e: ast.AST) -> bool:
    return isinstance(e, ast.Name) and e.id == "self"


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


def guards_of(e: ast.AST, where: str, holds: bool, mirrors: MirrorParams = (),
              spec: SpecFacts = ()) -> tuple[Guard, ...]:
    """The guards a branch on `e` puts on its body (`holds`) or its `else`: every atom of a
    conjunction on the body, every negated atom of a disjunction on the `else`; `mirrors`: the
    parameters of the function holding `e` that are a host mirror (`param_mirrors`). Kept on
    the node (the fixpoint reads each test again on every pass)."""
    memo = getattr(e, "_diag_guards", None)
    if memo is None:
        memo = e._diag_guards = {}  # type: ignore[attr-defined]
    key = (where, holds, mirrors, spec)
    if key not in memo:
        memo[key] = _guards_of(e, where, holds, mirrors, spec)
    return memo[key]


def _guards_of(e: ast.AST, where: str, holds: bool, mirrors: MirrorParams,
               spec: SpecFacts = ()) -> tuple[Guard, ...]:
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        return guards_of(e.operand, where, not holds, mirrors, spec)
    if isinstance(e, ast.BoolOp):
        if isinstance(e.op, ast.And) == holds:  # `a and b` true / `a or b` false: each part
            return tuple(g for v in e.values
                         for g in guards_of(v, where, holds, mirrors, spec))
        # `a or b` true / `a and b` false: one part at least, a guard only where every part
        # is a fact of the release (a spec input the multi-step owner sets, a mirror)
        parts = [guards_of(v, where, holds, mirrors, spec) for v in e.values]
        # ... or where the parts are a start-up flag's definition (census.flags): one decided
        # part holding is enough, data parts only leave it undecided
        if all(len(p) == 1 and p[0][0].startswith(_RELEASE_FACTS) for p in parts) or (
                getattr(e, "_diag_flag", False) and all(len(p) == 1 for p in parts)):
            return (("any", "true", tuple(p[0] for p in parts), where,
                     _src(e, 90) if holds else f"not ({_src(e, 90)})"),)
        return ()
    g = _guard_atom(e, where, mirrors, spec) or _data_atom(e, where)
    if g is None:
        return ()
    if holds:
        return (g,)
    return ((g[0], _NEGATE[g[1]], g[2], g[3], f"not ({g[4]})"),)


def common_guards(sets: list[frozenset]) -> frozenset:
    """The guards (fact, test, value) every one of `sets` holds, each kept at its first place."""
    # of two guards with one key in a set (a test read as it stands and again through a flag,
    # census.flags) the first place wins, whatever order the set iterates in
    keyed = []
    for gs in sets:
        d: dict[tuple, Guard] = {}
        for g in gs:
            o = d.setdefault(g[:3], g)
            if o is not g and _first(g) < _first(o):  # (only a clash is ordered)
                d[g[:3]] = g
        keyed.append(d)
    keys = set.intersection(*(set(k) for k in keyed))
    out = []
    for key in keys:
        cands = {k[key] for k in keyed}
        out.append(cands.pop() if len(cands) == 1 else min(cands, key=_first))
    return frozenset(out)


def _first(g: Guard) -> tuple:
    """A total order of guards, by place first (`_place`), then by what they say."""
    return (*_place(g), g[0], g[1], repr(g[2]), g[4])


def guard_order(g: Guard) -> tuple:
    """How a site's guards are listed: by `file:line`, fact, test, then value and words (a total
    order: the same guards list alike in every process, whatever their sets' order)."""
    return (g[3], g[0], g[1], repr(g[2]), g[4])


def _place(g: Guard) -> tuple[str, int]:
    file, _, line = g[3].rpartition(":")
    return file, int(line) if line.isdigit() else 0


def _call_index(cls: ast.ClassDef, rel: str) -> dict[str, list[tuple[str, frozenset]]]:
    """`self.<name>(...)` calls in the class's methods: name -> [(caller, the guards around the
    call in the caller)], from one walk of the class (kept on the node)."""
    out = getattr(cls, "_diag_calls", None)
    if out is None:
        out = cls._diag_calls = _self_call_sites(  # type: ignore[attr-defined]
            cls, rel, [m for m in cls.body if isinstance(m, ast.FunctionDef)])
    return out


def _self_call_sites(cls: ast.ClassDef, rel: str, methods: list[ast.FunctionDef],
                     name: str | None = None, lines: list[int] | None = None
                     ) -> dict[str, list[tuple[str, frozenset]]]:
    """The `self.<x>(...)` calls in `methods` (only `self.<name>(...)` when given): x ->
    [(caller, the guards around the call in the caller)]. With `lines` (where the module's
    text holds `name(`), a statement none of whose lines is one of them is not read."""
    out: dict[str, list[tuple[str, frozenset]]] = {}

    def visit(n: ast.AST, caller: str, stack: tuple) -> None:
        if lines is not None and isinstance(n, ast.stmt) and not spans_line(n, lines):
            return
        if isinstance(n, (ast.If, ast.IfExp)):
            visit(n.test, caller, stack)
            w = f"{rel}:{n.lineno}"
            for part, holds in ((n.body, True), (n.orelse, False)):
                more = stack + guards_of(n.test, w, holds)
                for x in (part if isinstance(part, list) else [part]):
                    visit(x, caller, more)
            return
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                isinstance(n.func.value, ast.Name) and n.func.value.id == "self" and \
                name in (None, n.func.attr):
            out.setdefault(n.func.attr, []).append((caller, frozenset(stack)))
        for c in _kids(n):
            visit(c, caller, stack)

    for m in methods:
        for st in m.body:
            visit(st, m.name, ())
    return out


def call_site_guards(cls: ast.ClassDef, method: str, rel: str, depth: int = 0,
                     seen: frozenset = frozenset(), tree: ast.Module | None = None
                     ) -> frozenset:
    """The guards on every in-class call of `self.<method>(...)` (a named builder called from
    `forward_*`, which the census does not walk): the tests around each call, and those of
    the caller's own callers, kept where every call site has them. A method no other method of
    the class calls is an entry point: no guard."""
    if depth > 4 or method in seen:
        return frozenset()
    sites = [g | call_site_guards(cls, caller, rel, depth + 1, seen | {method}, tree)
             for caller, g in _self_calls(cls, rel, method, tree) if caller != method]
    return common_guards(sites) if sites else frozenset()


def _self_calls(cls: ast.ClassDef, rel: str, name: str, tree: ast.Module | None
                ) -> list[tuple[str, frozenset]]:
    """`_call_index(cls, rel)[name]`, visiting only the methods whose text holds `name(`
    (`tree`: the class's module, whose text `source.parse_text` keeps; without it, the whole
    index). Kept on the class per name."""
    lines = _match_lines(tree, name) if tree is not None else None
    if lines is None:
        return _call_index(cls, rel).get(name, [])
    memo = getattr(cls, "_diag_self_calls", None)
    if memo is None:
        memo = cls._diag_self_calls = {}  # type: ignore[attr-defined]
    if name not in memo:
        memo[name] = _self_call_sites(cls, rel, [
            m for m in cls.body if isinstance(m, ast.FunctionDef) and _spans_one(m, lines)],
            name, lines).get(name, [])
    return memo[name]


def _match_lines(tree: ast.Module, name: str) -> list[int] | None:
    """The sorted lines of the module's text where `name(` stands (whitespace allowed before
    the parenthesis); None without the text."""
    return text_lines(tree, rf"{re.escape(name)}\s*\(")


_spans_one = spans_line  # whether one of those lines lies within a statement


def _ends(stmts: list[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Raise, ast.Continue,
                                                  ast.Break))


# --- parameters bound to a host mirror ----------------------------------------------------
# A helper may test its parameter, not the batch: `_apply_cuda_graph_metadata(..., seq_lens_cpu,
# ...)` reads `seq_lens_cpu.max().item() if seq_lens_cpu is not None else ...
# torch.max(seq_lens).item()` (sglang 0.5.23 aiter_backend.py:2969-2975; 0.5.19 :1844-1846),
# and its one caller binds it to the batch's mirror on the replay path (`seq_lens_cpu =
# forward_batch.seq_lens.cpu() if in_capture else forward_batch.seq_lens_cpu`, 0.5.23
# :1992-1994, passed at :2007; 0.5.19 :1171-1173, :1186). Such a test is the mirror's own
# (`mirror:seq_lens_cpu`), which the configuration decides; any other argument leaves it data.
_BATCH = "ForwardBatch"


def _bound_calls(tree: ast.Module, cls: ast.ClassDef, fn: ast.FunctionDef
                 ) -> list[tuple[ast.FunctionDef, ast.Call, dict[str, ast.AST | None]]] | None:
    """(caller, call, `fn`'s parameter -> argument) for every call of `fn`, a private method
    of `cls`, in the module; None where one cannot be read so. Conservative: a public method
    may be called from outside the module (the runners); a call from outside `cls` (or a
    subclass of it in the module that inherits `fn`), through another object or with `*args` /
    `**kwargs` hides what it passes."""
    if not fn.name.startswith("_") or fn.name.startswith("__") or fn not in cls.body or \
            any(_last_name(d) == "staticmethod" for d in fn.decorator_list):
        return None
    classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}
    out = []
    for (owner, method), call in _calls_of(tree, fn.name):
        home = classes.get(owner)
        caller = next((m for m in home.body if isinstance(m, ast.FunctionDef)
                       and m.name == method), None) if home is not None else None
        args = _bind(fn, call)
        if caller is None or args is None or not _self_call(call) or \
                not _inherits(classes, owner, cls.name, fn.name):
            return None
        out.append((caller, call, args))
    return out


def param_mirrors(tree: ast.Module, cls: ast.ClassDef, fn: ast.FunctionDef) -> MirrorParams:
    """The parameters of `fn`, a private method of `cls`, that every call of it in the module
    binds to one host mirror of the batch (`forward_batch.<x>_cpu`, read through a local and a
    capture-flag conditional, `argument_mirror`) and that `fn` never rebinds (`_bound_calls`:
    none where a call cannot be read)."""
    calls = _bound_calls(tree, cls, fn)
    found: dict[str, str | None] = {}
    for caller, call, args in calls or ():
        for p in args:
            m = argument_mirror(args[p], caller, call.lineno)
            found[p] = m if found.get(p, m) == m else None
    if not any(found.values()):
        return ()  # nothing bound to a mirror: no need to read what fn rebinds
    rebound = assigned_names(fn)
    return tuple(sorted((p, m) for p, m in found.items() if m and p not in rebound))


def spec_params(tree: ast.Module, cls: ast.ClassDef, fn: ast.FunctionDef) -> tuple[str, ...]:
    """The parameters of `fn`, a private method of `cls`, that every call of it in the module
    binds to the batch's spec input (`forward_batch.spec_info`, or a caller's local bound once
    to it) and that `fn` never rebinds: 0.5.23 triton_backend.py `_apply_cuda_graph_metadata(
    ..., spec_info)` (:1396), whose two calls pass `spec_info=spec_info` (:818, :836), the
    caller's `forward_batch.spec_info`. None where a call cannot be read (`_bound_calls`)."""
    calls = _bound_calls(tree, cls, fn)
    found: dict[str, bool] = {}
    for caller, _, args in calls or ():
        aliases = spec_aliases(caller)
        for p, a in args.items():
            ok = a is not None and (_unparse(a) == SPEC or (
                isinstance(a, ast.Name) and a.id in aliases))
            found[p] = found.get(p, True) and ok
    if not any(found.values()):
        return ()
    rebound = assigned_names(fn)
    return tuple(sorted(p for p, ok in found.items() if ok and p not in rebound))


def argument_mirror(e: ast.AST | None, caller: ast.FunctionDef, line: int,
                    depth: int = 0, mirrors: MirrorParams = ()) -> str | None:
    """The host mirror an argument is on the per-step (replay) path: `forward_batch.<x>_cpu`
    (`forward_batch` a parameter of the caller), a local the caller assigns once from one
    before the call, a parameter of the caller its own callers bind to one (`mirrors`, from
    `param_mirrors`) that it hands on unchanged (0.5.23 aiter_backend.py:3008 passes
    `_apply_cuda_graph_metadata`'s `seq_lens_cpu`), or `A if in_capture else
    forward_batch.<x>_cpu` with `in_capture` a capture flag the caller takes, default False
    (graph replays call without it; the census's per-step phase has every capture flag
    false). None for anything else."""
    if e is None or depth > 4:
        return None
    if isinstance(e, ast.Attribute) and e.attr.endswith("_cpu") and _is_batch(e.value, caller):
        return e.attr
    if isinstance(e, ast.Name):
        m = dict(mirrors).get(e.id)
        if isinstance(m, str) and not _name_binds(caller).get(e.id, (0, []))[0] and \
                any(p.arg == e.id for p in _params(caller)[0]):
            return m
        return argument_mirror(_assigned_once(caller, e.id, line), caller, line, depth + 1)
    if isinstance(e, ast.IfExp):
        test, replay = e.test, e.orelse
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, replay = test.operand, e.body
        if isinstance(test, ast.Name) and _CAPTURE_FLAG.search(test.id) and \
                _off_by_default(caller, test.id):
            return argument_mirror(replay, caller, line, depth + 1)
    return None


def _module_calls(tree: ast.Module) -> dict[str, list[tuple[tuple[str, str], ast.Call]]]:
    """Every `f(...)` / `x.f(...)` in the module's functions: f -> [((class, method), call)]
    (class "" for a module function, `Outer.Inner` for a nested class), from one walk of the
    module (kept on the tree)."""
    out = getattr(tree, "_diag_module_calls", None)
    if out is not None:
        return out
    out = {}

    def visit(owner: str, body: list[ast.stmt]) -> None:
        for st in body:
            if isinstance(st, ast.ClassDef):
                visit(f"{owner}.{st.name}" if owner else st.name, st.body)
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for n in _inner(st):
                    name = _last_name(n.func) if isinstance(n, ast.Call) else ""
                    if name:
                        out.setdefault(name, []).append(((owner, st.name), n))

    visit("", tree.body)
    tree._diag_module_calls = out  # type: ignore[attr-defined]
    return out


def _calls_of(tree: ast.Module, name: str) -> list[tuple[tuple[str, str], ast.Call]]:
    """`_module_calls(tree)[name]`, reading only the functions whose text holds `name(`: the
    full index walks every function of the module, most of which nothing else reads. Kept on
    the tree per name; without the module's text (`source.parse_text` keeps it), the index."""
    memo = getattr(tree, "_diag_calls_of", None)
    if memo is None:
        memo = tree._diag_calls_of = {}  # type: ignore[attr-defined]
    if name in memo:
        return memo[name]
    lines = _match_lines(tree, name)
    if lines is None:
        memo[name] = _module_calls(tree).get(name, [])
        return memo[name]
    out: list[tuple[tuple[str, str], ast.Call]] = []

    def visit(owner: str, body: list[ast.stmt]) -> None:
        for st in body:
            if isinstance(st, ast.ClassDef):
                if _spans_one(st, lines):
                    visit(f"{owner}.{st.name}" if owner else st.name, st.body)
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    _spans_one(st, lines):
                out.extend(((owner, st.name), n) for n in _inner(st) if isinstance(n, ast.Call)
                           and _last_name(n.func) == name)

    if lines:
        visit("", tree.body)
    memo[name] = out
    return out


def _inherits(classes: dict[str, ast.ClassDef], owner: str, cls: str, name: str,
              depth: int = 0) -> bool:
    """`self.<name>` in class `owner` is `cls`'s method: `owner` is `cls`, or derives from it
    through classes of the module none of which defines `name` again."""
    if owner == cls:
        return True
    c = classes.get(owner)
    if c is None or depth > 8 or any(isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                                     and m.name == name for m in c.body):
        return False
    bases = [b.id for b in c.bases if isinstance(b, ast.Name)]
    return len(bases) == len(c.bases) == 1 and _inherits(classes, bases[0], cls, name,
                                                           depth + 1)


def _self_call(call: ast.Call) -> bool:
    f = call.func
    return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self"


def _params(fn: ast.FunctionDef) -> tuple[list[ast.arg], dict[str, ast.AST]]:
    """(positional parameters less `self`, keyword-only ones, all in order; name -> default)."""
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = {p.arg: d for p, d in zip(pos[::-1], a.defaults[::-1])}
    defaults |= {p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None}
    return pos[1:] + a.kwonlyargs, defaults


def _bind(fn: ast.FunctionDef, call: ast.Call) -> dict[str, ast.AST | None] | None:
    """`fn`'s parameters -> the argument a `self.fn(...)` call passes (or the default; None
    when neither); None when `*args` / `**kwargs` hide which is which."""
    if any(isinstance(x, ast.Starred) for x in call.args) or \
            any(k.arg is None for k in call.keywords):
        return None
    params, defaults = _params(fn)
    given: dict[str, ast.AST] = {p.arg: x for p, x in zip(params, call.args)}
    given |= {k.arg: k.value for k in call.keywords if k.arg}
    return {p.arg: given.get(p.arg, defaults.get(p.arg)) for p in params}


def _is_batch(e: ast.AST, caller: ast.FunctionDef) -> bool:
    """`e` is the caller's ForwardBatch parameter (by name or annotation), never rebound."""
    if not isinstance(e, ast.Name) or e.id in assigned_names(caller):
        return False
    params, _ = _params(caller)
    return any(p.arg == e.id and (p.arg == "forward_batch" or (
        p.annotation is not None and _BATCH in _unparse(p.annotation))) for p in params)


def _assigned_once(caller: ast.FunctionDef, name: str, line: int) -> ast.AST | None:
    """The value of `name = value`, the caller's one binding of `name` (not a parameter),
    before `line`; None when it is bound otherwise, twice, or not at all."""
    stores, binds = _name_binds(caller).get(name, (0, []))
    if stores != 1 or len(binds) != 1 or binds[0].lineno >= line or \
            any(p.arg == name for p in _params(caller)[0]):
        return None
    return binds[0].value


def _name_binds(caller: ast.FunctionDef) -> dict[str, tuple[int, list[ast.Assign]]]:
    """name -> (how many stores or deletes of it, its `name = value` assignments) in the
    caller, from one walk kept on the node (each argument of each call asked again)."""
    out = getattr(caller, "_diag_binds", None)
    if out is None:
        out = {}
        for n in _inner(caller):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                k, b = out.get(n.id, (0, []))
                out[n.id] = (k + 1, b)
            elif isinstance(n, ast.Assign) and len(n.targets) == 1 and \
                    isinstance(n.targets[0], ast.Name):
                k, b = out.get(n.targets[0].id, (0, []))
                out[n.targets[0].id] = (k, [*b, n])
        caller._diag_binds = out  # type: ignore[attr-defined]
    return out


def spec_aliases(fn: ast.FunctionDef) -> tuple[str, ...]:
    """Names `fn` binds once, to `forward_batch.spec_info`, and never again (`_name_binds`,
    kept on the node)."""
    return tuple(sorted(k for k, (stores, binds) in _name_binds(fn).items()
                        if stores == 1 and len(binds) == 1 and _unparse(binds[0].value) == SPEC))


def _off_by_default(caller: ast.FunctionDef, flag: str) -> bool:
    """`flag` is a parameter of the caller that defaults to False and is never rebound."""
    _, defaults = _params(caller)
    d = defaults.get(flag)
    return isinstance(d, ast.Constant) and d.value is False and \
        flag not in assigned_names(caller)
