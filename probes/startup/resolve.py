"""What SGLang resolves at start before any backend is built: the model and the page size.

Why apart from the verdicts: these are read from the release's argument handling, which moved
three times (`srt/server_args.py` up to 0.5.14, `srt/arg_groups/overrides.py` 0.5.15 - 0.5.18,
`srt/arg_groups/model_overrides/*.py` from 0.5.19); each rule is looked for in every place a
release may hold it, by its text, and cited at the line it was found.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from diag.context import SpecConfig
from diag.probes.gate import env_bool
from diag.probes.source import file_state, parse_file
from diag.target import Target

SERVER_ARGS = "srt/server_args.py"
OVERRIDES = "srt/arg_groups/overrides.py"
DSV2_OVERRIDES = "srt/arg_groups/model_overrides/deepseek_v2.py"
DSV4_OVERRIDES = "srt/arg_groups/model_overrides/deepseek_v4.py"
QWEN4_OVERRIDES = "srt/arg_groups/model_overrides/qwen4_exp.py"
QWEN4_ARCH = "Qwen4ExpForConditionalGeneration"
MINIMAX_M3_OVERRIDES = "srt/arg_groups/model_overrides/minimax_m3.py"
MINIMAX_M3_ARCHS = ("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration")
QWEN3VL_ARCH = "Qwen3VLForConditionalGeneration"
# Qwen3-VL's page size 16 under aiter's unified attention on ROCm: model_overrides (0.5.19+),
# overrides.py (0.5.15 - 0.5.18), server_args.py (0.5.10 - 0.5.14); not in 0.5.9
QWEN3VL_PAGE_FILES = ("srt/arg_groups/model_overrides/qwen3_vl.py", OVERRIDES, SERVER_ARGS)
QWEN3VL_RULE = r"Setting page_size=16 for aiter unified attention on Qwen3VL"
DSV4_HOOK = "srt/arg_groups/deepseek_v4_hook.py"
MODEL_CONFIG = "srt/configs/model_config.py"
MODEL_HOOK = "srt/arg_groups/model_hook.py"
# where the DSA page-size override lives: 0.5.19+ / 0.5.15 - 0.5.18 / 0.5.9 - 0.5.14
DSA_PAGE_FILES = (DSV2_OVERRIDES, OVERRIDES, SERVER_ARGS)
# `aiter_can_use_preshuffle_paged_mqa`: dsa/utils.py from 0.5.14, nsa/utils.py before
DSA_UTILS_FILES = ("srt/layers/attention/dsa/utils.py", "srt/layers/attention/nsa/utils.py")
DSA_UTILS = DSA_UTILS_FILES[0]
# DeepSeek-V4's page size 256: model_overrides (0.5.19+), overrides.py (0.5.15 - 0.5.18), the
# hook itself (0.5.12 - 0.5.14, `server_args.page_size = 256`)
DSV4_PAGE_FILES = (DSV4_OVERRIDES, OVERRIDES, DSV4_HOOK)
# the files that route DeepSeek-V4 to its hook: model_hook.py (0.5.19+), server_args.py before
DSV4_ROUTE_FILES = (MODEL_HOOK, SERVER_ARGS)

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
# DeepSeek-V3's config.json: num_attention_heads 128, num_key_value_heads 128 (the KV heads
# SGLang's default backend counts on HIP for an MLA model).
FAMILY_PARAMS = {"DeepseekV32ForCausalLM": {"index_topk": 2048},
                 "DeepseekV3ForCausalLM": {"num_attention_heads": 128, "num_key_value_heads": 128},
                 "GlmMoeDsaForCausalLM": {"index_topk": 2048}}


@dataclass(frozen=True)
class Where:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"



# --------------------------------------------------------------------------- source anchors


def env_of(cfg: SpecConfig) -> dict[str, str]:
    """The server's environment under audit (`--env`), else this process's."""
    return dict(os.environ) if cfg.environ is None else dict(cfg.environ)


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
    # not there: a rule this release lacks, or a damaged file; the parse (cached, and rare: an
    # intact release has the lines the readers look for) notes a damaged one (damaged_rules)
    parse_file(path)
    return None


# where SGLang's argument handling lives (0.5.9 - 0.5.12.post1 server_args.py; arg_groups/ after)
ARGUMENT_PARTS = ("srt/server_args.py", "srt/arg_groups/")


def _unparsed_sources(target: Target) -> list[tuple[str, str, int | None]]:
    """(file under the package, why, line) for each file under `srt/` a reader asked for and
    could not parse, as it is now."""
    from diag.probes.source import parse_problem, unparsed

    out = []
    for path in unparsed(target.package / "srt"):
        rel = path.relative_to(target.package.resolve()).as_posix()
        if (why := parse_problem(path)) is not None:
            out.append((rel, why[0], why[1]))
    return out


def skipped_sources(target: Target) -> list[str]:
    """"skipped FILE: why" for each file under `srt/` outside the argument handling that a
    reader asked for and could not parse (the runners the run-time fallbacks are read from,
    ...): what was read without it is given, and the finding says what was not."""
    return [f"skipped sglang/{rel}: {why}" for rel, why, _ in _unparsed_sources(target)
            if not rel.startswith(ARGUMENT_PARTS)]


def damaged_rules(target: Target) -> list[tuple[str, str, int | None]]:
    """(file, why, line) for each file of SGLang's argument handling a start-up reader looked
    in and could not parse. Why: a rule not found in a damaged file reads as a release without
    the rule, so a configuration SGLang refuses would pass; the verdicts say the tree is broken
    instead (probes.draft_extend_graph.probe)."""
    return [(f"sglang/{rel}", why, line) for rel, why, line in _unparsed_sources(target)
            if rel.startswith(ARGUMENT_PARTS)]


def find_first(target: Target, rels: tuple[str, ...], pattern: str) -> Where | None:
    """`find_line` in the first of `rels` (newest layout first) that has the pattern."""
    for rel in rels:
        w = find_line(target, rel, pattern)
        if w is not None:
            return w
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
    params: dict = field(default_factory=dict)  # the config.json (or family) parameters
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


@dataclass
class _ConfigIndex:
    """What read_model asks of a release's model_config.py, from one walk: the line of each
    architecture's `self.attention_arch = AttentionArch.MLA` branch, and the DSA tuples. Why:
    read_model runs for every verdict (and twice per audited configuration); walking the file
    each time cost 0.15 s a call."""

    mla: dict[str, int]
    tuples: dict[str, list[str]]


@functools.lru_cache(maxsize=16)
def _config_index(path: str, _mtime: int, _size: int) -> _ConfigIndex | None:
    tree = parse_file(Path(path))
    if tree is None:
        return None
    mla: dict[str, int] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        line = next((st.lineno for st in node.body if isinstance(st, ast.Assign)
                     and "AttentionArch.MLA" in ast.unparse(st.value)
                     and "attention_arch" in ast.unparse(st.targets[0])), None)
        if line is None:
            continue
        for c in ast.walk(node.test):
            if isinstance(c, ast.Constant) and isinstance(c.value, str):
                mla.setdefault(c.value, line)
    return _ConfigIndex(mla, {fn: _tuple_in_func(tree, fn)
                              for fn in ("is_deepseek_dsa", "is_deepseek_nsa")})


def config_index(target: Target) -> _ConfigIndex | None:
    state = file_state(target.file(MODEL_CONFIG))
    return _config_index(*state) if state else None


def model_config(model: str) -> tuple[str, dict, str] | None:
    """(architecture, config parameters, source) of a model path or family name; None for a
    path that is not on this machine. ValueError: a path here without a readable config.json
    naming an architecture."""
    p = Path(model)
    if os.sep in model and not p.exists():  # a server's model path, not on this machine
        return None
    cfg_file = p / "config.json" if p.is_dir() else p if p.name == "config.json" else None
    if cfg_file is None:
        arch = FAMILIES.get(model.lower(), model)
        return arch, dict(FAMILY_PARAMS.get(arch, {})), \
            f"family {model!r} -> {arch}" if arch != model else f"architecture {arch}"
    try:
        params = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise ValueError(f"--model {model}: cannot read {cfg_file.name} ({e})") from None
    archs = params.get("architectures") if isinstance(params, dict) else None
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ValueError(f"--model {model}: config.json names no architectures")
    return archs[0], params, f"{cfg_file}"


def architectures_listed(target: Target, func: str) -> tuple[frozenset[str], Where] | None:
    """The architectures a model_config.py predicate names (`is_encoder_decoder_model`,
    `is_local_attention_model`: a list or one name tested `in model_architectures`), and
    where it is defined; None where the release has no such function."""
    tree = parse_file(target.file(MODEL_CONFIG))
    if tree is None:
        return None
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and fn.name == func:
            return frozenset(c.value for c in ast.walk(fn) if isinstance(c, ast.Constant)
                             and isinstance(c.value, str)), \
                Where(target.relpath(target.file(MODEL_CONFIG)), fn.lineno)
    return None


def model_problem(model: str | None) -> str | None:
    """Why `model` cannot be read here as a model (`read_model` would raise), or None."""
    try:
        model_config(model) if model else None
    except ValueError as e:
        return str(e)
    return None


def read_model(target: Target, model: str | None) -> Model:
    """Architecture and the config parameters that matter, from a path's config.json or a name;
    MLA and DSA as the release's model_config.py decides them for that architecture."""
    if not model:
        return Model(None, None)
    got = model_config(model)
    if got is None:
        return Model(None, None, source=f"{model} (not readable here: MLA/MHA unknown)")
    arch, params, source = got
    m = Model(arch, False, source=source)
    kpool = params.get("index_kpool")  # a config.json of another shape: SGLang's default
    m.index_kpool = kpool if isinstance(kpool, int) and not isinstance(kpool, bool) \
        and kpool > 0 else 1
    m.params = params
    index = config_index(target)
    line = index.mla.get(arch) if index is not None else None
    m.mla_where = Where(target.relpath(target.file(MODEL_CONFIG)), line) if line else None
    m.mla = m.mla_where is not None
    # `is_deepseek_dsa` (0.5.14+), `is_deepseek_nsa` before (0.5.9 configs/model_config.py:54)
    for fn in ("is_deepseek_dsa", "is_deepseek_nsa"):
        if index is not None and arch in index.tuples[fn] \
                and params.get("index_topk") is not None:
            m.dsa = True
            m.dsa_where = find_line(target, MODEL_CONFIG, rf"def {fn}\b")
            break
    # DeepSeek-V4 gets its hook from model_hook.py (0.5.19+) or server_args.py (0.5.12 -
    # 0.5.18: `apply_deepseek_v4_defaults`, 0.5.12 server_args.py:1778-1784)
    m.dsv4 = arch == "DeepseekV4ForCausalLM" and find_first(
        target, DSV4_ROUTE_FILES, r'"DeepseekV4ForCausalLM"') is not None \
        and target.file(DSV4_HOOK).is_file()
    return m


