"""Start-time refusals a model family's own argument code raises, before the speculative options
are resolved: DeepSeek-V4's algorithm assert, DSA with decode context parallelism (DCP), the
MiniMax-M3.1 NVFP4 checkpoint, IQuest-Q1.

Why apart from refusals.py: these rules live in the model's hook or override module
(`arg_groups/deepseek_v4_hook.py`, `arg_groups/model_overrides/*.py`), run by the model hook
before `handle_speculative_decoding` upper-cases the algorithm and renames NEXTN to EAGLE (0.5.23
arg_groups/pipeline.py:225 before :306; 0.5.12 server_args.py:929 before :976). Each is found by
the text of its own message (a release without it is untouched) and read by shape (the names it
allows, the architectures it is registered for), and cited at its `raise` or `assert` line.

An input a rule needs that is not given gives `depends`. Where that input is a parallelism
option whose SGLang default passes (`--dcp-size` 1, no DP attention), the condition is kept
apart (`ModelRules.if_set`): it is named, but a condition that can hold at the defaults is cited
first.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from diag.context import SpecConfig
from diag.probes.source import parse_file, walk_all
from diag.probes.startup.frozen_kv_mtp import SPEC_HOOK_FILE, alias_file, gemma4_draft
from diag.probes.startup.model_backends import model_backend_assert
from diag.probes.startup.resolve import (
    DSV2_OVERRIDES,
    DSV4_HOOK,
    MINIMAX_M3_OVERRIDES,
    Model,
    Where,
    find_line,
)
from diag.target import Target

# the verdict modes a refusal takes (refusals.py and phases.py re-export them)
REFUSED, DEPENDS = "refused", "depends"
Refusal = tuple[str, str, "Where | None"]

IQUEST_OVERRIDES = "srt/arg_groups/model_overrides/iquest_q1.py"
PARALLEL_HOOK = "srt/arg_groups/parallel_hook.py"
MINICPM_OVERRIDES = "srt/arg_groups/model_overrides/minicpm.py"
KIMI_K3_FILES = ("srt/arg_groups/model_overrides/kimi_k3.py", "srt/arg_groups/overrides.py")


@dataclass
class ModelRules:
    """What the model's own argument code refuses, in the order it runs: `found` (refused, or
    `depends` on an input whose default may refuse), `if_set` (`depends` only on a parallelism
    option not given whose SGLang default passes)."""

    found: list[Refusal] = field(default_factory=list)
    if_set: list[Refusal] = field(default_factory=list)


# --------------------------------------------------------------------------- reading the rules


def _stmt_with(target: Target, rel: str, kind: type, text: str
               ) -> tuple[ast.stmt, ast.Module, Where] | None:
    """The first `raise` (kind ast.Raise) or `assert` (ast.Assert) of `rel` whose message holds
    `text` (implicitly joined strings read as one), with the module and its line."""
    tree = parse_file(target.file(rel))
    for node in walk_all(tree) if tree is not None else ():
        msg = node.exc if isinstance(node, ast.Raise) else getattr(node, "msg", None)
        if isinstance(node, kind) and msg is not None and text in ast.unparse(msg):
            return node, tree, Where(target.relpath(target.file(rel)), node.lineno)
    return None


def _guard_of(tree: ast.Module, stmt: ast.stmt) -> ast.If | None:
    """The `if` whose body holds `stmt` directly."""
    for node in walk_all(tree):
        if isinstance(node, ast.If) and stmt in node.body:
            return node
    return None


def _function_of(tree: ast.Module, line: int) -> ast.FunctionDef | None:
    """The top-level function holding `line`."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.lineno <= line <= (node.end_lineno or 0):
            return node
    return None


def _registered_for(tree: ast.Module, fn: ast.FunctionDef | None) -> tuple[str, ...]:
    """The architectures of `fn`'s `@_register_for(...)` (model_override_base.py), or of the
    registered function that calls `fn` (deepseek_v2.py's `_dsa_dcp_overrides`)."""
    if fn is None:
        return ()
    for dec in fn.decorator_list:
        if isinstance(dec, ast.Call) and ast.unparse(dec.func) == "_register_for":
            return tuple(a.value for a in dec.args if isinstance(a, ast.Constant))
    for caller in tree.body:
        if isinstance(caller, ast.FunctionDef) and caller is not fn and any(
                isinstance(c, ast.Call) and ast.unparse(c.func) == fn.name
                for c in walk_all(caller)):
            return _registered_for(tree, caller)
    return ()


