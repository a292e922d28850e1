"""Static census of sync-prone calls in SGLang's attention metadata builders (AST only).

Builders: the methods named `init_forward_metadata*` (and `_build_*meta*`, `_make_*meta*`,
`_prepare_*meta*`, `_attach_*meta*`, `_compute_*meta*`) of every class under
`sglang/srt/layers/attention/**`, plus the helpers they call, transitively (`self.m(...)` on the
same class or a base class in the same module, and module-level functions of the same module).

Each sync-prone call in a builder gets one verdict:
- `syncs`: a device tensor is read from the host on some per-step path (2 syncs for
  `repeat_interleave` without `output_size`, 1 otherwise);
- `host-mirror`: the value read is a host mirror (`*_cpu` names, or a host value at every
  caller in the file) - no sync;
- `capture-only`: reached only while a CUDA graph is captured (capture flags such as
  `in_capture` / `is_capture_mode`, `*capture*` entry points), not per step;
- `unreachable`: in a branch that cannot run (an `else` that contradicts the branch around it,
  a helper no reachable call reaches);
- `cannot-tell`: the census cannot say whether the tensor lives on the device.

Paths: every statement carries the (forward mode, phase) pairs that can reach it. Forward-mode
predicates (`forward_mode.is_target_verify()`, `is_draft_extend_v2()`, `== ForwardMode.X`, a
local derived from the mode such as `_GraphBucket.of(forward_mode)`), capture flags, asserts and
early returns narrow them; a helper gets the union of its callers' pairs at the call sites, an
entry point what its name says (`*verify*`, `*draft_extend*`, `*decode*`, `*capture*`).
A parameter every caller in the file passes as `None` or as a host value is read as such.
A forward-mode test the census cannot read makes the site's path `cannot-tell`.

What it cannot tell (by construction): types are guessed from names, annotations, assignments in
the same function and well-known ForwardBatch fields; bool-mask indexing and `if tensor:` are not
detected; calls through other modules are not followed; conditions on anything but the forward
mode and capture flags are taken to go both ways (paths are "may reach"). The executed harness
(probes.metadata_syncs.builder_harness) measures what it can run.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from diag.probes.source import (
    ModuleIndex,
    Modules,
    children,
    gc_paused,
    index,
    inner,
    parse_text,
    unparse,
    walk,
)
from diag.target import Target

ATTENTION_DIR = "srt/layers/attention"
_ATTENTION_PKG = "sglang." + ATTENTION_DIR.replace("/", ".") + "."

# ForwardBatch / metadata fields that hold device tensors (their host mirrors end in `_cpu`).
_DEVICE_FIELDS = {"extend_seq_lens", "seq_lens", "req_pool_indices", "extend_prefix_lens",
                  "positions", "out_cache_loc", "extend_start_loc", "accept_length",
                  "cu_seqlens_q", "cu_seqlens_k", "cache_seqlens_int32", "page_table",
                  "encoder_lens"}
_HOST_READ_METHODS = {"item": 1, "tolist": 1, "cpu": 1, "numpy": 1}
_DYNAMIC = {"nonzero", "unique", "masked_select", "unique_consecutive", "argwhere", "bincount"}
# torch factories whose positional arguments are sizes (`full`: the first only): a device
# scalar there is read back (`torch.empty(cu[-1])`)
_SIZED = {"empty": None, "zeros": None, "ones": None, "rand": None, "randn": None,
          "arange": None, "full": 1, "new_empty": None, "new_zeros": None, "new_ones": None,
          "new_full": 1}
_REDUCTIONS = {"sum", "max", "min", "any", "all", "prod", "amax", "amin"}
_SCALAR_CALLS = {"int", "len", "sum", "float", "bool", "round", "math.ceil", "cdiv"}
_FACTORIES = {"tensor", "as_tensor", "arange", "zeros", "ones", "empty", "full", "rand",
              "randn", "randint", "linspace", "from_numpy"}
_SAME_KIND = {"to", "long", "int", "clamp", "clamp_min", "clamp_max", "cumsum", "contiguous",
              "flatten", "view", "reshape", "squeeze", "unsqueeze", "clone", "sum", "max", "min",
              "type", "detach", "narrow", "expand", "repeat", "nonzero", "unique", "argwhere",
              "masked_select", "bincount", "diff", "abs", "ne", "eq", "gt", "lt", "ge", "le",
              "logical_not", "bool", "float", "sort", "argsort", "cummax", "index_select"}

# Backends on each platform's draft-extend path: the HIP gate's allow-list over the releases,
# plus the backends it tests (sglang 0.5.23 srt/speculative/eagle_worker_v2.py:560-564; `nsa`
# built NativeSparseAttnBackend up to 0.5.12.post1, srt/layers/attention/attention_registry.py:99);
# CUDA's graph_supported_backend_types (0.5.23 eagle_worker_v2.py:567).
DRAFT_EXTEND_BACKENDS = {
    "hip": {"DeepseekV4HipRadixBackend", "DeepseekSparseAttnBackend", "QwenSparseAttnBackend",
            "AiterAttnBackend", "AiterMultiStepDraftBackend", "NativeSparseAttnBackend",
            "TritonAttnBackend"},
    "cuda": {"DeepseekV4AttnBackend", "DeepseekSparseAttnBackend", "NativeSparseAttnBackend",
             "QwenSparseAttnBackend", "FlashAttentionBackend", "FlashInferAttnBackend",
             "TritonAttnBackend", "TRTLLMHAAttnBackend", "TRTLLMMLABackend",
             "FlashMLABackend", "FlashInferMLAAttnBackend"},
}
# config.attention_backend name -> backend classes (attention_registry.py)
BACKEND_NAMES = {
    "aiter": {"AiterAttnBackend", "AiterMultiStepDraftBackend"},
    "dsv4": {"DeepseekV4HipRadixBackend", "DeepseekV4AttnBackend"},
    "dsa": {"DeepseekSparseAttnBackend"}, "nsa": {"NativeSparseAttnBackend",
                                                  "DeepseekSparseAttnBackend"},
    "qsa": {"QwenSparseAttnBackend"}, "triton": {"TritonAttnBackend"},
    "fa3": {"FlashAttentionBackend"}, "flashinfer": {"FlashInferAttnBackend"},
}

# Helpers that build metadata but are called from forward(), not from init_forward_metadata*.
_NAMED_BUILDER = re.compile(r"^_?(build|make|prepare|attach|compute)_\w*meta")

VERDICTS = ("syncs", "host-mirror", "capture-only", "unreachable", "cannot-tell")

# --- forward-mode paths -------------------------------------------------------------------
# A site's reach is the set of (mode, phase) pairs under which the branches around it can run.
# Modes follow ForwardMode (forward_batch_info.py of 0.5.17-0.5.23): EXTEND/MIXED/SPLIT_PREFILL
# are the target's extend, DRAFT_EXTEND(_V2) the draft's, DLLM_EXTEND/PREBUILT "other".
MODES = ("target-extend", "draft-extend", "target-verify", "decode", "idle", "other")
PHASES = ("step", "capture")  # per-step run (eager or graph replay) / graph capture
State = frozenset
ALL: frozenset = frozenset((m, p) for m in MODES for p in PHASES)
NONE: frozenset = frozenset()
PATH_CLASSES = ("per-step", "capture-only", "unreachable", "cannot-tell")

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
_GRAPH_ENTRY = re.compile(r"_out_graph$|_in_graph$|_cuda_graph$|cuda_graph_capture$")
# Entry points the model runner or graph runners call from outside the file.
_EXTERNAL = re.compile(r"^init_forward_metadata(_capture_cuda_graph|_replay_cuda_graph|"
                       r"_out_graph|_in_graph|_for_breakable_cuda_graph_capture)?$")


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
    phases = ("capture",) if "capture" in name and "replay" not in name else \
        ("step",) if "replay" in name else PHASES
    for hint, mode in (("verify", "target-verify"), ("draft_extend", "draft-extend"),
                       ("decode", "decode")):
        if hint in name:
            return _modes({mode}, phases)
    if _GRAPH_ENTRY.search(name):  # called by the graph runners only: their modes
        return _modes(GRAPH_MODES, phases)
    return _modes(set(MODES), phases)


def _last_name(e: ast.AST) -> str:
    if isinstance(e, ast.Call):
        e = e.func
    if isinstance(e, ast.Attribute):
        return e.attr
    return e.id if isinstance(e, ast.Name) else ""


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
    method that returns a forward-mode test of its argument), read through."""
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
        return cond(env["helpers"][e.func.attr], facts, env, depth + 1)
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
        fact = facts.get(left.id) if isinstance(left, ast.Name) else None
        if fact in ("host-set", "none") and isinstance(right, ast.Constant) and \
                right.value is None and isinstance(op, (ast.Is, ast.IsNot)):
            # "host-set": every caller passes a host value it just made (never None); "none":
            # every caller passes None (a host value may still be None: it decides nothing)
            holds = (fact == "none") == isinstance(op, ast.Is)
            return Cond(ALL, NONE) if holds else Cond(NONE, ALL)
    if isinstance(e, ast.Name) and facts.get(e.id) == "none":
        return Cond(NONE, ALL)
    if isinstance(e, (ast.Name, ast.Attribute, ast.Call)) and _CAPTURE_FLAG.search(_last_name(e)):
        return Cond(_modes(set(MODES), ("capture",)), _modes(set(MODES), ("step",)))
    return Cond(ALL, ALL)


