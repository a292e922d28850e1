"""Per speculative phase, graph or eager, for the configuration SGLang resolves at start.

Why: the draft-extend gate alone does not say what a server runs. SGLang's argument handling
(`srt/arg_groups/*.py` from 0.5.19) refuses some configurations at start (topk > 1 for a model
family, topk > 1 with a page size > 1 outside a few backends), the model family picks the
backend class (MLA or MHA under one `--attention-backend`) and may force a page size, the HIP
environment decides that page size for DSA models, and `--speculative-num-steps 1` builds no
draft-decode runner. Every rule here is found in the release's own source by its text or shape
(never by a line number kept here), so each verdict cites the `file:line` it was read at; a rule
whose text is not in the tree is not applied, and the verdict says what it could not read.

Decided by reading the source (the release's argument code is not run: it needs the platform
objects of a GPU build). What no input decides is `depends`, with the condition in words.
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from diag.context import SpecConfig
from diag.probes import backends
from diag.probes import gate as gate_mod
from diag.probes.source import parse_file
from diag.target import Target

# Attention backends that run on AMD GPUs; the HIP table lists these only. In sglang 0.5.23:
# the HIP gate's classes (srt/speculative/eagle_worker_v2.py:560-564) come from aiter, dsv4 (HIP
# branch at srt/layers/attention/attention_registry.py:185), dsa/nsa and qsa (registry :127,
# :177, :150, :166, :157); wave (:134) is AMD's and triton (:206) runs on HIP too.
HIP_BACKENDS = ("aiter", "wave", "dsv4", "dsa", "nsa", "qsa", "triton")

PHASES = ("target-verify", "draft-decode", "draft-extend")
GRAPH, EAGER, REFUSED, DEPENDS = "graph", "eager", "refused", "depends"
UNDER_AUDIT = "under audit"

SPEC_HOOK = "srt/arg_groups/speculative_hook.py"
DSV4_HOOK = "srt/arg_groups/deepseek_v4_hook.py"
OVERRIDES = "srt/arg_groups/overrides.py"
DSV2_OVERRIDES = "srt/arg_groups/model_overrides/deepseek_v2.py"
DSV4_OVERRIDES = "srt/arg_groups/model_overrides/deepseek_v4.py"
DSA_UTILS = "srt/layers/attention/dsa/utils.py"
MODEL_CONFIG = "srt/configs/model_config.py"
MODEL_HOOK = "srt/arg_groups/model_hook.py"
DRAFT_RUNNER = "srt/speculative/eagle_draft_cuda_graph_runner.py"
EXTEND_RUNNER = "srt/speculative/eagle_draft_extend_cuda_graph_runner.py"
VERIFY_RUNNER = "srt/model_executor/runner/decode_cuda_graph_runner.py"

# Backends that serve one model family only: without --model, that family is the model (the
# backend DeepSeek-V4 picks, arg_groups/deepseek_v4_hook.py `_default_dsv4_attention_backend`;
# the DSA backend DeepSeek-V3.2-style models get, arg_groups/model_overrides/deepseek_v2.py).
IMPLIED_MODEL = {"dsv4": "DeepseekV4ForCausalLM", "compressed": "DeepseekV4ForCausalLM",
                 "dsa": "DeepseekV32ForCausalLM", "nsa": "DeepseekV32ForCausalLM"}
# Short family names accepted by --model besides a path or an HF architecture name.
FAMILIES = {
    "llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM",
    "deepseek-v3": "DeepseekV3ForCausalLM", "deepseek-v32": "DeepseekV32ForCausalLM",
    "glm5": "GlmMoeDsaForCausalLM", "deepseek-v4": "DeepseekV4ForCausalLM",
}
# A family name has no config.json: the parameters that matter, as the published checkpoints
# of that family carry them (DeepSeek-V3.2 and GLM-5 config.json: index_topk 2048, no index_kpool).
FAMILY_PARAMS = {"DeepseekV32ForCausalLM": {"index_topk": 2048},
                 "GlmMoeDsaForCausalLM": {"index_topk": 2048}}


@dataclass(frozen=True)
class Where:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Fallback:
    """A run-time condition under which a captured phase still runs a pass eager."""

    condition: str
    reason: str  # as the live counters name it: batch-above-captured | runner-declined | ...
    file: str
    line: int

    def to_dict(self) -> dict:
        return {"condition": self.condition, "reason": self.reason, "file": self.file,
                "line": self.line}


@dataclass
class PhaseVerdict:
    phase: str
    backend: str
    mode: str  # graph | eager | refused | depends
    reason: str
    where: Where | None = None
    config: str = UNDER_AUDIT
    runtime_fallbacks: list[Fallback] = field(default_factory=list)
    decided_by: str = "source reading"

    def data(self) -> dict:
        return {"phase": self.phase, "backend": self.backend, "mode": self.mode,
                "config": self.config, "file": self.where.file if self.where else None,
                "line": self.where.line if self.where else None,
                "runtime_fallbacks": [f.to_dict() for f in self.runtime_fallbacks],
                "decided_by": self.decided_by}


# --------------------------------------------------------------------------- source anchors


def find_line(target: Target, rel: str, pattern: str, after: int = 0) -> Where | None:
    """The first line of `rel` (under the sglang package) matching `pattern` past line `after`."""
    path = target.file(rel)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    rx = re.compile(pattern)
    for i, text in enumerate(lines[after:], start=after + 1):
        if rx.search(text):
            return Where(target.relpath(path), i)
    return None


def _get_bool(env: dict[str, str], name: str) -> bool:
    """`get_bool_env_var` (srt/utils/common.py): lower-cased value in ("true", "1")."""
    return env.get(name, "false").lower() in ("true", "1")


# --------------------------------------------------------------------------- the model


@dataclass
class Model:
    arch: str | None
    mla: bool | None  # None: no model given
    dsa: bool = False
    dsv4: bool = False
    index_kpool: int = 1
    mla_where: Where | None = None
    dsa_where: Where | None = None
    source: str = ""


def _tuple_in_func(tree: ast.Module, func: str) -> list[str]:
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == func):
        for node in ast.walk(fn):
            if isinstance(node, ast.Tuple) and node.elts and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                return [e.value for e in node.elts]
    return []


def _mla_branch(tree: ast.Module, arch: str, target: Target) -> Where | None:
    """The `self.attention_arch = AttentionArch.MLA` line under an `if` naming `arch`."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.If) or not any(
                isinstance(c, ast.Constant) and c.value == arch for c in ast.walk(node.test)):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and "AttentionArch.MLA" in ast.unparse(stmt.value) \
                    and "attention_arch" in ast.unparse(stmt.targets[0]):
                return Where(target.relpath(target.file(MODEL_CONFIG)), stmt.lineno)
    return None