def _names(test: ast.expr, attr: str) -> tuple[str | None, ...]:
    """The constants `<x>.attr` is compared with: `== "EAGLE"`, `in ("EAGLE", "DSPARK")`,
    `not in (None, "DSPARK", "DFLASH")`, `.upper() not in ("EAGLE", "NEXTN")`."""
    for cmp in walk_all(test):
        if isinstance(cmp, ast.Compare) and attr in ast.unparse(cmp.left):
            right = cmp.comparators[0]
            elts = right.elts if isinstance(right, (ast.Tuple, ast.List)) else [right]
            return tuple(e.value for e in elts if isinstance(e, ast.Constant))
    return ()


# --------------------------------------------------------------------------- DeepSeek-V4


def dsv4_algorithm(target: Target, cfg: SpecConfig, model: Model) -> Refusal | None:
    """DeepSeek-V4's hook asserts the algorithm as typed, before it is upper-cased and NEXTN
    renamed: `== "EAGLE"` (0.5.12 - 0.5.15; 0.5.12 arg_groups/deepseek_v4_hook.py:37, 0.5.15
    :56), `in ("EAGLE", "DSPARK")` from 0.5.16 (0.5.19 :148, 0.5.23 :149), under `if
    speculative_algorithm is not None` (no speculation: not asserted). So NEXTN, EAGLE3 and
    `eagle` are refused; no --speculative-algorithm is diag's EAGLE, allowed."""
    if not model.dsv4 or cfg.speculative_algorithm is None:
        return None
    hit = _stmt_with(target, DSV4_HOOK, ast.Assert, "speculative algorithm is supported") or \
        _stmt_with(target, DSV4_HOOK, ast.Assert, "speculative algorithms are supported")
    if hit is None:
        return None
    stmt, _, w = hit
    allowed = _names(stmt.test, "speculative_algorithm")  # type: ignore[attr-defined]
    algo = cfg.speculative_algorithm
    if not allowed or algo in allowed:
        return None
    names = " or ".join(map(str, allowed))
    return REFUSED, (f"{model.arch} asserts --speculative-algorithm {names} ({w}), compared "
                     f"as typed before NEXTN becomes EAGLE: {algo} is refused"), w


def dsv41_dspark_only(target: Target, cfg: SpecConfig, model: Model) -> Refusal | None:
    """DeepSeek-V4.1 (a DeepseekV4ForCausalLM checkpoint whose config.json says `model_type:
    deepseek_v41`) takes no speculative algorithm but DSPARK: `validate_deepseek_v41_features`,
    called for DeepseekV4ForCausalLM (0.5.23 arg_groups/model_hook.py:470-479), lists
    ("speculative decoding other than DSpark", `speculative_algorithm is not None and
    str(...).upper() != "DSPARK"`) and raises for it (0.5.21 arg_groups/deepseek_v4_hook.py:216;
    0.5.23 :334-337, the raise at :350). EAGLE, NEXTN and EAGLE3 are refused; no
    --speculative-algorithm given is `depends`."""
    if model.arch != "DeepseekV4ForCausalLM" or \
            (model.params or {}).get("model_type") != "deepseek_v41":
        return None
    hit = _stmt_with(target, DSV4_HOOK, ast.Raise, "DeepSeek-V4.1 does not support")
    item = find_line(target, DSV4_HOOK, r'"speculative decoding other than DSpark"')
    if hit is None or item is None:
        return None
    w = hit[2]
    rule = f"DeepSeek-V4.1 supports no speculative decoding but DSPARK ({item}, raised at {w})"
    algo = cfg.speculative_algorithm
    if algo is None:
        return DEPENDS, f"refused at start unless --speculative-algorithm DSPARK: {rule}", w
    if str(algo).upper() == "DSPARK":
        return None
    return REFUSED, f"--speculative-algorithm {algo}: {rule}", w


# --------------------------------------------------------------------------- DSA with DCP