# --------------------------------------------------------------------------- the page size


@dataclass
class PageSize:
    value: int | None  # None: depends (see `condition`)
    why: str
    where: Where | None = None
    condition: str | None = None  # for `depends`: what decides it, in words
    if_true: int | None = None  # the page size when the condition holds


# `_mla_backend_page_constraints` (arg_groups/overrides.py; server_args.py up to 0.5.14):
# backends that change the page size, found by the warning each logs. The size set and the
# sizes kept are read at the rule (`if page_size not in [16, 32, 64, 128]:`, `!= 64`), since
# they moved: trtllm_mha kept 16/32/64 (0.5.9 server_args.py:1904, 0.5.15 overrides.py:1575)
# and 16/32/64/128 from 0.5.17 (0.5.23 overrides.py:1183-1187, where SGLang's own argument
# handling gives 64 for a page size not given).
BACKEND_PAGE = {
    "flashmla": r"FlashMLA only supports a page_size of 64",
    "cutlass_mla": r"Cutlass MLA only supports a page_size of 128",
    "trtllm_mla": r"TensorRT-LLM MLA only supports page_size of 32 or 64",
    "cutedsl_mla": r"CuteDSL MLA only supports page_size of 32 or 64",
    "trtllm_mha": r"TensorRT-LLM MHA only supports page_size of",
    "hpc_ops": r"HPC-Ops attention only supports a page_size of 64",
}
_TO = re.compile(r"(?:to|page_size =|page_size=)\s*(\d+)")


