"""The census's paths: which (forward mode, phase) pairs reach a statement. Forward-mode
predicates, capture flags, asserts and early returns narrow them (`cond`, `mode_guards`); a
site's path class (`per-step`, `capture-only`, `unreachable`, `cannot-tell`) follows.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from diag.probes.metadata_syncs.census.sites import _FACTORIES
from diag.probes.source import (
    children,
    inner,
    last_name,
    mentions,
    spans_line,
    statements,
    text_lines,
    unparse,
    walk,
    walk_all,
)

# --- forward-mode paths -------------------------------------------------------------------
# A site's reach is the set of (mode, phase) pairs under which the branches around it can run.
# Modes follow ForwardMode (forward_batch_info.py of 0.5.17-0.5.23): EXTEND/MIXED/SPLIT_PREFILL
# are the target's extend, DRAFT_EXTEND(_V2) the draft's, DLLM_EXTEND/PREBUILT "other".
MODES = ("target-extend", "draft-extend", "target-verify", "decode", "idle", "other")
# per-step run (eager or graph replay) / graph capture / once per process (the fill of a cache
# the backend keeps: `if self._x is None: self._x = ...`, census.memo); an entry point runs in
# the first two, a branch narrows them
RUN_PHASES = ("step", "capture")
PHASES = (*RUN_PHASES, "once")
State = frozenset
ALL: frozenset = frozenset((m, p) for m in MODES for p in PHASES)
NONE: frozenset = frozenset()
_VERIFY = frozenset({("target-verify", "step")})
_IDLE = frozenset({("idle", "step")})
PATH_CLASSES = ("per-step", "capture-only", "once", "unreachable", "cannot-tell")

_ENUM_MODES = {"EXTEND": "target-extend", "MIXED": "target-extend",
               "SPLIT_PREFILL": "target-extend", "DRAFT_EXTEND": "draft-extend",
               "DRAFT_EXTEND_V2": "draft-extend", "TARGET_VERIFY": "target-verify",
               "DECODE": "decode", "IDLE": "idle", "DLLM_EXTEND": "other", "PREBUILT": "other"}
# predicate -> (modes where it is true, modes it adds when include_draft_extend_v2 is true)
_PREDICATES: dict[str, tuple[set[str], set[str]]] = {
    "is_target_verify": ({"target-verify"}, set()),
    "is_draft_extend": ({"draft-extend"}, set()),
    "is_draft_extend_v2": ({"draft-extend"}, set()),
    "is_decode": ({"decode"}, set()),
    "is_idle": ({"idle"}, set()),
    "is_decode_or_idle": ({"decode", "idle"}, set()),
    "is_extend": ({"target-extend", "target-verify", "other"}, {"draft-extend"}),
    "is_prefill": ({"target-extend", "target-verify", "other"}, {"draft-extend"}),
    "is_extend_without_speculative": ({"target-extend", "other"}, set()),
    "is_extend_or_draft_extend_or_mixed": ({"target-extend"}, {"draft-extend"}),
    "is_context_parallel_extend": ({"target-extend"}, {"draft-extend"}),
    "is_mixed": ({"target-extend"}, set()),
    "is_split_prefill": ({"target-extend"}, set()),
    "is_dllm_extend": ({"other"}, set()),
    "is_prebuilt": ({"other"}, set()),
    "is_cuda_graph": ({"decode", "target-verify", "idle", "other"}, set()),
    "is_cpu_graph": ({"decode"}, set()),
}
# Flags that are true only while a CUDA graph is captured.
_CAPTURE_FLAG = re.compile(r"^(get_)?(is_|in_)?(cuda_graph_)?captur(e|ing)(_mode)?$"
                           r"|^is_current_stream_capturing$|^is_in_capture$")
# The modes a CUDA/HIP graph runner captures and replays (cuda_graph_runner: decode, idle,
# target-verify; the draft-extend runner): `*_out_graph` / `*_cuda_graph` entry points run
# under these only (the target's extend and the dLLM modes run eager).
GRAPH_MODES = {"decode", "idle", "target-verify", "draft-extend"}
# `*_for_breakable_cuda_graph_*` entry points: only the prefill graph runner
# (model_executor/runner/prefill_cuda_graph_runner.py) calls them, and the model runner runs it
# under `forward_mode.is_extend(include_draft_extend_v2=True)` only (model_runner.py: 0.5.17
# :1589, 0.5.19 :1775, 0.5.21 :1919, 0.5.23 :2037): never decode or idle; and its replay test
# refuses a target-verify batch in every release that has it (`can_run_graph`'s
# `forward_mode.is_target_verify()`: 0.5.14 :486, 0.5.16 :685; `can_replay_locally`'s
# `if is_target_verify: return False`: 0.5.17 :1079, 0.5.19 :1177, 0.5.23 :1397).
PREFILL_GRAPH_MODES = {"target-extend", "draft-extend", "other"}
_GRAPH_ENTRY = re.compile(r"_out_graph$|_in_graph$|_cuda_graph$|cuda_graph_capture$")
# Entry points the model runner or graph runners call from outside the file.
_EXTERNAL = re.compile(r"^init_forward_metadata(_capture_cuda_graph|_replay_cuda_graph|"
                       r"_out_graph|_in_graph|_for_breakable_cuda_graph_capture)?$"
                       r"|^init_mha_chunk_metadata$")
# Entry points the model's forward calls, and the modes it calls them on. DeepSeek's chunked-KV
# MHA prefill calls `init_mha_chunk_metadata` once per forward when the batch has a prefix
# (0.5.23 models/deepseek_common/attention_forward_methods/forward_mha.py:664-678); the
# handlers pick that method only for `is_extend_without_speculative()` batches (aiter
# attention_backend_handler.py:190-192, flashinfer/fa3/flashmla :125-138, trtllm_mla :165),
# never under graph capture (:188-189): the target's extend and the dLLM modes, per step.
_MODEL_ENTRY = {"init_mha_chunk_metadata": {"target-extend", "other"}}


# The walks and the cached unparse are the shared source-reading core's (probes.source).
_unparse, _children, _walk, _inner = unparse, children, walk, inner


def _kids(node: ast.AST) -> list[ast.AST]:
    """`children(node)` kept on the node: every pass of the fixpoint walks the same
    expressions again."""
    out = getattr(node, "_diag_kids", None)
    if out is None:
        out = node._diag_kids = children(node)  # type: ignore[attr-defined]
    return out


def _modes(modes: set[str], phases: tuple[str, ...] = PHASES) -> frozenset:
    return frozenset((m, p) for m in modes for p in phases)


def seed_state(name: str) -> frozenset:
    """What the name of an entry point says about when it runs (the rest: callers, branches)."""
    if name in _MODEL_ENTRY:
        return _modes(_MODEL_ENTRY[name], ("step",))
    phases = ("capture",) if "capture" in name and "replay" not in name else \
        ("step",) if "replay" in name else RUN_PHASES
    for hint, mode in (("verify", "target-verify"), ("draft_extend", "draft-extend"),
                       ("decode", "decode")):
        if hint in name:
            return _modes({mode}, phases)
    if _GRAPH_ENTRY.search(name):  # called by the graph runners only: their modes
        return _modes(GRAPH_MODES, phases)
    if "breakable_cuda_graph" in name:  # the prefill graph runner's modes only
        return _modes(PREFILL_GRAPH_MODES, phases)
    return _modes(set(MODES), phases)


_last_name = last_name  # (probes.source; the census stages import it from here)


def _enum_modes(e: ast.AST) -> set[str] | None:
    elts = e.elts if isinstance(e, (ast.Tuple, ast.List, ast.Set)) else [e]
    out: set[str] = set()
    for x in elts:
        if not (isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name)
                and x.value.id == "ForwardMode" and x.attr in _ENUM_MODES):
            return None
        out.add(_ENUM_MODES[x.attr])
    return out


def _member_modes(e: ast.AST) -> set[str] | None:
    """Modes named by a member of an enum derived from the forward mode (`_GraphBucket.X`)."""
    if not isinstance(e, ast.Attribute):
        return None
    name, out = e.attr.upper(), set()
    for token, modes in (("DECODE", {"decode"}), ("IDLE", {"idle"}),
                         ("TARGET_VERIFY", {"target-verify"}), ("DRAFT_EXTEND", {"draft-extend"})):
        if token in name:
            out |= modes
    if not out and name in ("EXTEND", "PREFILL"):
        out = {"target-extend"}
    return out or None


@dataclass
class Cond:
    """Where a condition may be true and where it may be false; `unknown` when a forward-mode
    test was seen that the census cannot read."""

    true: frozenset
    false: frozenset
    unknown: bool = False


def cond(e: ast.AST, facts: dict[str, str], env: dict[str, dict[str, ast.AST]] | None = None,
         depth: int = 0) -> Cond:
    """`env`: "locals" (a name assigned once from a forward-mode expression) and "helpers" (a
    method that returns a forward-mode test of its argument), read through; "fields" (a name
    bound once to a batch field), "none_on_verify" / "none_on_idle" (whether a target-verify /
    an IDLE step leaves that field None: census.batch_fields) and "prefix_on_draft_extend"
    (whether a draft-extend step's prefix lengths are the committed ones: the same)."""
    env = env or {}
    if depth > 6:
        return Cond(ALL, ALL, True)
    if isinstance(e, ast.Name) and e.id in env.get("locals", {}):
        return cond(env["locals"][e.id], facts, env, depth + 1)
    if isinstance(e, ast.Name) and e.id in env.get("params", {}):
        true, false = env["params"][e.id]  # where the callers pass it truthy / falsy
        return Cond(true, false)
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and \
            isinstance(e.func.value, ast.Name) and e.func.value.id == "self" and \
            e.func.attr in env.get("helpers", {}):
        test = env["helpers"][e.func.attr]
        if isinstance(test, dict):  # a helper that returns a member, not a truth value
            return Cond(ALL, ALL)
        return cond(test, facts, env, depth + 1)
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and isinstance(e.left, ast.Name) and \
            isinstance(e.ops[0], (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) and \
            isinstance(e.comparators[0], ast.Attribute):
        # `m = self.get_topk_transform_method(forward_mode)`; `m == TopkTransformMethod.RAGGED`:
        # the helper's test for that member (`_value_helper`)
        call = env.get("locals", {}).get(e.left.id)
        members = env.get("helpers", {}).get(call.func.attr) if isinstance(
            call, ast.Call) and isinstance(call.func, ast.Attribute) else None
        if isinstance(members, dict) and e.comparators[0].attr in members:
            c = cond(members[e.comparators[0].attr], facts, env, depth + 1)
            return c if isinstance(e.ops[0], (ast.Eq, ast.Is)) else Cond(c.false, c.true,
                                                                           c.unknown)
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and \
            isinstance(e.func.value, ast.Name) and e.func.value.id == "self" and \
            e.func.attr in env.get("gpu", {}):
        return Cond(ALL, NONE)  # a GPU fast path (census.fast_paths): true on every GPU
    if isinstance(e, ast.BoolOp):
        parts = [cond(v, facts, env, depth + 1) for v in e.values]
        unk = any(p.unknown for p in parts)
        if isinstance(e.op, ast.And):
            t = ALL
            f = NONE
            for p in parts:
                t, f = t & p.true, f | p.false
        else:
            t, f = NONE, ALL
            for p in parts:
                t, f = t | p.true, f & p.false
        return Cond(t, f, unk)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        c = cond(e.operand, facts, env, depth + 1)
        return Cond(c.false, c.true, c.unknown)
    if isinstance(e, ast.Constant) and isinstance(e.value, bool):
        return Cond(ALL, NONE) if e.value else Cond(NONE, ALL)
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and \
            e.func.attr in _PREDICATES:
        base, extra = _PREDICATES[e.func.attr]
        flag = [k.value for k in e.keywords if k.arg == "include_draft_extend_v2"] or \
            e.args[:1]
        if not extra or not flag or (isinstance(flag[0], ast.Constant) and not flag[0].value):
            true = set(base)
        elif isinstance(flag[0], ast.Constant):
            true = base | extra
        else:  # include_draft_extend_v2=<a variable>: draft-extend may go either way
            return Cond(_modes(base | extra), _modes(set(MODES) - base))
        return Cond(_modes(true), _modes(set(MODES) - true))
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and \
            e.func.attr.startswith("is_") and _unparse(e.func.value).endswith("forward_mode"):
        return Cond(ALL, ALL, True)  # a forward-mode predicate this table does not know
    if isinstance(e, ast.Compare) and len(e.ops) == 1:
        left, op, right = e.left, e.ops[0], e.comparators[0]
        if isinstance(left, ast.Name) and left.id in facts.get("@mode-vars", "").split(","):
            # `bucket = _GraphBucket.of(forward_batch.forward_mode)`; `bucket == _GraphBucket.X`
            modes = _member_modes(right)
            if modes is None or not isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
                return Cond(ALL, ALL)  # a member that names no mode: not a test of the mode
            t, f = _modes(modes), _modes(set(MODES) - modes)
            return Cond(t, f) if isinstance(op, (ast.Eq, ast.Is)) else Cond(f, t)
        if _unparse(left).endswith("forward_mode") or _enum_modes(left) is not None:
            if _enum_modes(left) is not None:
                left, right = right, left
            modes = _enum_modes(right)
            if modes is None or not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn,
                                                    ast.Is, ast.IsNot)):
                return Cond(ALL, ALL, True)
            t, f = _modes(modes), _modes(set(MODES) - modes)
            return Cond(t, f) if isinstance(op, (ast.Eq, ast.In, ast.Is)) else Cond(f, t)
        none, idle = env.get("none_on_verify"), env.get("none_on_idle")
        if (none or idle) and isinstance(right, ast.Constant) and right.value is None and \
                isinstance(op, (ast.Is, ast.IsNot)):
            # a field the target-verify step's (or an IDLE step's) batch leaves None
            # (census.batch_fields): there the test is decided; elsewhere it goes both ways
            field = batch_field(left, env.get("fields", {}))
            off = (_VERIFY if none and none(field) else NONE) | \
                (_IDLE if idle and field is not None and idle(field) else NONE)
            if off:
                return Cond(ALL, ALL - off) if isinstance(op, ast.Is) else Cond(ALL - off, ALL)
        fact = facts.get(left.id) if isinstance(left, ast.Name) else None
        if fact in ("host-set", "none") and isinstance(right, ast.Constant) and \
                right.value is None and isinstance(op, (ast.Is, ast.IsNot)):
            # "host-set": every caller passes a host value it just made (never None); "none":
            # every caller passes None (a host value may still be None: it decides nothing)
            holds = (fact == "none") == isinstance(op, ast.Is)
            return Cond(ALL, NONE) if holds else Cond(NONE, ALL)
    if isinstance(e, ast.Name) and facts.get(e.id) == "none":
        return Cond(NONE, ALL)
    if is_prefix_any(e, env.get("fields", {})) and (pre := env.get("prefix_on_draft_extend")) \
            and pre():
        # a draft-extend step's prefix lengths are the committed ones (census.batch_fields)
        return Cond(ALL, ALL - frozenset({("draft-extend", "step")}))
    if isinstance(e, (ast.Name, ast.Attribute, ast.Call)) and _CAPTURE_FLAG.search(_last_name(e)):
        return Cond(_modes(set(MODES), ("capture",)), _modes(set(MODES), ("step", "once")))
    return Cond(ALL, ALL)