def dsa_dcp_topk(target: Target, cfg: SpecConfig, model: Model) -> tuple[Refusal | None, bool]:
    """`_dsa_dcp_overrides` (0.5.22 / 0.5.23 arg_groups/model_overrides/deepseek_v2.py:18-35),
    called under `if is_deepseek_dsa(hf_config)` (0.5.23 :99-100) of the DeepSeek family's
    override, returns early for `dcp_size <= 1` (:19) and raises for `speculative_eagle_topk
    not in (None, 1)` (:25-26) on every platform. Returns (refusal, True when it is `depends`
    only on --dcp not given)."""
    topk = cfg.speculative_eagle_topk
    if not model.dsa or topk is None or topk == 1 or cfg.dcp_size == 1:
        return None, False
    hit = _stmt_with(target, DSV2_OVERRIDES, ast.Raise, "DSA DCP requires --speculative-eagle-topk 1")
    if hit is None:
        return None, False
    _, tree, w = hit
    if model.arch not in _registered_for(tree, _function_of(tree, w.line)):
        return None, False
    rule = f"DSA with DCP requires --speculative-eagle-topk 1 ({w}); topk {topk} given"
    if cfg.dcp_size is None:
        return (DEPENDS, f"refused at start if --dcp-size > 1 (not given; SGLang's default 1 "
                         f"passes): {rule}", w), True
    return (REFUSED, f"--dcp-size {cfg.dcp_size}: {rule}", w), False


# --------------------------------------------------------------------------- MiniMax-M3.1 NVFP4


def _minimax_nvfp4(params: dict) -> bool:
    """`_resolve_quant_method` (0.5.23 arg_groups/model_overrides/minimax_m3.py:18-34): the
    checkpoint's `quantization_config.quant_method` (utils/common.py:3849-3854), and for
    `mxfp8` "minimax_m3_nvfp4" when `moe_quant_algo` upper-cases to NVFP4 and
    `moe_quant_format` is "nvfp4-pack-quantized"; :56 compares it with "minimax_m3_nvfp4"."""
    qc = params.get("quantization_config")
    if not isinstance(qc, dict):
        return False
    method = qc.get("quant_method")
    if method != "mxfp8":
        return method == "minimax_m3_nvfp4"
    return str(qc.get("moe_quant_algo", "")).upper() == "NVFP4" \
        and qc.get("moe_quant_format") == "nvfp4-pack-quantized"


def minimax_nvfp4(target: Target, cfg: SpecConfig, model: Model) -> Refusal | None:
    """MiniMax-M3.1 NVFP4 checkpoints allow only DSPARK/DFLASH (0.5.23
    arg_groups/model_overrides/minimax_m3.py:56-58, `not in (None, "DSPARK", "DFLASH")`, as
    typed). NVFP4 is read from the --model folder's config.json; `depends` for a name (no config)
    or without --speculative-algorithm (diag's EAGLE is refused). An explicit --quantization on
    the server wins over the checkpoint (:47-53); diag does not take it."""
    hit = _stmt_with(target, MINIMAX_M3_OVERRIDES, ast.Raise, "NVFP4 only supports")
    if hit is None:
        return None
    stmt, tree, w = hit
    if model.arch not in _registered_for(tree, _function_of(tree, w.line)):
        return None
    guard = _guard_of(tree, stmt)
    allowed = [n for n in _names(guard.test, "speculative_algorithm") if n] if guard else []
    algo = cfg.speculative_algorithm
    if not allowed or algo in allowed:
        return None
    decide = find_line(target, MINIMAX_M3_OVERRIDES, r"def _resolve_quant_method")
    nvfp4 = ("an M3.1 NVFP4 checkpoint (config.json quantization_config: quant_method "
             "minimax_m3_nvfp4, or mxfp8 with moe_quant_algo NVFP4 and moe_quant_format "
             f"nvfp4-pack-quantized, {decide or MINIMAX_M3_OVERRIDES})")
    rule = f"{nvfp4} only supports {' or '.join(allowed)} speculation ({w})"
    given = bool(model.params) and not model.source.startswith("family")
    if given and not _minimax_nvfp4(model.params):
        return None
    if not given:
        return DEPENDS, (f"refused at start if {model.arch} is {nvfp4}, unless "
                         f"--speculative-algorithm is {' or '.join(allowed)}: {rule}; pass "
                         "--model with the checkpoint's folder"), w
    if algo is None:
        return DEPENDS, (f"refused at start unless --speculative-algorithm is "
                         f"{' or '.join(allowed)} (EAGLE, NEXTN, EAGLE3 are refused): {rule}"), w
    return REFUSED, f"--speculative-algorithm {algo}: {rule}", w