def backend_page_rule(target: Target, backend: str | None
                      ) -> tuple[int, tuple[int, ...], Where] | None:
    """(the page size the backend's rule sets, the sizes it keeps, where) for `backend`, read
    at the rule's warning in this release; None when the release has no such rule."""
    pattern = BACKEND_PAGE.get(backend or "")
    w = None
    for rel in (OVERRIDES, SERVER_ARGS):
        w = find_line(target, rel, pattern) if pattern else None
        if w is not None:
            break
    if w is None:
        return None
    try:
        lines = (target.root / w.file).read_text(encoding="utf-8",
                                                 errors="replace").splitlines()
    except OSError:
        return None
    here = lines[w.line - 1]
    m = _TO.search(here.split("changing", 1)[-1]) or _TO.search(
        " ".join(lines[w.line:w.line + 3]))
    forced = int(m.group(1)) if m else 64
    kept: tuple[int, ...] = ()
    for back in range(w.line - 2, max(0, w.line - 6), -1):
        g = re.search(r"page_size (not in \[([\d,\s]+)\]|!= (\d+))", lines[back])
        if g:
            kept = tuple(int(x) for x in (g.group(2) or g.group(3)).split(","))
            break
    return forced, kept, w


def resolve_page_size(target: Target, platform: str, cfg: SpecConfig, model: Model,
                      env: dict[str, str], backend: str | None = None,
                      env_given: bool = True) -> PageSize:
    """The page size SGLang runs with: a model override, a backend's constraint, else
    --page-size, else the default. `env_given`: the server's environment is under audit (else
    `env` is this process's, and a variable it lacks is not taken as unset on the server)."""
    if model.dsv4:
        w = find_first(target, DSV4_PAGE_FILES, r"page_size = 256")
        if w:
            return PageSize(256, f"{model.arch} forces page_size 256 ({w})", w)
    if model.dsa:
        forced = 64 * model.index_kpool
        w = find_first(target, DSA_PAGE_FILES,
                       r"Setting page size to (\{page_size\}|64) for DeepSeek DSA\.")
        if platform == "hip":
            hip = _dsa_hip_page(target, env, env_given, forced, cfg.triton_version)
            if hip is not None:
                return hip
        if w:
            return PageSize(forced, f"{model.arch} (DSA) forces page_size {forced} ({w})", w)
    if model.arch == QWEN4_ARCH:
        q = _qwen4_page(target, model) or (_qwen4_sm100_page(target, cfg)
                                           if platform == "cuda" else None)
        if q is not None:
            return q
    if model.arch in MINIMAX_M3_ARCHS and platform == "cuda" and cfg.page_size is None:
        w = find_line(target, MINIMAX_M3_OVERRIDES,
                      r'page_resolved is None and backend_resolved in \("fa4", "trtllm_mha"\)')
        if w is not None and backend in ("fa4", "trtllm_mha"):
            # 0.5.19 minimax_m3.py:60-80, 0.5.23 :147-167: under `get_platform().is_sm100`
            # only; Hopper's branch sets 128 for fa3 alone, HIP's none
            return PageSize(None, f"{model.arch} with {backend}: the page size follows the "
                                  f"GPU", w, if_true=128,
                            condition=f"page_size 128 on SM100 (Blackwell: the model's "
                                      f"override for fa4 and trtllm_mha, {w}), else as given "
                                      f"(1); pass --page-size to decide")
    if model.arch == QWEN3VL_ARCH and platform == "hip" and cfg.page_size is None:
        q = _qwen3vl_page(target, env, env_given)
        if q is not None:
            return q
    rule = backend_page_rule(target, backend)
    if rule is not None and not (rule[1] and cfg.page_size in rule[1]):
        forced, kept, w = rule
        given = f" (--page-size {cfg.page_size} overridden)" if cfg.page_size else ""
        keeps = f"; it keeps {', '.join(map(str, kept))}" if kept and kept != (forced,) else ""
        return PageSize(forced, f"{backend} forces page_size {forced}{given}{keeps} ({w})", w)
    if cfg.page_size is not None:
        return PageSize(cfg.page_size, f"--page-size {cfg.page_size}")
    w = find_line(target, OVERRIDES, r"def _page_size_default")
    if platform == "hip" and env.get("SGLANG_AITER_KV_CACHE_LAYOUT", "").lower() == \
            "vectorized_5d" and w:
        return PageSize(64, f"SGLANG_AITER_KV_CACHE_LAYOUT=vectorized_5d on HIP: default "
                            f"page_size 64 ({w})", w)
    return PageSize(1, f"default page_size 1 ({w})" if w else "default page_size 1", w)


