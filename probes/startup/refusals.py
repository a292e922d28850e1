"""Start-time refusals: configurations SGLang's argument handling or a backend's constructor (or
its first graph capture) rejects, so no phase runs at all.

Why apart: the rules sit in different places per release (`srt/server_args.py` up to 0.5.12.post1,
`srt/arg_groups/*.py` after) and in backend classes; each is found by its text or shape and cited
at its `file:line`. A rule whose inputs are not all given gives `depends` with the condition in
words; a refusal that holds whatever the rest wins over a conditional one.
"""

from __future__ import annotations

import ast

from diag.context import SpecConfig
from diag.probes import backends
from diag.probes.source import parse_file, walk_all
from diag.probes.startup.model_rules import (
    DEPENDS,
    REFUSED,
    Refusal,
    model_refusals,
)
from diag.probes.startup.resolve import (
    DSV4_HOOK,
    SERVER_ARGS,
    Model,
    PageSize,
    Where,
    auto_params,
    find_line,
)
from diag.target import Target

GRAPH, EAGER = "graph", "eager"  # REFUSED, DEPENDS: model_rules.py
NO_PASS = "none"  # the worker runs no such pass (FROZEN_KV_MTP's draft-extend)
SPEC_HOOK = "srt/arg_groups/speculative_hook.py"
DRAFT_UTILS = "srt/speculative/draft_utils.py"
QSA_BACKEND = "srt/layers/attention/qwen_sparse_attn_backend.py"
QSA_CONFIG = "srt/layers/attention/qsa/config.py"


def _page_tree_backends(target: Target) -> tuple[list[str], Where | None]:
    """The backends that may run topk > 1 with page_size > 1, and the `raise` refusing others:
    `_PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa3", "triton")` in arg_groups/speculative_hook.py
    (0.5.13 - 0.5.23; 0.5.23:1271-1282), and before it server_args.py's EAGLE branch
    `self.attention_backend not in ["flashinfer", "fa3"]` (0.5.9 server_args.py:2452-2459,
    0.5.12 :3837-3844; the NGRAM branch after it has `!= "flashinfer"`, not for EAGLE)."""
    w = find_line(target, SPEC_HOOK, r"_PAGE_TREE_SPEC_BACKENDS = \(")
    if w is not None:
        tree = parse_file(target.file(SPEC_HOOK))
        for node in walk_all(tree) if tree is not None else ():
            if isinstance(node, ast.Assign) and node.lineno == w.line \
                    and isinstance(node.value, ast.Tuple):
                names = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
                raise_at = find_line(target, SPEC_HOOK, r"raise ValueError", w.line)
                return names, raise_at or w
        return [], None
    tree = parse_file(target.file(SERVER_ARGS))
    rel = target.relpath(target.file(SERVER_ARGS))
    for node in walk_all(tree) if tree is not None else ():
        if not isinstance(node, ast.If):
            continue
        text = ast.unparse(node.test)
        if "speculative_eagle_topk > 1" not in text or "page_size > 1" not in text:
            continue
        raise_at = next((st.lineno for st in node.body if isinstance(st, ast.Raise)), None)
        for cmp in walk_all(node.test):
            if isinstance(cmp, ast.Compare) and isinstance(cmp.ops[0], ast.NotIn) \
                    and "attention_backend" in ast.unparse(cmp.left) \
                    and isinstance(cmp.comparators[0], (ast.List, ast.Tuple)) and raise_at:
                names = [e.value for e in cmp.comparators[0].elts
                         if isinstance(e, ast.Constant)]
                return names, Where(rel, raise_at)
    return [], None


# Backend classes that raise on topk > 1 when the draft-extend (SPEC_V2) metadata is built:
# (file, the guard method found by name, the draft factory method building that backend).
BACKEND_TOPK_GUARD = {
    "aiter": ("srt/layers/attention/aiter_backend.py", r"def _ensure_spec_v2_topk_supported",
              "_create_aiter_prefill_backend", "AiterAttnBackend"),
}