def read_model(target: Target, model: str | None) -> Model:
    """Architecture and the config parameters that matter, from a path's config.json or a name;
    MLA and DSA as the release's model_config.py decides them for that architecture."""
    if not model:
        return Model(None, None)
    params: dict = {}
    p = Path(model)
    if os.sep in model and not p.exists():  # a server's model path, not on this machine
        return Model(None, None, source=f"{model} (not readable here: MLA/MHA unknown)")
    cfg_file = p / "config.json" if p.is_dir() else p if p.name == "config.json" else None
    if cfg_file is not None:
        try:
            params = json.loads(cfg_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"--model {model}: cannot read {cfg_file.name} ({e})") from None
        archs = params.get("architectures") or []
        if not archs or not isinstance(archs[0], str):
            raise ValueError(f"--model {model}: config.json names no architectures")
        arch, source = archs[0], f"{cfg_file}"
    else:
        arch = FAMILIES.get(model.lower(), model)
        params = dict(FAMILY_PARAMS.get(arch, {}))
        source = f"family {model!r} -> {arch}"
    m = Model(arch, False, source=source)
    m.index_kpool = int(params.get("index_kpool", 1) or 1)
    tree = parse_file(target.file(MODEL_CONFIG))
    m.mla_where = _mla_branch(tree, arch, target) if tree is not None else None
    m.mla = m.mla_where is not None
    if tree is not None and arch in _tuple_in_func(tree, "is_deepseek_dsa") \
            and params.get("index_topk") is not None:
        m.dsa = True
        m.dsa_where = find_line(target, MODEL_CONFIG, r"def is_deepseek_dsa")
    m.dsv4 = arch == "DeepseekV4ForCausalLM" and find_line(
        target, MODEL_HOOK, r'"DeepseekV4ForCausalLM"') is not None
    return m