def _mode_expr(e: ast.AST, helpers: dict[str, ast.AST]) -> bool:
    """Whether `e` is a test of the forward mode (a predicate, or a mode helper's call)."""
    for n in _walk(e):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                n.func.attr in _PREDICATES or (n.func.attr in helpers and isinstance(
                    n.func.value, ast.Name) and n.func.value.id == "self")):
            return True
    return False


def mode_helpers(tree: ast.Module) -> dict[str, ast.AST]:
    """Methods whose last statement returns a forward-mode test (`_is_speculative_paged_mode`):
    a call to one is read as that test."""
    out: dict[str, ast.AST] = {}
    for c in tree.body:
        if not isinstance(c, ast.ClassDef):
            continue
        for m in c.body:
            if isinstance(m, ast.FunctionDef) and m.body and isinstance(m.body[-1], ast.Return) \
                    and m.body[-1].value is not None and _mode_expr(m.body[-1].value, {}):
                out[m.name] = m.body[-1].value
    return out


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


def config_attrs(tree: ast.Module) -> dict[str, set[str]]:
    """Per class, the `self.X` set only from the server arguments (`get_spec().num_...`,
    `server_args.x`) or constants: host values, never a device tensor."""
    return {c.name: class_config_attrs(c) for c in tree.body if isinstance(c, ast.ClassDef)}