# --------------------------------------------------------------------------- IQuest-Q1


def iquest_q1(target: Target, backend: str, cfg: SpecConfig, model: Model) -> ModelRules:
    """IQuest-Q1's override (0.5.21 - 0.5.23 arg_groups/model_overrides/iquest_q1.py; 0.5.23
    lines, 0.5.21 one less): fa3 for the attention backend on every platform (:19-23), EAGLE or
    NEXTN upper-cased (:24-26) and fa3 for the draft (:27-28) when an algorithm is given, no
    context parallelism (:29-30: --attn-cp-size, --dcp-size, --enable-prefill-cp; diag takes
    --dcp), topk 1 (:31-34), no DP attention (:37-38)."""
    out = ModelRules()
    tree = parse_file(target.file(IQUEST_OVERRIDES))
    first = _stmt_with(target, IQUEST_OVERRIDES, ast.Raise, "requires FA3 attention for both")
    if tree is None or first is None or model.arch not in _registered_for(
            tree, _function_of(tree, first[2].line)):
        return out
    name = model.arch

    def rule(text: str) -> tuple[ast.If | None, Where] | None:
        hit = _stmt_with(target, IQUEST_OVERRIDES, ast.Raise, text)
        return (_guard_of(tree, hit[0]), hit[2]) if hit else None

    if backend != "fa3":
        w = first[2]
        out.found.append((REFUSED, f"{name} requires fa3 attention for prefill and decode "
                                   f"({w}): --attention-backend {backend} is refused", w))
    algo = cfg.speculative_algorithm
    r = rule("requires serial EAGLE or NEXTN")
    if r and algo is not None and algo.upper() not in _names(r[0].test, "speculative_algorithm"):
        out.found.append((REFUSED, f"{name} MTP requires EAGLE or NEXTN ({r[1]}): "
                                   f"--speculative-algorithm {algo} is refused", r[1]))
    r = rule("requires FA3 attention for the MTP draft")
    draft = cfg.draft_attention_backend
    if r and draft not in (None, "fa3"):
        out.found.append((REFUSED, f"{name} requires fa3 for the MTP draft ({r[1]}): "
                                   f"--speculative-draft-attention-backend {draft} is refused",
                          r[1]))
    r = rule("does not support context parallelism")
    if r and cfg.dcp_size != 1:
        why = f"{name} does not support context parallelism ({r[1]})"
        if cfg.dcp_size is None:
            out.if_set.append((DEPENDS, f"refused at start if --dcp-size > 1 (not given; "
                                        f"SGLang's default 1 passes), or with --attn-cp-size "
                                        f"> 1 or --enable-prefill-cp: {why}", r[1]))
        else:
            out.found.append((REFUSED, f"--dcp-size {cfg.dcp_size}: {why}", r[1]))
    r = rule("requires --speculative-eagle-topk 1")
    topk = cfg.speculative_eagle_topk
    if r and topk is not None and topk > 1:
        out.found.append((REFUSED, f"{name} requires --speculative-eagle-topk 1 ({r[1]}): "
                                   f"topk {topk} is refused", r[1]))
    r = rule("does not support DP attention")
    dp = _iquest_dp(target, cfg, name, r) if r else None
    if dp is not None:
        (out.if_set if dp[0] == DEPENDS else out.found).append(dp)
    return out