def getattr_read(e: ast.AST) -> ast.Attribute | None:
    """`getattr(obj, "name", default)` as the `obj.name` it reads (None for anything else)."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "getattr" and \
            len(e.args) >= 2 and isinstance(e.args[1], ast.Constant) and \
            isinstance(e.args[1].value, str):
        return ast.Attribute(e.args[0], e.args[1].value, ast.Load())
    return None


def is_prefix_any(e: ast.AST, fields: dict[str, str]) -> bool:
    """`any(forward_batch.extend_prefix_lens_cpu)` (or of a local bound once to it)."""
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "any" \
        and len(e.args) == 1 and not e.keywords and \
        batch_field(e.args[0], fields) == "extend_prefix_lens_cpu"


def batch_field(e: ast.AST, fields: dict[str, str]) -> str | None:
    """The ForwardBatch field `e` reads: `forward_batch.f`, `getattr(forward_batch, "f", d)`, or
    a local bound once to one of these (`fields`, from kinds._FnInfo)."""
    if isinstance(e, ast.Name):
        return fields.get(e.id)
    e = getattr_read(e) or e
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and \
            e.value.id == "forward_batch":
        return e.attr
    return None


def _mode_expr(e: ast.AST, helpers: dict[str, ast.AST]) -> bool:
    """Whether `e` is a test of the forward mode (a predicate, or a mode helper's call)."""
    for n in walk_all(e):  # the fixpoint's passes ask again of the same tests
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                n.func.attr in _PREDICATES or (n.func.attr in helpers and isinstance(
                    n.func.value, ast.Name) and n.func.value.id == "self")):
            return True
    return False