def _qwen4_page(target: Target, model: Model) -> PageSize | None:
    """Qwen4-Exp with a compressed QSA profile: `overrides["page_size"] = 64` whatever was
    given (0.5.20 arg_groups/model_overrides/qwen4_exp.py:84, 0.5.23 :92), the profile being
    `parse_qsa_profile(hf_config)`, not None when the text config has `indexer_n_heads` (0.5.23
    layers/attention/qsa/config.py:78-88). None where the release has no such override, or the
    config has no profile; `depends` for a family name (no config.json to read)."""
    w = find_line(target, QWEN4_OVERRIDES, r'overrides\["page_size"\] = 64$')
    if w is None:
        return None
    params = model.params or {}
    if model.source.startswith("family") or not params:
        return PageSize(None, f"{model.arch}: page_size 64 with a compressed QSA profile", w,
                        condition=f"page_size 64 if the model's config has a compressed QSA "
                                  f"indexer (indexer_n_heads), else as given ({w}; pass --model "
                                  "with the checkpoint's folder)", if_true=64)
    text = params.get("text_config") if isinstance(params.get("text_config"), dict) else params
    if text.get("indexer_n_heads") is None:
        return None
    return PageSize(64, f"{model.arch} with a compressed QSA profile (indexer_n_heads) forces "
                        f"page_size 64 ({w})", w)