def _iquest_dp(target: Target, cfg: SpecConfig, name: str, r: tuple[ast.If | None, Where]
               ) -> Refusal | None:
    """0.5.21 `if cfg.enable_dp_attention:` (:36-37). 0.5.22+: `if attn_dp_enabled_of(cfg):`
    (0.5.23 :37-38), `attn_dp_size > 1` (runtime_context.py:199): the deprecated
    `--enable-dp-attention` became `attn_dp_size = dp_size` before the model overrides run
    (parallel_hook.py:50-58), so with --dp-size 1 it passes; a server's resolved
    `enable_dp_attention` is `attn_dp_size > 1` (server_args.py:332)."""
    guard, w = r
    why = f"{name} does not support DP attention ({w})"
    dpa = cfg.enable_dp_attention
    if dpa is False:
        return None
    width = guard is not None and "attn_dp_enabled_of" in ast.unparse(guard.test)
    if dpa is None:
        return DEPENDS, ("refused at start with DP attention (--enable-dp-attention"
                         + (" with --dp-size > 1, or --attn-dp-size > 1" if width else "")
                         + f"; not given, off by default): {why}"), w
    if not width or cfg.source != "options" or (cfg.dp_size is not None and cfg.dp_size > 1):
        return REFUSED, f"--enable-dp-attention: {why}", w
    move = find_line(target, PARALLEL_HOOK, r"attn_dp_size=cfg\.dp_size")
    flag = (f"--enable-dp-attention becomes --attn-dp-size = --dp-size"
            f" ({move or PARALLEL_HOOK})")
    if cfg.dp_size is None:
        return DEPENDS, (f"refused at start if --dp-size > 1 (not given; 1 passes): {flag}; "
                         f"{why}"), w
    return None  # --dp-size 1: attention-DP width 1


# --------------------------------------------------------------------------- all of them


# --------------------------------------------------------------------------- Gemma4 drafts


def gemma4_draft_eagle3(target: Target, cfg: SpecConfig) -> Refusal | None:
    """A Gemma4 assistant draft model refuses EAGLE3: `_resolve_speculative_algorithm_alias`
    reads the draft's config.json architectures, `is_gemma4_draft = any(arch in
    ("Gemma4AssistantForCausalLM", ...))`, and `if speculative_algorithm == "EAGLE3" and
    is_gemma4_draft: raise ValueError(...)` (0.5.12 server_args.py:337-342, 0.5.13
    arg_groups/speculative_hook.py:34-39, 0.5.19
    :62-67, 0.5.23 :96-107; the Unified assistant counts too, 0.5.19 :57-60). EAGLE and NEXTN
    become FROZEN_KV_MTP there (probes.startup.frozen_kv_mtp)."""
    if (cfg.speculative_algorithm or "") != "EAGLE3" or not cfg.draft_model:
        return None
    hit = _stmt_with(target, alias_file(target) or SPEC_HOOK_FILE, ast.Raise, "draft requires")
    g = gemma4_draft(target, cfg) if hit is not None else None
    if hit is None or g is None:
        return None
    w = hit[2]
    return REFUSED, (f"the draft model is {g[0]}: EAGLE3 is refused for it ({w}); NEXTN or "
                     "EAGLE run it as FROZEN_KV_MTP"), w


# --------------------------------------------------------------------------- MiniCPM


def minicpm_dp(target: Target, cfg: SpecConfig, model: Model) -> Refusal | None:
    """MiniCPM's override refuses DP attention: `if cfg.enable_dp_attention: raise
    ValueError("MiniCPM does not support DP attention")` (0.5.19
    arg_groups/model_overrides/minicpm.py:20-21), `if attn_dp_enabled_of(cfg):` from 0.5.22
    (0.5.23 :17-18), for `@_register_for("MiniCPMForCausalLM", "MiniCPMSALAForCausalLM")`
    (0.5.23 :13); read as IQuest-Q1's DP rule (`_iquest_dp`)."""
    hit = _stmt_with(target, MINICPM_OVERRIDES, ast.Raise, "MiniCPM does not support DP attention")
    if hit is None or model.arch is None:
        return None
    stmt, tree, w = hit
    if model.arch not in _registered_for(tree, _function_of(tree, w.line)):
        return None
    return _iquest_dp(target, cfg, model.arch, (_guard_of(tree, stmt), w))


# --------------------------------------------------------------------------- Kimi-K3 with DCP