# --------------------------------------------------------------------------- the page size


@dataclass
class PageSize:
    value: int | None  # None: depends (see `condition`)
    why: str
    where: Where | None = None
    condition: str | None = None  # for `depends`: what decides it, in words
    if_true: int | None = None  # the page size when the condition holds


# `_mla_backend_page_constraints` (arg_groups/overrides.py): backends that force page size 64,
# and the sizes each keeps when given (found by the warning each logs).
BACKEND_PAGE = {
    "flashmla": (r"FlashMLA only supports a page_size of 64", ()),
    "trtllm_mla": (r"TensorRT-LLM MLA only supports page_size of 32 or 64", (32, 64)),
    "cutedsl_mla": (r"CuteDSL MLA only supports page_size of 32 or 64", (32, 64)),
    "hpc_ops": (r"HPC-Ops attention only supports a page_size of 64", (64,)),
}


def resolve_page_size(target: Target, platform: str, cfg: SpecConfig, model: Model,
                      env: dict[str, str], backend: str | None = None) -> PageSize:
    """The page size SGLang runs with: a model override, a backend's constraint, else
    --page-size, else the default."""
    if model.dsv4:
        w = find_line(target, DSV4_OVERRIDES, r"page_size = 256")
        if w:
            return PageSize(256, f"{model.arch} forces page_size 256 ({w})", w)
    if model.dsa:
        forced = 64 * model.index_kpool
        w = find_line(target, DSV2_OVERRIDES, r"Setting page size to (\{page_size\}|64) for DeepSeek DSA\.")
        if platform == "hip":
            w1 = find_line(target, DSV2_OVERRIDES,
                           r"is_hip and not aiter_can_use_preshuffle_paged_mqa\(\)")
            fn = find_line(target, DSA_UTILS, r"def aiter_can_use_preshuffle_paged_mqa")
            if w1 is not None:
                if not _get_bool(env, "SGLANG_USE_AITER"):
                    return PageSize(1, f"DSA on HIP with SGLANG_USE_AITER unset/false: the legacy "
                                       f"path forces page_size 1 ({w1}, {fn})", w1)
                if _get_bool(env, "SGLANG_DSA_HIP_DISABLE_PRESHUFFLE"):
                    return PageSize(1, "DSA on HIP with SGLANG_DSA_HIP_DISABLE_PRESHUFFLE set: "
                                       f"page_size 1 ({w1}, {fn})", w1)
                if _get_bool(env, "AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS"):
                    return PageSize(forced, "DSA on HIP with AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS"
                                            f" set: page_size {forced} ({w1}, {fn})", w1)
                return PageSize(None, "DSA on HIP: the page size follows the server's Triton",
                                w1, condition=f"the server's Triton >= 3.5.0 gives page_size "
                                              f"{forced}, older gives 1 ({fn}; {w1})",
                                if_true=forced)
        if w:
            return PageSize(forced, f"{model.arch} (DSA) forces page_size {forced} ({w})", w)
    rule = BACKEND_PAGE.get(backend or "")
    w = find_line(target, OVERRIDES, rule[0]) if rule else None
    if rule and w is not None and not (rule[1] and cfg.page_size in rule[1]):
        given = f" (--page-size {cfg.page_size} overridden)" if cfg.page_size else ""
        return PageSize(64, f"{backend} forces page_size 64{given} ({w})", w)
    if cfg.page_size is not None:
        return PageSize(cfg.page_size, f"--page-size {cfg.page_size}")
    w = find_line(target, OVERRIDES, r"def _page_size_default")
    if platform == "hip" and env.get("SGLANG_AITER_KV_CACHE_LAYOUT", "").lower() == \
            "vectorized_5d" and w:
        return PageSize(64, f"SGLANG_AITER_KV_CACHE_LAYOUT=vectorized_5d on HIP: default "
                            f"page_size 64 ({w})", w)
    return PageSize(1, f"default page_size 1 ({w})" if w else "default page_size 1", w)


# --------------------------------------------------------------------------- start-time refusals