def mode_helpers(tree: ast.Module) -> dict[str, Any]:
    """Methods whose last statement returns a forward-mode test (`_is_speculative_paged_mode`):
    a call to one is read as that test; and methods that pick a member under a test of the
    forward mode (`_value_helper`): {member: the test that picks it}."""
    out: dict[str, Any] = {}
    for c in tree.body:
        if not isinstance(c, ast.ClassDef):
            continue
        for m in c.body:
            if isinstance(m, ast.FunctionDef) and m.body and isinstance(m.body[-1], ast.Return) \
                    and m.body[-1].value is not None and _mode_expr(m.body[-1].value, {}):
                out[m.name] = m.body[-1].value
            elif isinstance(m, ast.FunctionDef) and (members := _value_helper(m)):
                out[m.name] = members
    return out


def _mode_compare(e: ast.AST) -> bool:
    """Whether `e` compares a forward mode with a ForwardMode member somewhere."""
    return any(isinstance(n, ast.Compare) and any(
        _unparse(x).endswith("forward_mode") or _enum_modes(x) is not None
        for x in (n.left, *n.comparators)) for n in walk_all(e))


def _value_helper(m: ast.FunctionDef) -> dict[str, ast.AST]:
    """`if TEST: x = E.A` / `else: x = E.B`, then `return x`, TEST a test of the forward mode:
    {"A": TEST, "B": not TEST} (0.5.23 dsa_backend.py:4108-4125 `get_topk_transform_method`:
    RAGGED only where `forward_mode == ForwardMode.EXTEND`, so not on a dLLM extend)."""
    body = [st for st in m.body if not (isinstance(st, ast.Expr)
                                        and isinstance(st.value, ast.Constant))]
    if len(body) != 2 or not isinstance(body[0], ast.If) or not isinstance(body[1], ast.Return):
        return {}
    test, ret = body[0], body[1].value
    if not isinstance(ret, ast.Name) or not (_mode_expr(test.test, {}) or
                                            _mode_compare(test.test)):
        return {}
    arms = []
    for arm in (test.body, test.orelse):
        if len(arm) != 1 or not isinstance(arm[0], ast.Assign) or len(arm[0].targets) != 1 \
                or not isinstance(arm[0].targets[0], ast.Name) or \
                arm[0].targets[0].id != ret.id or not isinstance(arm[0].value, ast.Attribute):
            return {}
        arms.append(arm[0].value.attr)
    if arms[0] == arms[1]:
        return {}
    return {arms[0]: test.test, arms[1]: ast.UnaryOp(ast.Not(), test.test)}