def _qwen4_sm100_page(target: Target, cfg: SpecConfig) -> PageSize | None:
    """Qwen4-Exp on SM100 without --attention-backend: the model's override picks triton or
    trtllm_mha and sets page_size 1 or 64 to match, whatever --page-size says (0.5.20
    arg_groups/model_overrides/qwen4_exp.py:60-74, 0.5.23 :57-71); SGLang's own handling gives
    page 1 with --page-size 64 there. The GPU generation is not an input: `depends`. The
    compressed-QSA override (`_qwen4_page`) comes after it and wins."""
    if cfg.attention_backend is not None:
        return None
    w = find_line(target, QWEN4_OVERRIDES,
                  r'overrides\["page_size"\] = 64 if sm100_default_attn_backend == "trtllm_mha"')
    if w is None:
        return None
    given = cfg.page_size if cfg.page_size is not None else 1
    return PageSize(None, f"{QWEN4_ARCH} without --attention-backend: the page size follows "
                          "the GPU", w, if_true=64,
                    condition=f"on SM100 (Blackwell) the model's override runs triton with "
                              f"page_size 1 or trtllm_mha with 64, whatever --page-size says "
                              f"({w}); elsewhere {given}; pass --attention-backend to decide")


def _qwen3vl_page(target: Target, env: dict[str, str], env_given: bool) -> PageSize | None:
    """Qwen3-VL on ROCm with SGLANG_USE_AITER_UNIFIED_ATTN and no --page-size: page_size 16
    (0.5.10 server_args.py:2067 read with `get_bool_env_var`, :2070 set; 0.5.11 - 0.5.14 the
    same place, read with `envs....get()`; 0.5.15 arg_groups/overrides.py:826, :831; 0.5.23
    arg_groups/model_overrides/qwen3_vl.py:71, :77). None where the release has no such override
    or the variable reads false on the server; `depends` when the server's environment is not
    given and this process lacks the variable."""
    rel = next((r for r in QWEN3VL_PAGE_FILES if find_line(target, r, QWEN3VL_RULE)), None)
    w = find_line(target, rel, QWEN3VL_RULE) if rel else None
    if rel is None or w is None:
        return None
    read = find_line(target, rel, r"SGLANG_USE_AITER_UNIFIED_ATTN", max(0, w.line - 10))
    cite = f"{read}, {w}" if read else f"{w}"
    value = env.get("SGLANG_USE_AITER_UNIFIED_ATTN")
    if value is None and not env_given:
        return PageSize(None, f"{QWEN3VL_ARCH} on HIP: the page size follows aiter's unified "
                              "attention switch", w, if_true=16,
                        condition=f"page_size 16 if SGLANG_USE_AITER_UNIFIED_ATTN is true on "
                                  f"the server, else 1 ({cite}; pass --env "
                                  "SGLANG_USE_AITER_UNIFIED_ATTN=...)")
    old_reader = find_line(target, rel, r'get_bool_env_var\("SGLANG_USE_AITER_UNIFIED_ATTN"\)',
                           max(0, w.line - 10)) is not None  # 0.5.10: "true"/"1" only
    on = _get_bool(env, "SGLANG_USE_AITER_UNIFIED_ATTN") if old_reader else env_bool(value)
    if not on:
        return None
    return PageSize(16, f"{QWEN3VL_ARCH} with SGLANG_USE_AITER_UNIFIED_ATTN on HIP forces "
                        f"page_size 16 ({cite})", w)