def _topk_guard(fn: ast.FunctionDef) -> int | None:
    """The line of a `raise` under `if topk > 1` / `if topk != 1` (or `self.topk`) in `fn`."""
    for node in walk_all(fn):
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


def _decode_topk_guard(info: backends.BackendInfo | None, cfg: SpecConfig) -> Refusal | None:
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


def extend_topk_guard(target: Target, backend: str) -> tuple[Where, Where | None, Where | None
                                                               ] | None:
    """A backend's SPEC_V2 draft-extend topk guard, and whether it can fire: it tests the
    instance's `self.topk`, and the draft factory builds the draft-extend backend without a
    `topk` (0.5.23 speculative/draft_utils.py:480 `AiterAttnBackend(self.draft_model_runner,
    skip_prefill=False)`; 0.5.19 :439), so `topk: int = 1` (0.5.23 aiter_backend.py:356, 0.5.19
    :224) holds and the guard (0.5.23 aiter_backend.py:1396-1401, 0.5.19 :927-932) never fires on
    the draft-extend path. Returns (the raise, the factory call when it passes no topk, the
    constructor default 1) or None without a guard; the 2nd/3rd None: the guard can fire."""
    guard = BACKEND_TOPK_GUARD.get(backend)
    if guard is None:
        return None
    file, pattern, factory, cls = guard
    w = find_line(target, file, pattern)
    raise_at = find_line(target, file, r"raise NotImplementedError", w.line) if w else None
    if raise_at is None:
        return None
    call_at = default_at = None
    tree = parse_file(target.file(DRAFT_UTILS))
    for fn in (n for n in walk_all(tree) if isinstance(n, ast.FunctionDef)
               and n.name == factory) if tree is not None else ():
        calls = [c for c in walk_all(fn) if isinstance(c, ast.Call)
                 and isinstance(c.func, ast.Name) and c.func.id == cls]
        if calls and all(len(c.args) < 4 and not any(k.arg == "topk" for k in c.keywords)
                         for c in calls):
            call_at = Where(target.relpath(target.file(DRAFT_UTILS)), calls[0].lineno)
    btree = parse_file(target.file(file))
    for node in walk_all(btree) if btree is not None else ():
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                    a = fn.args
                    names = [x.arg for x in a.args]
                    defaults = dict(zip(names[len(names) - len(a.defaults):], a.defaults))
                    d = defaults.get("topk")
                    if isinstance(d, ast.Constant) and d.value == 1:
                        default_at = Where(target.relpath(target.file(file)), d.lineno)
    return raise_at, call_at, default_at


def _qsa_ratio(target: Target, model: Model) -> int | None:
    """The backend's compress ratio for a model read from its config.json, as the backend takes
    it from `hf_text_config` (0.5.23 qwen_sparse_attn_backend.py:233-242; 0.5.20 :182-190): a
    QSA profile's `indexer_compress_ratio` (required with `indexer_n_heads`, qsa/config.py:86),
    else the config's `indexer_compress_ratio`, else 4. None for a family name (no config)."""
    params = model.params or {}
    if model.arch is None or model.source.startswith("family") or not params:
        return params.get("indexer_compress_ratio") if params else None
    text = params.get("text_config") if isinstance(params.get("text_config"), dict) else params
    ratio = text.get("indexer_compress_ratio")
    if isinstance(ratio, int) and not isinstance(ratio, bool):
        return ratio
    if text.get("indexer_n_heads") is not None:
        return None  # a profile without its ratio: SGLang refuses the config itself
    default = find_line(target, QSA_BACKEND, r'getattr\(config, "indexer_compress_ratio", 4\)')
    return 4 if default is not None else None