def mode_guards(tree: ast.Module) -> dict[str, frozenset]:
    """Methods that return only under forward-mode tests and raise otherwise
    (`_GraphBucket.of`): the code after a call to one runs only for the modes it returns for."""
    out: dict[str, frozenset] = {}
    for c in tree.body:
        if not isinstance(c, ast.ClassDef):
            continue
        for m in c.body:
            body = m.body if isinstance(m, ast.FunctionDef) else []
            if len(body) < 2 or not isinstance(body[-1], ast.Raise):
                continue
            tests = [st for st in body[:-1] if isinstance(st, ast.If) and not st.orelse
                     and len(st.body) == 1 and isinstance(st.body[0], ast.Return)]
            if len(tests) != len(body) - 1 or not all(_mode_expr(t.test, {}) for t in tests):
                continue
            returns = NONE
            for t in tests:
                returns |= cond(t.test, {}).true
            out[m.name] = returns
    return out


_CONFIG = re.compile(r"\bserver_args\b|\bget_spec\(\)|get_global_server_args\(\)")


_CONFIG_WORDS = ("server_args", "get_spec")  # what `_CONFIG` needs in some name


def _config_read(value: ast.AST, lines: list[int] | None = None) -> bool:
    """`value` reads the server arguments (`_CONFIG` on its text; unparsed only where a name in
    it can match: one of its module's `lines` holding a word of `_CONFIG_WORDS` lies within
    it, or, without them, one of its names holds one)."""
    if lines is not None:
        if not spans_line(value, lines):
            return False
    elif not mentions(value, *_CONFIG_WORDS):
        return False
    return bool(_CONFIG.search(_unparse(value)))