def _dsa_hip_page(target: Target, env: dict[str, str], env_given: bool, forced: int,
                  triton: str | None = None) -> PageSize | None:
    """The DSA page size on ROCm. 0.5.9 - 0.5.11: `if is_hip(): self.page_size = 1` (0.5.9
    server_args.py:1251-1254). From 0.5.12: `if is_hip() and not
    aiter_can_use_preshuffle_paged_mqa()` gives 1, else 64 x index_kpool (0.5.12
    server_args.py:1862, 0.5.15 arg_groups/overrides.py:374, 0.5.19 / 0.5.23
    arg_groups/model_overrides/deepseek_v2.py:90 / :151); the function (0.5.23
    layers/attention/dsa/utils.py:34-68, 0.5.12 layers/attention/nsa/utils.py) is false without
    SGLANG_USE_AITER or with SGLANG_DSA_HIP_DISABLE_PRESHUFFLE (SGLANG_NSA_... up to 0.5.13 and
    as an alias after), true with AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS, else Triton >= 3.5.0."""
    w1 = find_first(target, DSA_PAGE_FILES,
                    r"is_hip\b.*and not aiter_can_use_preshuffle_paged_mqa\(\)")
    if w1 is None:
        w0 = find_first(target, DSA_PAGE_FILES, r"Setting page size to 1 for DeepSeek DSA on ROCm")
        if w0 is None:
            return None
        return PageSize(1, f"DSA on HIP: page_size 1 ({w0})", w0)
    fn = find_first(target, DSA_UTILS_FILES, r"def aiter_can_use_preshuffle_paged_mqa")
    cite = f"{w1}, {fn}" if fn else f"{w1}"
    use = env.get("SGLANG_USE_AITER")
    if use is None and not env_given:
        return PageSize(None, "DSA on HIP: the page size follows aiter's preshuffle paged-MQA "
                              "path", w1, if_true=forced, condition=(
                                  f"page_size {forced} if aiter's preshuffle paged-MQA path is "
                                  "usable on the server (SGLANG_USE_AITER true, "
                                  "SGLANG_DSA_HIP_DISABLE_PRESHUFFLE not set, and "
                                  "AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS=1 or Triton >= 3.5.0), "
                                  f"else 1 ({cite}; pass --env SGLANG_USE_AITER=...)"))
    if not _get_bool(env, "SGLANG_USE_AITER"):
        return PageSize(1, f"DSA on HIP with SGLANG_USE_AITER unset/false: the legacy "
                           f"path forces page_size 1 ({cite})", w1)
    if _get_bool(env, "SGLANG_DSA_HIP_DISABLE_PRESHUFFLE") or \
            _get_bool(env, "SGLANG_NSA_HIP_DISABLE_PRESHUFFLE"):
        return PageSize(1, "DSA on HIP with SGLANG_DSA_HIP_DISABLE_PRESHUFFLE set: "
                           f"page_size 1 ({cite})", w1)
    if _get_bool(env, "AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS"):
        return PageSize(forced, "DSA on HIP with AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS"
                                f" set: page_size {forced} ({cite})", w1)
    floor = _triton_floor(target)
    if triton is not None and floor is not None:  # `Version(Version(triton.__version__)
        # .base_version) >= Version("3.5.0")`, false on any exception (0.5.23 dsa/utils.py:63-68)
        from packaging.version import InvalidVersion, Version

        try:
            ok = Version(Version(triton).base_version) >= Version(floor[0])
        except InvalidVersion:
            ok = False
        size = forced if ok else 1
        return PageSize(size, f"DSA on HIP with SGLANG_USE_AITER: the server's Triton {triton} "
                              f"is {'at least' if ok else 'older than'} {floor[0]} ({floor[1]}): "
                              f"page_size {size} ({cite})", w1)
    return PageSize(None, "DSA on HIP: the page size follows the server's Triton",
                    w1, condition=f"aiter's preshuffle paged-MQA path: the server's Triton >= "
                                  f"3.5.0 gives page_size {forced}, older gives 1 ({cite}; pass "
                                  f"--triton-version)",
                    if_true=forced)


def _triton_floor(target: Target) -> tuple[str, Where] | None:
    """The Triton version aiter's preshuffle path needs, as the release writes it
    (`Version(Version(triton.__version__).base_version) >= Version("3.5.0")`, 0.5.12 - 0.5.23
    dsa/utils.py or nsa/utils.py), with where; None in another shape."""
    pattern = r'Version\(Version\(triton\.__version__\)\.base_version\)\s*>=\s*Version\("([\d.]+)"\)'
    w = find_first(target, DSA_UTILS_FILES, pattern)
    if w is None:
        return None
    line = target.file(w.file.removeprefix("sglang/")).read_text(
        encoding="utf-8", errors="replace").splitlines()[w.line - 1]
    m = re.search(pattern, line)
    return (m.group(1), w) if m else None