def _page_tree_backends(target: Target) -> tuple[list[str], Where | None]:
    w = find_line(target, SPEC_HOOK, r"_PAGE_TREE_SPEC_BACKENDS = \(")
    if w is None:
        return [], None
    tree = parse_file(target.file(SPEC_HOOK))
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Assign) and node.lineno == w.line \
                and isinstance(node.value, ast.Tuple):
            names = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
            raise_at = find_line(target, SPEC_HOOK, r"raise ValueError", w.line)
            return names, raise_at or w
    return [], None


# Backend classes that raise on topk > 1 when the draft-extend (SPEC_V2) metadata is built:
# (file, the guard method found by name).
BACKEND_TOPK_GUARD = {
    "aiter": ("srt/layers/attention/aiter_backend.py", r"def _ensure_spec_v2_topk_supported"),
}


def _topk_guard(fn: ast.FunctionDef) -> int | None:
    """The line of a `raise` under `if topk > 1` / `if topk != 1` (or `self.topk`) in `fn`."""
    for node in ast.walk(fn):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and len(node.test.ops) == 1):
            continue
        left, op, right = node.test.left, node.test.ops[0], node.test.comparators[0]
        name = left.id if isinstance(left, ast.Name) else left.attr \
            if isinstance(left, ast.Attribute) else None
        if name == "topk" and isinstance(right, ast.Constant) and right.value == 1 \
                and isinstance(op, (ast.Gt, ast.NotEq)):
            for st in node.body:
                if isinstance(st, ast.Raise):
                    return st.lineno
    return None


def _decode_topk_guard(info: backends.BackendInfo | None, cfg: SpecConfig
                       ) -> tuple[str, str, Where | None] | None:
    """The multi-step draft-decode class (built with more than one step) refusing topk > 1 in
    its constructor: refused; `depends` where the model (MLA/MHA) or the steps are not given."""
    if info is None or (cfg.speculative_num_steps or 2) <= 1:
        return None
    hits, clean = [], []
    for cls, owner, fn, file in info.methods("__init__", "draft_attn_backend"):
        line = _topk_guard(fn)
        (hits if line else clean).append((cls, owner, Where(file, line) if line else None))
    if not hits:
        return None
    cls, owner, w = hits[0]
    why = f"{owner}.__init__ raises for topk > 1 ({w}): the draft-decode backend cannot be built"
    if clean:
        return DEPENDS, (f"refused at start if the model builds {cls} (not "
                         f"{', '.join(c for c, _, _ in clean)}): {why}; pass --model"), w
    if cfg.speculative_num_steps is None:
        return DEPENDS, f"refused with --speculative-num-steps >= 2: {why}", w
    return REFUSED, why, w


def refusal(target: Target, backend: str, cfg: SpecConfig, model: Model,
            page: PageSize, info: backends.BackendInfo | None = None
            ) -> tuple[str, str, Where | None] | None:
    """(mode, reason, where) when the start is refused (or refused only under a condition:
    mode `depends`), else None."""
    topk = cfg.speculative_eagle_topk
    if topk is None or topk <= 1:
        return None
    found: list[tuple[str, str, Where | None]] = []  # in the order the start meets them
    if model.dsv4 and (cfg.speculative_algorithm or "EAGLE").upper() in ("EAGLE", "NEXTN"):
        w = find_line(target, DSV4_HOOK, r"topk == 1 is supported")
        if w:
            found.append((REFUSED, f"{model.arch} asserts --speculative-eagle-topk 1 ({w})", w))
    if backend == "trtllm_mha":
        w = find_line(target, SPEC_HOOK, r"trtllm_mha backend only supports topk = 1")
        if w:
            found.append((REFUSED, f"trtllm_mha refuses --speculative-eagle-topk > 1 ({w})", w))
    allowed, w = _page_tree_backends(target)
    if w is not None and backend not in allowed:
        rule = (f"topk {topk} with page_size > 1 is allowed only on {', '.join(allowed)} "
                f"({w})")
        if page.value is None:
            found.append((DEPENDS, f"refused at start if the page size is > 1: {rule}; "
                                   f"{page.condition}", w))
        elif page.value > 1:
            found.append((REFUSED, f"{page.why}; {rule}", w))
    # then the backend classes, built after the arguments are resolved: the multi-step
    # draft-decode backend at the worker's start, the draft-extend metadata at capture
    dec = _decode_topk_guard(info, cfg)
    if dec is not None:
        found.append(dec)
    guard = BACKEND_TOPK_GUARD.get(backend)
    if guard is not None:
        w = find_line(target, guard[0], guard[1])
        raise_at = find_line(target, guard[0], r"raise NotImplementedError", w.line) if w else None
        if raise_at is not None:
            found.append((REFUSED, f"{backend}'s draft-extend (SPEC_V2) metadata raises for "
                                   f"topk > 1 ({raise_at}): the draft-extend graph capture, or "
                                   "the first draft-extend pass, fails", raise_at))
    # a refusal whatever the rest, else the first condition that could refuse
    return next((f for f in found if f[0] == REFUSED), found[0] if found else None)