def config_attrs(tree: ast.Module) -> dict[str, set[str]]:
    """Per class, the `self.X` set only from the server arguments (`get_spec().num_...`,
    `server_args.x`) or constants: host values, never a device tensor."""
    return {c.name: class_config_attrs(c, tree) for c in tree.body
            if isinstance(c, ast.ClassDef)}


def _assignments(node: ast.AST) -> list[ast.Assign | ast.AnnAssign]:
    """The assignments in `node` and every block nested in it (nested defs too), in no
    particular order: they are statements (`source.statements`; a full walk of every method
    cost ~5 ms a class)."""
    return [st for st in statements(node) if isinstance(st, (ast.Assign, ast.AnnAssign))]


def class_config_attrs(c: ast.ClassDef, tree: ast.Module | None = None) -> set[str]:
    """`config_attrs` of one class (assignments are statements: all of them lie in the blocks
    of the members of its body); `tree`, its module, lets the text say which values can read
    the server arguments (a walk of each value cost ~5 % of a cold census on 0.5.23)."""
    lines = text_lines(tree, "|".join(_CONFIG_WORDS)) if tree is not None else None
    seen: dict[str, bool] = {}
    for item in c.body:
        nodes = _assignments(item)
        # `spec = get_spec()` then `self.n = spec.speculative_num_draft_tokens`: a local bound
        # to the server arguments is read as them
        args_locals = {t.id for n in nodes if isinstance(n, ast.Assign)
                       and any(isinstance(t, ast.Name) for t in n.targets)
                       and _config_read(n.value, lines) for t in n.targets
                       if isinstance(t, ast.Name)}
        for n in nodes:
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and \
                            t.value.id == "self" and seen.get(t.attr, True):
                        seen[t.attr] = isinstance(n.value, ast.Constant) or _config_read(n.value, lines) or (
                            isinstance(n.value, ast.Attribute)
                            and isinstance(n.value.value, ast.Name)
                            and n.value.value.id in args_locals)
    return {a for a, ok in seen.items() if ok}