# --------------------------------------------------------------------------- multi-layer EAGLE

# where a model switches multi-layer EAGLE on: model_overrides/*.py (0.5.19+), overrides.py
# (0.5.15 - 0.5.23: Step3p5 stayed there), server_args.py (0.5.9 - 0.5.14)
MODEL_OVERRIDES_DIR = "srt/arg_groups/model_overrides"
_ARCH = re.compile(r"^[A-Z]\w*For(CausalLM|ConditionalGeneration)\w*$")


_MULTI_LAYER: dict[str, dict[str, Where]] = {}  # per package folder: read once a process


def multi_layer_archs(target: Target) -> dict[str, Where]:
    """The architectures whose start switches multi-layer EAGLE on with `--speculative-algorithm
    EAGLE`, each with the line that does it: `overrides["enable_multi_layer_eagle"] = True` /
    `return {"enable_multi_layer_eagle": True}` under `if cfg.speculative_algorithm == "EAGLE"`
    in a function `@_register_for(archs...)` (0.5.23 model_overrides/mimo_v2.py:23-25,
    gigachat35.py:20-22, overrides.py:346-350 for Step3p5; 0.5.15 overrides.py:433-437), or
    `self.enable_multi_layer_eagle = True` in server_args.py under an `if`/`elif` naming the
    architecture (0.5.9 server_args.py:1405-1407 MiMoV2Flash, :1426-1428 Step3p5). Why: that
    worker (speculative/multi_layer_eagle_worker_v2.py) captures draft-extend with no backend
    allow-list and builds no draft-decode runner, whatever the gate of the EAGLE worker says."""
    key = str(target.package)
    if key not in _MULTI_LAYER:
        _MULTI_LAYER[key] = _read_multi_layer_archs(target)
    return _MULTI_LAYER[key]


def _read_multi_layer_archs(target: Target) -> dict[str, Where]:
    files = [target.file(SERVER_ARGS), target.file(OVERRIDES)]
    d = target.file(MODEL_OVERRIDES_DIR)
    if d.is_dir():
        files += sorted(d.glob("*.py"))
    out: dict[str, Where] = {}
    for path in files:
        tree = parse_file(path) if path.is_file() else None
        if tree is None:
            continue
        rel = target.relpath(path)
        # module-level name tuples (`MIMO_V2_MODEL_ARCHS = ("MiMoV2ForCausalLM", ...)`, 0.5.12
        # server_args.py:82-85, tested `elif model_arch in MIMO_V2_MODEL_ARCHS:` at :2124)
        consts = {st.targets[0].id: [e.value for e in st.value.elts
                                     if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                  for st in tree.body if isinstance(st, ast.Assign) and len(st.targets) == 1
                  and isinstance(st.targets[0], ast.Name)
                  and isinstance(st.value, (ast.Tuple, ast.List))}
        parents: dict[int, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[id(child)] = node
        for node in ast.walk(tree):
            if not (isinstance(node, ast.If) and _eagle_test(node.test)):
                continue
            line = next((n.lineno for st in node.body for n in ast.walk(st)
                         if _switches_multi_layer(n)), None)
            if line is None:
                continue
            for arch in _archs_around(node, parents, consts):
                out.setdefault(arch, Where(rel, line))
    return out


def _eagle_test(test: ast.AST) -> bool:
    return isinstance(test, ast.Compare) and len(test.ops) == 1 and \
        isinstance(test.ops[0], ast.Eq) and ast.unparse(test.left).endswith(
            "speculative_algorithm") and isinstance(test.comparators[0], ast.Constant) and \
        test.comparators[0].value == "EAGLE"


def _switches_multi_layer(n: ast.AST) -> bool:
    if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value is True:
        return any(ast.unparse(t).endswith(("enable_multi_layer_eagle",
                                            "['enable_multi_layer_eagle']")) for t in n.targets)
    if isinstance(n, ast.Dict):
        return any(isinstance(k, ast.Constant) and k.value == "enable_multi_layer_eagle"
                   and isinstance(v, ast.Constant) and v.value is True
                   for k, v in zip(n.keys, n.values))
    return False


def _archs_around(node: ast.AST, parents: dict[int, ast.AST],
                  consts: dict[str, list[str]]) -> list[str]:
    """The architecture names of the function's `@_register_for(...)` (or of its
    `@register_model_override_predicate(lambda arch: "Step3p5ForCausalLM" in arch ...)`, 0.5.19
    overrides.py:451-455), else of the `if`s whose body holds `node` (server_args.py's `elif
    "Step3p5ForCausalLM" in model_arch:`; not the `elif`s before it)."""
    archs: list[str] = []
    child, at = node, parents.get(id(node))
    while at is not None:
        if isinstance(at, ast.FunctionDef):
            for dec in at.decorator_list:
                name = ast.unparse(dec.func) if isinstance(dec, ast.Call) else ""
                if name.endswith(("_register_for", "register_model_override_predicate")):
                    archs += [c.value for c in ast.walk(dec) if isinstance(c, ast.Constant)
                              and isinstance(c.value, str) and _ARCH.match(c.value)]
            return archs
        if isinstance(at, ast.If) and any(child is st for st in at.body):
            for c in ast.walk(at.test):
                names = [c.value] if isinstance(c, ast.Constant) and isinstance(c.value, str) \
                    else consts.get(c.id, []) if isinstance(c, ast.Name) else []
                archs += [a for a in names if _ARCH.match(a)]
        child, at = at, parents.get(id(at))
    return archs


# --------------------------------------------------------------------------- auto parameters

SPEC_HOOK_FILE = "srt/arg_groups/speculative_hook.py"


def auto_params(target: Target, arch: str, algorithm: str | None
                ) -> tuple[tuple[int, int, int], Where] | None:
    """(steps, topk, draft tokens) SGLang picks when the server gives none of the three, and the
    `return` that picks them: `_auto_choose_speculative_params` (0.5.23
    arg_groups/speculative_hook.py:1430-1461, called at :1159-1166 when
    --speculative-num-steps is None), `auto_choose_speculative_params` in server_args.py before
    (0.5.9 :5741-5775): (5, 4, 8) for LlamaForCausalLM and Grok, (3, 1, 4) otherwise. Read by
    walking its `if`/`elif` chain on the architecture and the algorithm."""
    for rel in (SPEC_HOOK_FILE, SERVER_ARGS):
        tree = parse_file(target.file(rel))
        fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in (
            "_auto_choose_speculative_params", "auto_choose_speculative_params")),
            None) if tree is not None else None
        if fn is not None:
            hit = _pick_return(fn.body, arch, algorithm)
            if hit is not None:
                return hit[0], Where(target.relpath(target.file(rel)), hit[1])
    return None