def _qsa(target: Target, cfg: SpecConfig, model: Model) -> Refusal | None:
    """QwenSparseAttnBackend._require_chain_speculation (0.5.20 - 0.5.23; 0.5.23
    qwen_sparse_attn_backend.py:284-299, 0.5.20 :228-243), run for TARGET_VERIFY metadata (the
    target-verify graph is captured at start): NotImplementedError for topk != 1, and for
    `draft_token_num > self.compress_ratio`, the model's `indexer_compress_ratio` (>= 2,
    qsa/config.py:55; 4 without a QSA profile, :238-242). With topk 1 the draft tokens are
    steps + 1 (arg_groups/speculative_hook.py `speculative_num_draft_tokens is adjusted`)."""
    topk_at = find_line(target, QSA_BACKEND, r"Qwen QSA target verification supports only")
    ratio_if = find_line(target, QSA_BACKEND, r"if draft_tokens > self\.compress_ratio")
    if topk_at is None and ratio_if is None:
        return None
    topk = cfg.speculative_eagle_topk
    if topk is not None and topk != 1 and topk_at is not None:
        w = Where(topk_at.file, topk_at.line - 1)
        return REFUSED, (f"qsa's target verify raises NotImplementedError for topk {topk} "
                         f"(only --speculative-eagle-topk 1, {w}): the target-verify graph "
                         "capture at start fails"), w
    if ratio_if is None:
        return None
    w = find_line(target, QSA_BACKEND, r"raise NotImplementedError", ratio_if.line) or ratio_if
    steps = cfg.speculative_num_steps
    tokens = steps + 1 if steps is not None and topk in (1, None) else \
        cfg.speculative_num_draft_tokens
    rw = find_line(target, QSA_CONFIG, r"if ratio < 2")
    ratio = _qsa_ratio(target, model)
    rule = (f"qsa's target verify raises NotImplementedError when the draft tokens exceed the "
            f"model's indexer_compress_ratio ({w})")
    if tokens is None:
        return DEPENDS, (f"refused at start if the draft tokens (steps + 1 with topk 1) exceed "
                         f"the model's indexer_compress_ratio: {rule}"), w
    if ratio is not None:
        if tokens > int(ratio):
            return REFUSED, f"{tokens} draft tokens > indexer_compress_ratio {ratio}: {rule}", w
        return None
    if rw is not None and tokens <= 2:
        return None  # every QSA model has a ratio >= 2 (qsa/config.py)
    return DEPENDS, (f"refused at start if the model's indexer_compress_ratio is below "
                     f"{tokens} draft tokens (pass --model): {rule}"
                     + (f"; the ratio is >= 2 ({rw})" if rw else "")), w


def only_starting_topk(target: Target, cfg: SpecConfig, model: Model) -> tuple[str, Where] | None:
    """DeepSeek-V4 with EAGLE and no --speculative-eagle-topk: the model's hook asserts
    `speculative_eagle_topk == 1` on the value as given, before SGLang picks its own, so None
    fails it (0.5.12 deepseek_v4_hook.py:40-42 from server_args.py:929, before :976; 0.5.23
    :156-157 from model_hook.py at pipeline.py:225, before :306; found running 0.5.19's and
    0.5.23's own argument handling, tests/test_startup_against_sglang.py). Only topk 1 starts:
    the phases of a server that runs are those of topk 1. (note, where) then, else None."""
    if cfg.speculative_eagle_topk is not None or not model.dsv4 or \
            (cfg.speculative_algorithm or "EAGLE").upper() not in ("EAGLE", "NEXTN"):
        return None
    w = find_line(target, DSV4_HOOK, r"topk == 1 is supported")
    if w is None:
        return None
    return (f"--speculative-eagle-topk not given: read for topk 1, the only one that starts; "
            f"{model.arch}'s hook asserts topk == 1 on the value given, so a server started "
            f"without it is refused at start ({w})", w)