# --------------------------------------------------------------------------- runtime fallbacks


def fallbacks(target: Target, rel: str, cfg: SpecConfig) -> list[Fallback]:
    """The runner's fallbacks that can happen under `cfg`: the data-parallel vote only with
    DP attention (`require_mlp_sync()` is false without it)."""
    out = _fallbacks_of(target, rel)
    if cfg.enable_dp_attention is False:
        return [f for f in out if not f.condition.startswith("data-parallel vote")]
    w = find_line(target, "srt/utils/common.py", r"def require_mlp_sync")
    for f in out:
        if f.condition.startswith("data-parallel vote") and cfg.enable_dp_attention is None:
            f.condition += (" (only with --enable-dp-attention: require_mlp_sync()"
                            + (f", {w})" if w else ")"))
    return out


def _fallbacks_of(target: Target, rel: str) -> list[Fallback]:
    """Why `can_run_graph` of a runner declines a batch: each `return False` condition, the
    largest-captured-size comparison, the no-padding path, the data-parallel vote."""
    path = target.file(rel)
    tree = parse_file(path)
    if tree is None:
        return []
    file = target.relpath(path)
    out: list[Fallback] = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
               and n.name == "can_run_graph"):
        for node in ast.walk(fn):
            if isinstance(node, ast.If) and any(
                    isinstance(s, ast.Return) and isinstance(s.value, ast.Constant)
                    and s.value.value is False for s in node.body):
                out.append(Fallback(ast.unparse(node.test)[:160], "runner-declined", file,
                                    node.lineno))
            elif isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Attribute) and c.attr == "max_bs"
                    for c in node.comparators):
                out.append(Fallback("batch above the largest captured size "
                                    f"({ast.unparse(node)})", "batch-above-captured", file,
                                    node.lineno))
            elif isinstance(node, ast.IfExp) and "disable_padding" in ast.unparse(node.test):
                out.append(Fallback("--disable-cuda-graph-padding: only a batch of a captured "
                                    "size replays", "runner-declined", file, node.lineno))
            elif isinstance(node, ast.Attribute) and node.attr in (
                    "can_run_decode_cuda_graph", "can_run_dp_draft_cuda_graph"):
                out.append(Fallback(f"data-parallel vote: every DP rank must be able to "
                                    f"replay ({node.attr})", "runner-declined", file,
                                    node.lineno))
            elif isinstance(node, ast.Attribute) and "tbo" in node.attr:
                out.append(Fallback(f"two-batch overlap ({node.attr})", "runner-declined",
                                    file, node.lineno))
        break
    seen: set[str] = set()
    return [f for f in sorted(out, key=lambda f: f.line)
            if not (f.condition in seen or seen.add(f.condition))]


# --------------------------------------------------------------------------- the verdicts


def env_of(cfg: SpecConfig) -> dict[str, str]:
    return dict(os.environ) if cfg.environ is None else dict(cfg.environ)