def _pick_return(stmts: list[ast.stmt], arch: str, algorithm: str | None
                 ) -> tuple[tuple[int, int, int], int] | None:
    for st in stmts:
        if isinstance(st, ast.Return) and isinstance(st.value, ast.Tuple) and \
                len(st.value.elts) == 3 and all(isinstance(e, ast.Constant) and
                                                isinstance(e.value, int) for e in st.value.elts):
            return tuple(e.value for e in st.value.elts), st.lineno  # type: ignore[return-value]
        if isinstance(st, ast.If):
            holds = _arch_test(st.test, arch, algorithm)
            if holds is None:
                return None  # a test this reader does not know: no answer
            hit = _pick_return(st.body if holds else st.orelse, arch, algorithm)
            if hit is not None:
                return hit
    return None


def _arch_test(test: ast.AST, arch: str, algorithm: str | None) -> bool | None:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, op, right = ast.unparse(test.left), test.ops[0], test.comparators[0]
    if left.endswith("arch") and isinstance(op, ast.In) and isinstance(right, (ast.List,
                                                                               ast.Tuple)):
        return arch in [e.value for e in right.elts if isinstance(e, ast.Constant)]
    if left.endswith("speculative_algorithm") and isinstance(op, ast.Eq) and \
            isinstance(right, ast.Constant):
        return (algorithm or "").upper() == right.value
    return None


def multi_layer(target: Target, cfg: SpecConfig, model: Model) -> tuple[bool | None, str]:
    """Whether the multi-layer EAGLE worker runs, and why: a server says it
    (`enable_multi_layer_eagle`), else the model switches it on for `--speculative-algorithm
    EAGLE` (`resolve.multi_layer_archs`; NEXTN is renamed to EAGLE only after, so it keeps the
    EAGLE worker); None when the algorithm is not given."""
    if cfg.enable_multi_layer_eagle is not None:
        return cfg.enable_multi_layer_eagle, "the server runs multi-layer EAGLE"
    w = multi_layer_archs(target).get(model.arch) if model.arch else None
    if w is None:
        return False, ""
    why = f"{model.arch} switches multi-layer EAGLE on ({w})"
    algo = (cfg.speculative_algorithm or "").upper()
    return (None if not algo else algo == "EAGLE"), why