def _is_device_value(v: ast.AST) -> bool | None:
    """True for `torch.zeros(..., device=d)` (d not "cpu") / `torch.*_like(...)`, False for a
    host value (a constant other than None, a factory without `device=`, `.cpu()`, `.tolist()`),
    None when the assignment says nothing (a parameter, None, another call)."""
    if isinstance(v, ast.Constant):
        return None if v.value is None else False
    if not isinstance(v, ast.Call) or not isinstance(v.func, ast.Attribute):
        return None
    f = v.func
    if f.attr in ("cpu", "tolist", "item", "numpy"):
        return False
    if isinstance(f.value, ast.Name) and f.value.id == "torch":
        dev = [k.value for k in v.keywords if k.arg == "device"]
        if dev:
            return not (isinstance(dev[0], ast.Constant) and dev[0].value == "cpu")
        if f.attr.endswith("_like"):
            return True
        return False if f.attr in _FACTORIES else None
    return None


def class_device_attrs(c: ast.ClassDef) -> set[str]:
    """The `self.X` of one class made on the device (`torch.zeros(..., device=self.device)`)
    and never assigned a host value: `self.kv_indptr[bs].item()` reads the device."""
    seen: dict[str, bool] = {}
    for item in c.body:
        for n in _assignments(item):  # statements: no full walk (order does not matter)
            if isinstance(n, ast.Assign) and len(n.targets) == 1:
                t = n.targets[0]
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and \
                        t.value.id == "self":
                    dev = _is_device_value(n.value)
                    if dev is False:
                        seen[t.attr] = False
                    elif dev and seen.get(t.attr, True):
                        seen[t.attr] = True
    return {a for a, ok in seen.items() if ok}


def _graph_memo_miss(test: ast.AST) -> bool:
    """`key not in self.<...cuda_graph...>`: a miss of a graph-metadata cache."""
    return isinstance(test, ast.Compare) and len(test.ops) == 1 and \
        isinstance(test.ops[0], ast.NotIn) and isinstance(test.comparators[0], ast.Attribute) \
        and isinstance(test.comparators[0].value, ast.Name) and \
        test.comparators[0].value.id == "self" and "cuda_graph" in test.comparators[0].attr


def path_class(state: frozenset, unknown: bool) -> str:
    if not state:
        return "unreachable"
    if unknown:
        return "cannot-tell"
    if not any(p == "step" for _, p in state):
        return "once" if any(p == "once" for _, p in state) else "capture-only"
    return "per-step"