def phase_verdicts(target: Target, platform: str, cfg: SpecConfig, backend: str,
                   gate: gate_mod.GateInfo | None = None,
                   config_label: str = UNDER_AUDIT) -> list[PhaseVerdict]:
    """target-verify, draft-decode and draft-extend for `backend` under `cfg`."""
    env = env_of(cfg)
    model = read_model(target, cfg.model or IMPLIED_MODEL.get(backend))
    implied = (f" [model family implied by --attention-backend {backend}: {model.arch}; "
               "--model overrides]" if not cfg.model and backend in IMPLIED_MODEL else "")
    page = resolve_page_size(target, platform, cfg, model, env, backend)
    gate = gate or gate_mod.read_gate(target, environ=env)
    bm = backends.backend_map(target, platform, mla=model.mla)
    info = bm.get(backend)

    def out(phase: str, mode: str, reason: str, where: Where | None = None,
            fallbacks: list[Fallback] | None = None) -> PhaseVerdict:
        return PhaseVerdict(phase, backend, mode, reason, where, config_label,
                            fallbacks or [])

    if info is None or not info.has_draft_factory_entry:
        w = find_line(target, gate_mod.DRAFT_UTILS_FILE, r"def create_decode_backend")
        why = (f"sglang {target.version} has no draft backend for {backend!r}: EAGLE refuses it "
               f"at start ({w or gate_mod.DRAFT_UTILS_FILE})")
        return [out(p, REFUSED, why, w) for p in PHASES]
    ref = refusal(target, backend, cfg, model, page, info)
    if ref is not None:
        return [out(p, ref[0], ref[1] + implied, ref[2]) for p in PHASES]
    if cfg.disable_cuda_graph:
        return [out(p, EAGER, "CUDA graphs disabled (--disable-cuda-graph)") for p in PHASES]
    steps = cfg.speculative_num_steps
    verdicts = []
    # target-verify: the target's decode runner captures TARGET_VERIFY when speculating
    w = find_line(target, VERIFY_RUNNER, r"capture_forward_mode = ForwardMode\.TARGET_VERIFY")
    verdicts.append(out("target-verify", GRAPH,
                        f"the target's decode graph runner captures TARGET_VERIFY ({w})"
                        if w else "the target's decode graph runner (capture line not found)",
                        w, fallbacks(target, VERIFY_RUNNER, cfg)))
    # draft-decode: a runner only with more than one step
    w = find_line(target, gate_mod.V2_FILE, r"self\.speculative_num_steps > 1")
    dd_fallbacks = fallbacks(target, DRAFT_RUNNER, cfg)
    if steps is None:
        verdicts.append(out("draft-decode", DEPENDS, "graph with --speculative-num-steps >= 2; "
                            f"no draft-decode runner with 1 ({w})", w, dd_fallbacks))
    elif steps > 1:
        verdicts.append(out("draft-decode", GRAPH, f"--speculative-num-steps {steps} > 1 builds "
                            f"the draft-decode runner ({w})", w, dd_fallbacks))
    else:
        verdicts.append(out("draft-decode", EAGER, "--speculative-num-steps 1: no draft-decode "
                            f"runner is built (no-runner) ({w})", w))
    # draft-extend: the gate
    killed = bool(gate.kill_switch_env) and gate_mod.env_bool(env.get(gate.kill_switch_env))
    v = gate_mod.verdict(gate, info, platform, steps, killed, cfg.disable_cuda_graph,
                         release=target.version)
    gw = Where(gate.file, gate.line) if gate.file and gate.line else None
    mode = {gate_mod.GRAPH: GRAPH, gate_mod.EAGER: EAGER,
            gate_mod.UNSUPPORTED: REFUSED}.get(v.mode, DEPENDS)
    reason = v.reason
    if mode == GRAPH and steps is None and "needs --speculative-num-steps" in reason:
        mode = DEPENDS
    if mode == GRAPH and model.mla is None and _mla_split(info):
        mode, reason = DEPENDS, (f"{reason}; the class depends on the model "
                                 f"(MLA or MHA: pass --model)")
    verdicts.append(out("draft-extend", mode, reason, gw,
                        fallbacks(target, EXTEND_RUNNER, cfg) if mode == GRAPH else None))
    return verdicts


def _mla_split(info: backends.BackendInfo) -> bool:
    return any("MLA" in c for c in info.draft_extend_classes) and any(
        "MLA" not in c for c in info.draft_extend_classes)


def table_backends(target: Target, platform: str) -> list[str]:
    """The backends a per-phase table lists when no backend is under audit."""
    bm = backends.backend_map(target, platform)
    if platform == "hip":
        return [n for n in HIP_BACKENDS if n in bm]
    return [n for n, b in bm.items() if b.has_draft_factory_entry]