def class_config_attrs(c: ast.ClassDef) -> set[str]:
    """`config_attrs` of one class (assignments are statements: all of them lie under the
    members of its body, whose walks `_inner` keeps)."""
    seen: dict[str, bool] = {}
    for item in c.body:
        nodes = [item, *_inner(item)] if isinstance(item, ast.FunctionDef) else \
            list(_walk(item))
        # `spec = get_spec()` then `self.n = spec.speculative_num_draft_tokens`: a local bound
        # to the server arguments is read as them
        args_locals = {t.id for n in nodes if isinstance(n, ast.Assign)
                       and _CONFIG.search(_unparse(n.value)) for t in n.targets
                       if isinstance(t, ast.Name)}
        for n in nodes:
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and \
                            t.value.id == "self":
                        ok = isinstance(n.value, ast.Constant) or bool(
                            _CONFIG.search(_unparse(n.value))) or (
                            isinstance(n.value, ast.Attribute)
                            and isinstance(n.value.value, ast.Name)
                            and n.value.value.id in args_locals)
                        seen[t.attr] = seen.get(t.attr, True) and ok
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
        nodes = [item, *_inner(item)] if isinstance(item, ast.FunctionDef) else _walk(item)
        for n in nodes:
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
        return "capture-only"
    return "per-step"


def step_paths(state: frozenset) -> tuple[str, ...]:
    return tuple(m for m in MODES if (m, "step") in state)


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
# Platform flags (sglang.srt.utils `is_hip()` / `_is_hip = is_hip()` / `self.is_npu`): a test of
# one is the platform under audit; diag audits hip and cuda, never npu or xpu.
PLATFORM_NAMES = {"is_hip": "hip", "_is_hip": "hip", "is_cuda": "cuda", "_is_cuda": "cuda",
                  "is_npu": "npu", "_is_npu": "npu", "is_xpu": "xpu", "_is_xpu": "xpu"}
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=",
        ast.Is: "is", ast.IsNot: "is not"}
_NEGATE = {"==": "!=", "!=": "==", ">": "<=", ">=": "<", "<": ">=", "<=": ">", "is": "is not",
           "is not": "is", "true": "false", "false": "true"}