def refusal(target: Target, backend: str, cfg: SpecConfig, model: Model,
            page: PageSize, info: backends.BackendInfo | None = None,
            notes: list[str] | None = None) -> Refusal | None:
    """(mode, reason, where) when the start is refused (or refused only under a condition:
    mode `depends`), else None. The model's own rules (model_rules.py) run first: the model
    hook comes before the speculative options are resolved and any backend is built. A rule
    that refuses only with a parallelism option set that was not given (its SGLang default
    passes) does not refuse: a server that runs has the default, so the verdicts are the
    default's; the rule goes to `notes` for the reasons."""
    rules = model_refusals(target, backend, cfg, model)
    found: list[Refusal] = list(rules.found)  # in the order the start meets them
    if backend == "qsa":
        q = _qsa(target, cfg, model)
        if q is not None:
            found.append(q)
    topk = cfg.speculative_eagle_topk
    auto = auto_params(target, model.arch, cfg.speculative_algorithm) if topk is None and \
        model.arch and cfg.speculative_num_steps is None and \
        cfg.speculative_num_draft_tokens is None else None
    if topk is None and auto is not None and auto[0][1] > 1:
        # none of steps, topk, draft tokens given: a server that gave none runs SGLang's own
        # choice (0.5.23 speculative_hook.py:1159-1171), topk 4 for LlamaForCausalLM and Grok
        # (:1439-1440, :1458-1459), and a rule refusing topk > 1 is then a condition; with
        # steps given and topk not, the server's topk is unknown and no topk rule is judged
        said = (f"SGLang's own choice for {model.arch} without --speculative-num-steps is "
                f"topk {auto[0][1]} ({auto[1]})")
        found += [(DEPENDS, f"refused at start if the server gave no --speculative-num-steps "
                            f"({said}) or --speculative-eagle-topk > 1: {why}", w)
                  for _, why, w in _topk_refusals(target, backend, cfg, model, page, info,
                                                  auto[0][1])]
    elif topk is not None and topk > 1:
        found += _topk_refusals(target, backend, cfg, model, page, info, topk)
    return _pick(found, rules.if_set, notes)


def _topk_refusals(target: Target, backend: str, cfg: SpecConfig, model: Model,
                   page: PageSize, info: backends.BackendInfo | None, topk: int
                   ) -> list[Refusal]:
    """What refuses `topk` > 1, in the order the start meets it."""
    found: list[Refusal] = []
    if model.dsv4 and (cfg.speculative_algorithm or "EAGLE").upper() in ("EAGLE", "NEXTN"):
        # 0.5.12 - 0.5.23: `assert server_args.speculative_eagle_topk == 1` (0.5.12
        # arg_groups/deepseek_v4_hook.py:40-42, 0.5.17 :153-155, 0.5.23 :157)
        w = find_line(target, DSV4_HOOK, r"topk == 1 is supported")
        if w:
            found.append((REFUSED, f"{model.arch} asserts --speculative-eagle-topk 1 ({w})", w))
    if backend == "trtllm_mha":
        w = find_line(target, SPEC_HOOK, r"trtllm_mha backend only supports topk = 1") or \
            find_line(target, SERVER_ARGS, r"trtllm_mha backend only supports topk = 1")
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
    g = extend_topk_guard(target, backend)
    if g is not None and (g[1] is None or g[2] is None):
        found.append((REFUSED, f"{backend}'s draft-extend (SPEC_V2) metadata raises for "
                               f"topk > 1 ({g[0]}): the draft-extend graph capture, or "
                               "the first draft-extend pass, fails", g[0]))
    return found


def _pick(found: list[Refusal], if_set: list[Refusal], notes: list[str] | None = None
          ) -> Refusal | None:
    """A refusal whatever the rest, else the first condition that could refuse at SGLang's
    defaults, the conditions that refuse only with a parallelism option set named in its
    reason (`; also refused at start if ...`); with only those, no refusal: they go to
    `notes`."""
    hit = next((f for f in found if f[0] == REFUSED), None)
    if hit is not None:
        return hit
    if not found:
        if notes is not None:
            notes += [f"a server that starts runs the default: {f[1]}" for f in if_set]
        return None
    mode, reason, where = found[0]
    also = "".join(f"; also {f[1]}" for f in if_set)
    return mode, reason + also, where