def step_paths(state: frozenset) -> tuple[str, ...]:
    return tuple(m for m in MODES if (m, "step") in state)


# --- what the branches around a statement already decided --------------------------------
# A test on data or the model (not the forward mode, not the configuration) goes both ways, but
# not twice in opposite ways: under `if not a:` an inner `if a:` cannot run (sglang 0.5.17
# dsa_backend.py:886 inside :853, 0.5.23 :1222 inside :1189, both on the forward mode; the
# same holds for any test whose names nothing assigns in between). A fact is (key, holds):
# the key is the test's text with its negation folded in (`x is not None` is `x is None`
# false, `a != b` is `a == b` false).
_STABLE_CALL = re.compile(r"^(get|is_\w+|has_\w+|use_\w+)$")


def fact_atom(e: ast.AST) -> tuple[str, bool] | None:
    """(key, holds when `e` is true) for a test the census may remember; None for one it may
    not (a call that could answer differently twice, a walrus)."""
    holds = True
    while isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        e, holds = e.operand, not holds
    for n in walk_all(e):
        if isinstance(n, ast.NamedExpr) or (isinstance(n, ast.Call) and not (
                isinstance(n.func, ast.Attribute) and _STABLE_CALL.match(n.func.attr)
                and not n.keywords and all(isinstance(a, ast.Constant) for a in n.args))):
            return None
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and isinstance(
            e.ops[0], (ast.IsNot, ast.NotEq, ast.NotIn)):
        flip = {ast.IsNot: ast.Is(), ast.NotEq: ast.Eq(), ast.NotIn: ast.In()}
        e = ast.Compare(e.left, [flip[type(e.ops[0])]], e.comparators)
        holds = not holds
    return unparse(e), holds


def facts_of(e: ast.AST, holds: bool) -> list[tuple[str, bool]]:
    """The facts a branch on `e` establishes: every conjunct of a true `and`, every disjunct
    of a false `or`, the atom itself otherwise (kept on the node)."""
    memo = getattr(e, "_diag_facts", None)
    if memo is None:
        memo = e._diag_facts = {}  # type: ignore[attr-defined]
    if holds not in memo:
        memo[holds] = _facts_of(e, holds)
    return memo[holds]


def _facts_of(e: ast.AST, holds: bool) -> list[tuple[str, bool]]:
    while isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        e, holds = e.operand, not holds
    if isinstance(e, ast.BoolOp):
        if isinstance(e.op, ast.And) == holds:
            return [f for v in e.values for f in facts_of(v, holds)]
        return []
    atom = fact_atom(e)
    return [(atom[0], atom[1] == holds)] if atom else []


def known_value(e: ast.AST, known: dict[str, bool]) -> bool | None:
    """What the facts in force say of the test `e` (None: nothing)."""
    if not known:
        return None
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        v = known_value(e.operand, known)
        return None if v is None else not v
    if isinstance(e, ast.BoolOp):
        vals = [known_value(v, known) for v in e.values]
        stop = isinstance(e.op, ast.Or)  # the value that decides an `or` / an `and`
        if stop in vals:
            return stop
        return (not stop) if all(v is not None for v in vals) else None
    atom = fact_atom(e)
    if atom is None or atom[0] not in known:
        return None
    return known[atom[0]] == atom[1]


def assigned_names(st: ast.AST) -> set[str]:
    """Names (and `self.x` / `obj.x` texts) a statement may rebind (kept on the node: the
    fixpoint's passes ask again)."""
    out = getattr(st, "_diag_assigned", None)
    if out is None:
        # every node under `st`, each statement nested in it by its own (kept) set: a block's
        # statements are asked one by one too, and walking each whole again from every
        # statement around it cost ~90 ms of a cold census on 0.5.23
        out = set()
        todo = [st]
        for n in todo:
            if isinstance(n, (ast.Name, ast.Attribute, ast.Subscript)) and \
                    isinstance(getattr(n, "ctx", None), (ast.Store, ast.Del)):
                out.add(n.id if isinstance(n, ast.Name) else unparse(n))
            for c in children(n):
                if isinstance(c, ast.stmt):
                    out |= assigned_names(c)
                else:
                    todo.append(c)
        st._diag_assigned = out  # type: ignore[attr-defined]
    return out