_SWAP = {"==": "==", "!=": "!=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}
# A guard: (fact, op, value, where, text): `fact` a SpecConfig field or `mirror:<name>` (a
# ForwardBatch host mirror tested against None), `where` the `file:line` of the test.
Guard = tuple


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


@dataclass(frozen=True)
class Site:
    file: str  # relative to the target root (sglang/...)
    line: int
    function: str  # Class.method or function
    backend: str  # the class (or module stem) the builder belongs to
    call: str  # source text of the call, shortened
    kind: str  # repeat_interleave | item | tolist | cpu | numpy | nonzero | ... | int()
    verdict: str  # one of VERDICTS
    why: str
    syncs: int  # syncs each time the call runs, when it reads a device tensor (else 0); it
    # counts per step only where verdict == "syncs" (not capture-only or unreachable)
    col: int = 0  # column of the call: two calls on one line are two sites
    paths: tuple[str, ...] = ()  # MODES that reach it per step (eager run or graph replay)
    path_class: str = "per-step"  # one of PATH_CLASSES
    # the calls that reach its function, `file:line Caller.qualname`, for each helper up to an
    # entry point (a chain one caller wide at each level, the first reaching caller)
    callers: tuple[str, ...] = ()
    # the configuration / host-mirror tests every path to it passes (`Guard`s), in order
    guards: tuple[Guard, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy() | {"paths": list(self.paths), "callers": list(self.callers),
                                       "guards": [list(g) for g in self.guards]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Site:
        return cls(**(d | {"paths": tuple(d.get("paths", ())),
                           "callers": tuple(d.get("callers", ())),
                           "guards": tuple(tuple(g) for g in d.get("guards", ()))}))

    def reach(self, modes: set[str] | frozenset[str]) -> str:
        """`reaches` | `not-on-path` | `capture-only` | `unreachable` | `cannot-tell` for a
        configuration whose per-step paths are `modes`."""
        if self.path_class != "per-step":
            return self.path_class
        return "reaches" if set(self.paths) & set(modes) else "not-on-path"


@dataclass
class Census:
    root: str
    files: int = 0
    builders: dict[str, list[str]] = field(default_factory=dict)  # file -> builder qualnames
    sites: list[Site] = field(default_factory=list)
    with_output_size: list[Site] = field(default_factory=list)  # repeat_interleave with it
    errors: list[str] = field(default_factory=list)  # files that did not parse

    def by_backend(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for s in self.sites:
            row = out.setdefault(s.backend, dict.fromkeys(VERDICTS, 0) | {"sync_count": 0})
            row[s.verdict] += 1
            row["sync_count"] += s.syncs if s.verdict == "syncs" else 0
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "files": self.files, "builders": self.builders,
                "sites": [s.to_dict() for s in self.sites],
                "with_output_size": [s.to_dict() for s in self.with_output_size],
                "errors": self.errors}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Census:
        return cls(d["root"], d["files"], {k: list(v) for k, v in d["builders"].items()},
                   [Site.from_dict(s) for s in d["sites"]],
                   [Site.from_dict(s) for s in d["with_output_size"]], list(d["errors"]))

    def syncing(self, backends: set[str] | None = None) -> list[Site]:
        return [s for s in self.sites if s.verdict == "syncs"
                and (backends is None or s.backend in backends)]


def _src(node: ast.AST, limit: int = 90) -> str:
    text = " ".join(_unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _root_name(e: ast.AST) -> str | None:
    while isinstance(e, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(e, ast.Attribute) and e.attr.endswith("_cpu"):
            return e.attr
        e = e.func if isinstance(e, ast.Call) else e.value
    return e.id if isinstance(e, ast.Name) else None


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


def _builders(tree: ast.Module, modules: Modules | None = None
              ) -> tuple[list[tuple[str, str, ast.FunctionDef]], Any]:
    """(qualname, backend, def) of the init_forward_metadata* family and what it calls, and the
    resolver from (backend, call) to the (qualname, def) it calls."""
    classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}
    funcs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}

    def methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
        return {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}

    def lookup(cls_name: str, meth: str, seen: set[str]) -> tuple[str, ast.FunctionDef] | None:
        cls = classes.get(cls_name)
        if cls is None or cls_name in seen:
            return None
        seen.add(cls_name)
        if meth in methods(cls):
            return cls_name, methods(cls)[meth]
        for b in cls.bases:
            base = b.id if isinstance(b, ast.Name) else None
            if base:
                found = lookup(base, meth, seen)
                if found:
                    return found
        return None

    here = index(tree)
    homes: dict[int, tuple[str, ModuleIndex]] = {}  # helper def -> (its file, its module)
    bound: dict[tuple[int, str], Any] = {}  # (module, name) -> what it binds to

    def imported(mod: ModuleIndex, name: str) -> tuple[str, ast.FunctionDef] | None:
        """A function of another attention module that `name` is bound to (followed: its
        syncs count for the builder that calls it)."""
        dotted = mod.imports.get(name, "")
        if modules is None or not dotted.startswith(_ATTENTION_PKG):
            return None  # not an attention module: not parsed at all
        key = (id(mod), name)
        if key not in bound:
            bound[key] = modules.resolve(mod, name)
        b = bound[key]
        if b is None or not isinstance(b.node, ast.FunctionDef):
            return None
        rel = modules.relpath(b.path)  # type: ignore[union-attr]
        if f"/{ATTENTION_DIR}/" not in f"/{rel}":
            return None  # outside the scanned (and cached) tree
        other = modules.module(b.dotted)  # type: ignore[union-attr]
        if other is not None:
            homes[id(b.node)] = (rel, other)
        return f"{b.dotted.rsplit('.', 1)[-1]}.{b.node.name}", b.node

    def resolve(backend: str, call: ast.Call, where: ast.AST | None = None
                ) -> tuple[str, ast.FunctionDef] | None:
        f = call.func
        home = homes.get(id(where)) if where is not None else None
        if home is not None:  # inside a helper of another module: its own names
            if isinstance(f, ast.Name):
                if f.id in home[1].funcs:
                    fn = home[1].funcs[f.id]
                    homes.setdefault(id(fn), home)
                    return f"{Path(home[0]).stem}.{f.id}", fn
                return imported(home[1], f.id)
            return None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
                f.value.id == "self" and backend in classes:
            found = lookup(backend, f.attr, set())
            if found:
                return f"{found[0]}.{f.attr}", found[1]
        elif isinstance(f, ast.Name) and f.id in funcs:
            return f.id, funcs[f.id]
        elif isinstance(f, ast.Name):
            return imported(here, f.id)
        return None

    resolve.homes = homes  # type: ignore[attr-defined]
    resolve.classes = classes  # type: ignore[attr-defined]

    resolve.mode_helpers = mode_helpers(tree)  # type: ignore[attr-defined]
    resolve.mode_guards = mode_guards(tree)  # type: ignore[attr-defined]
    configs: dict[str, set[str]] = {}  # class -> config_attrs, for the classes asked about

    def class_config(name: str) -> set[str]:
        if name not in configs:
            configs[name] = class_config_attrs(classes[name])
        return configs[name]

    def host_attrs(backend: str, seen: set[str] | None = None) -> set[str]:
        seen = seen if seen is not None else set()
        cls = classes.get(backend)
        if cls is None or backend in seen:
            return set()
        seen.add(backend)
        out = set(class_config(backend))
        for b in cls.bases:
            if isinstance(b, ast.Name):
                out |= host_attrs(b.id, seen)
        return out

    resolve.host_attrs = host_attrs  # type: ignore[attr-defined]
    devices: dict[str, set[str]] = {}

    def device_attrs(backend: str) -> set[str]:
        if backend not in devices:
            devices[backend] = class_device_attrs(classes[backend]) \
                if backend in classes else set()
        return devices[backend]

    resolve.device_attrs = device_attrs  # type: ignore[attr-defined]
    out: dict[tuple[str, str], tuple[str, str, ast.FunctionDef]] = {}
    todo: list[tuple[str, str, ast.FunctionDef]] = []
    for cname, cls in classes.items():
        for mname, m in methods(cls).items():
            if mname.startswith("init_forward_metadata") or _NAMED_BUILDER.search(mname):
                todo.append((f"{cname}.{mname}", cname, m))
    while todo:
        qual, backend, fn = todo.pop()
        if (qual, backend) in out:
            continue
        out[(qual, backend)] = (qual, backend, fn)
        for n in _inner(fn):
            if isinstance(n, ast.Call):
                found = resolve(backend, n, fn)
                if found:
                    todo.append((found[0], backend, found[1]))
    return list(out.values()), resolve


def _is_seed(qual: str) -> bool:
    name = qual.rsplit(".", 1)[-1]
    return name.startswith("init_forward_metadata") or bool(_NAMED_BUILDER.search(name))


def _analyse(tree: ast.Module, rel: str, modules: Modules | None = None
             ) -> tuple[list[str], list[_Scan]]:
    """Walk every builder until what reaches each one (the union over its callers' branches,
    and, for an entry point, what its name says) and its callers' argument facts settle."""
    builders, resolve = _builders(tree, modules)
    homes = getattr(resolve, "homes", {})
    keys = [(q, b) for q, b, _ in builders]
    entry: dict[tuple[str, str], frozenset] = {}
    unknown: dict[tuple[str, str], bool] = {}
    facts: dict[tuple[str, str], dict[str, str]] = {}
    scans: dict[tuple[str, str], _Scan] = {}
    truths: dict[tuple[str, str], dict[str, tuple[frozenset, frozenset]]] = {}
    # the guards every reaching call to a helper passes (an entry point: none)
    guards: dict[tuple[str, str], frozenset] = {}
    called_from: dict[tuple[str, str], frozenset] = {}
    classes = getattr(resolve, "classes", {})
    helpers = getattr(resolve, "mode_helpers", {})
    infos = {id(fn): _FnInfo(fn, helpers) for _, _, fn in builders}
    # A scan depends only on its builder and these inputs: one whose inputs did not change
    # since the last pass is the scan that pass made (so it is kept, not redone).
    made: dict[tuple[str, str], tuple[tuple, _Scan]] = {}
    for _ in range(12):
        scans = {}
        for qual, backend, fn in builders:
            key = (qual, backend)
            inputs = (entry.get(key, NONE), unknown.get(key, False), facts.get(key, {}),
                      truths.get(key) or {}, guards.get(key, frozenset()))
            if key in made and made[key][0] == inputs:
                scans[key] = made[key][1]
                continue
            where = homes[id(fn)][0] if id(fn) in homes else rel  # a helper's own file
            s = _Scan(fn, qual, backend, where, inputs[2], resolve, inputs[3], infos[id(fn)])
            s.run(inputs[0], inputs[1], inputs[4])
            scans[key] = s
            made[key] = (inputs, s)
        callers: dict[tuple[str, str], list[_Edge]] = {}
        for s in scans.values():
            for e in s.edges:
                callers.setdefault(e.callee, []).append(e)
        new_entry, new_unknown, new_facts, new_truths, new_guards = {}, {}, {}, {}, {}
        for key in keys:
            name = key[0].rsplit(".", 1)[-1]
            edges = callers.get(key, [])
            external = bool(_EXTERNAL.match(name)) or (_is_seed(key[0]) and not edges)
            st = seed_state(name) if external else NONE
            for e in edges:
                st |= e.state
            new_entry[key] = st
            new_unknown[key] = any(e.unknown and e.state for e in edges)
            reaching = [e.guards for e in edges if e.state]
            if reaching and not external:
                new_guards[key] = common_guards(reaching)
            elif not edges and not _EXTERNAL.match(name) and key[1] in classes:
                # a named builder only non-builders call (`forward_*`): their guards
                new_guards[key] = called_from.setdefault(key, call_site_guards(
                    classes[key[1]], name, rel))
            if edges and not external:
                agreed: dict[str, str] = {}
                for pname in {p for e in edges for p in e.args}:
                    vals = {e.args.get(pname, "other") for e in edges}
                    if len(vals) == 1 and vals <= {"none", "host", "host-set"}:
                        agreed[pname] = vals.pop()
                    elif vals == {"host", "host-set"}:
                        agreed[pname] = "host"
                new_facts[key] = agreed
                pnames = set.intersection(*(set(e.truth) for e in edges))
                new_truths[key] = {p: (frozenset().union(*(e.truth[p][0] for e in edges)),
                                       frozenset().union(*(e.truth[p][1] for e in edges)))
                                   for p in pnames}
        if new_entry == entry and new_facts == facts and new_unknown == unknown and \
                new_truths == truths and new_guards == guards:
            break
        entry, unknown, facts, truths, guards = (new_entry, new_unknown, new_facts, new_truths,
                                                 new_guards)
    names = [q for q, _, fn in sorted(builders, key=lambda b: b[2].lineno)]
    order = sorted(builders, key=lambda b: b[2].lineno)
    callers: dict[tuple[str, str], list[_Edge]] = {}
    for s in scans.values():
        for e in s.edges:
            if e.state:  # a call that can run
                callers.setdefault(e.callee, []).append(e)
    for key, s in scans.items():
        chain, seen, at = [], {key}, key
        while callers.get(at):
            e = callers[at][0]
            chain.append(e.at)
            at = (e.at.rsplit(" ", 1)[-1], at[1])
            if at in seen:
                break
            seen.add(at)
        s.chain = tuple(chain)
    return list(dict.fromkeys(names)), [scans[(q, b)] for q, b, _ in order]

# A file none of whose lines could define a builder seed has no builders (`_builders` starts
# from seeds only): it is not parsed. A textual superset of the seed names, so nothing is missed.
_SEED_TEXT = re.compile(r"\bdef\s+(init_forward_metadata|_?(build|make|prepare|attach|compute)"
                        r"_\w*meta)")


def scan_file(path: Path, rel: str) -> tuple[list[str], list[Site], list[Site]]:
    return scan_source(path.read_text(encoding="utf-8", errors="replace"), path, rel)


def scan_source(source: str, path: Path, rel: str | Any, modules: Modules | None = None
                ) -> tuple[list[str], list[Site], list[Site]]:
    """`scan_file` of a file already read; `rel` may be a callable that gives it (only a file
    that can define a builder needs its relative path)."""
    if not _SEED_TEXT.search(source):
        return [], [], []
    tree = parse_text(source, str(path))
    names, scans = _analyse(tree, rel() if callable(rel) else rel, modules)
    sites, with_os = [], []
    seen: set[tuple[str, int, int, str]] = set()
    for scan in scans:
        # a helper reached from two backends is listed once per backend; every call on a line
        # is its own site (an outer host read keeps the inner `.cpu()` that syncs)
        for site in scan.sites:
            key = (site.backend, site.file, site.line, site.col, site.kind)
            if key not in seen:
                seen.add(key)
                sites.append(replace(site, callers=scan.chain) if scan.chain else site)
        with_os.extend(scan.with_os)
    return names, sites, with_os


def census(target: Target, use_cache: bool = True) -> Census:
    """Scan every module under sglang/srt/layers/attention (raises FileNotFoundError if absent).

    The result is cached on disk (diag.cache), keyed by every scanned file's path, size, mtime
    and content hash and by this module's source: a cached census is the one a scan would give.
    """
    from diag import cache

    base = target.file(ATTENTION_DIR)
    if not base.is_dir():
        raise FileNotFoundError(f"{target.relpath(base)} not found")
    paths = sorted(base.rglob("*.py"))
    digest = None
    if use_cache:
        try:
            digest = cache.files_key(paths, str(target.root), cache.code_fingerprint(
                __name__, "diag.probes.source"))  # the parse core is part of the census
        except OSError:
            digest = None
    if digest is not None:
        hit = cache.load("census", digest)
        if hit is not None:
            try:
                return Census.from_dict(hit["value"])
            except (KeyError, TypeError, ValueError):
                pass
    with gc_paused():
        out = _scan_all(target, paths)
    if digest is not None:
        cache.store("census", digest, out.to_dict())
    return out


def _scan_all(target: Target, paths: list[Path]) -> Census:
    out = Census(str(target.root))
    modules = Modules(target)  # helpers in other attention modules, parsed once for all
    root = target.root.resolve()

    def relpath(path: Path) -> str:  # Target.relpath, with the root resolved once
        try:
            return str(path.resolve().relative_to(root))
        except ValueError:
            return str(path)

    for path in paths:
        out.files += 1
        source = path.read_text(encoding="utf-8", errors="replace")
        rel: list[str] = []  # computed for the files that can define a builder only

        def rel_of(path: Path = path, rel: list[str] = rel) -> str:
            if not rel:
                rel.append(relpath(path))
            return rel[0]

        try:
            names, sites, with_os = scan_source(source, path, rel_of, modules)
        except (SyntaxError, ValueError, RecursionError) as e:
            out.errors.append(f"{rel_of()}: {type(e).__name__}: {e}")
            continue
        if names:
            out.builders[rel_of()] = names
        out.sites.extend(sites)
        out.with_output_size.extend(with_os)
    return out