def kimi_k3_dcp(target: Target, backend: str, cfg: SpecConfig, model: Model
                ) -> tuple[Refusal | None, bool]:
    """Kimi-K3's override under `if cfg.dcp_size > 1:` takes only some decode backends: an
    `if`/`elif decode_backend == "X"` chain, else `raise AssertionError("Decode attention
    backend for Kimi-K3 DCP must be ...")` (0.5.17 arg_groups/overrides.py:399-426, cutedsl_mla
    or tokenspeed_mla; 0.5.20 model_overrides/kimi_k3.py:88-129 adds aiter; 0.5.23 :85-111,
    cutedsl_mla or aiter). A branch that calls a `_require_*` check needs what the server has
    installed (0.5.23 :20-38 FlashInfer >= 0.6.17 with `enable_dcp` for cutedsl_mla, :41-48 the
    aiter gluon MLA kernel): `depends`. The decode backend is --attention-backend's here (diag
    takes no separate decode backend). Returns (refusal, True when `depends` only on --dcp not
    given)."""
    if model.arch != "KimiK3ForConditionalGeneration" or cfg.dcp_size == 1:
        return None, False
    hit = next((h for rel in KIMI_K3_FILES if (h := _stmt_with(
        target, rel, ast.Raise, "Decode attention backend for Kimi-K3 DCP must be"))), None)
    if hit is None:
        return None, False
    stmt, tree, w = hit
    fn = _function_of(tree, w.line)
    branches: dict[str, list[str]] = {}  # backend -> the _require_* checks its branch runs
    for node in walk_all(fn) if fn is not None else ():
        if isinstance(node, ast.If) and "decode_backend" in ast.unparse(node.test):
            for name in _names(node.test, "decode_backend"):
                if isinstance(name, str):
                    branches.setdefault(name, [
                        ast.unparse(c.func) for st in node.body for c in walk_all(st)
                        if isinstance(c, ast.Call) and ast.unparse(c.func).startswith("_require")])
    if not branches:
        return None, False
    dcp = f"--dcp-size {cfg.dcp_size}" if cfg.dcp_size else "--dcp-size > 1"
    if backend not in branches:
        rule = (f"Kimi-K3 with DCP takes the decode backends {', '.join(branches)} only ({w}); "
                f"{backend} is refused")
    elif branches[backend]:
        checks = ", ".join(branches[backend])
        rule = (f"Kimi-K3 with DCP and {backend} needs what the server has installed "
                f"({checks}, {w.file}): refused at start without it")
        return (DEPENDS, f"with {dcp}: {rule}", w), cfg.dcp_size is None
    else:
        return None, False
    if cfg.dcp_size is None:
        return (DEPENDS, f"refused at start if --dcp-size > 1 (not given; SGLang's default 1 "
                         f"passes): {rule}", w), True
    return (REFUSED, f"{dcp}: {rule}", w), False


def model_refusals(target: Target, backend: str, cfg: SpecConfig, model: Model) -> ModelRules:
    """The model's own start-time rules for `backend` under `cfg` (only one family matches)."""
    out = ModelRules()
    g4 = gemma4_draft_eagle3(target, cfg)  # the algorithm's alias, read before the model's rules
    if g4 is not None:
        out.found.append(g4)
    if model.arch is None:
        return out
    dsv4 = dsv4_algorithm(target, cfg, model)
    if dsv4 is not None:
        out.found.append(dsv4)
    mb = model_backend_assert(target, backend, model)  # the model hook's per-arch asserts
    if mb is not None:
        out.found.append(mb)
    v41 = dsv41_dspark_only(target, cfg, model)
    if v41 is not None:
        out.found.append(v41)
    dcp, quiet = dsa_dcp_topk(target, cfg, model)
    if dcp is not None:
        (out.if_set if quiet else out.found).append(dcp)
    mm = minimax_nvfp4(target, cfg, model)
    if mm is not None:
        out.found.append(mm)
    mc = minicpm_dp(target, cfg, model)
    if mc is not None:
        (out.if_set if mc[0] == DEPENDS else out.found).append(mc)
    kk, quiet = kimi_k3_dcp(target, backend, cfg, model)
    if kk is not None:
        (out.if_set if quiet else out.found).append(kk)
    iq = iquest_q1(target, backend, cfg, model)
    out.found += iq.found
    out.if_set += iq.if_set
    return out
