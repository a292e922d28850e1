"""Which attention backend SGLang runs: the one given, one the model forces, or SGLang's default.

Why: a server started without `--attention-backend` runs the backend SGLang picks at start, and
a DeepSeek-V4 server runs `dsv4` whatever `--attention-backend` says (`overrides: Dict[str,
Any] = {"attention_backend": "dsv4"}`, 0.5.19 arg_groups/model_overrides/deepseek_v4.py:30,
0.5.23 :24; 0.5.15 - 0.5.18 arg_groups/overrides.py; 0.5.12 - 0.5.14
arg_groups/deepseek_v4_hook.py `server_args.attention_backend = "dsv4"`, 0.5.12 :15). Two steps,
in SGLang's order: the model's own overrides (model_overrides/*.py from 0.5.19, overrides.py
0.5.15 - 0.5.18, server_args.py `_handle_model_specific_adjustments` before), then the generic
default (`get_default_attn_backend`, 0.5.23 arg_groups/model_override_base.py:277-351; 0.5.19
:273; server_args.py `_get_default_attn_backend` 0.5.10 - 0.5.18; inline in
`_handle_attention_backend_compatibility` in 0.5.9, server_args.py:1782-1833).

Both are read from the release's own code and evaluated here for the platform (the release's
code itself needs a GPU build's platform objects): a test diag can decide (HIP or CUDA, the model
is MLA, its KV heads over `--tp`, topk, the model's architecture) is decided; one it cannot (the
GPU generation on CUDA, FlashInfer installed, a model attribute not read) leaves a condition in
words, and each backend a condition leads to is a candidate with the `file:line` that picks it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from diag.context import SpecConfig
from diag.probes.backends import GPU_GENERATION
from diag.probes.source import kept, last_name, parse_file, walk_all
from diag.probes.startup.resolve import (
    MODEL_HOOK,
    OVERRIDES,
    SERVER_ARGS,
    Model,
    Where,
    read_model,
)
from diag.target import Target

OVERRIDE_BASE = "srt/arg_groups/model_override_base.py"
MODEL_OVERRIDES_DIR = "srt/arg_groups/model_overrides"
DSV4_HOOK = "srt/arg_groups/deepseek_v4_hook.py"
# the generic default's homes, newest first (see the module docstring)
DEFAULT_FNS = ((OVERRIDE_BASE, "get_default_attn_backend"),
               (SERVER_ARGS, "_get_default_attn_backend"))
# the fields a model override may write that choose the backend a speculative phase runs on
FIELDS = ("attention_backend", "decode_attention_backend", "speculative_draft_attention_backend")
MAIN = "attention_backend"
# a model override registered for an architecture: model_overrides/*.py and overrides.py
REGISTER = ("_register_for", "register_model_override")

# other platforms than HIP and CUDA: false for both
OTHER_PLATFORM = ("is_npu", "is_xpu", "is_cpu", "is_mps", "is_musa", "is_hpu", "is_out_of_tree",
                  "has_amx", "use_mlx")
# model or install facts diag does not read, in words
UNREAD = {
    "has_flashinfer": "FlashInfer is installed",
    "is_flashinfer_available": "FlashInfer is installed",
    "has_attention_sinks": "the model has attention sinks",
    "has_asymmetric_kv": "the model's K and V head widths differ",
}


@dataclass
class Candidate:
    """A backend SGLang picks, the line that picks it, and what must hold (empty: always)."""

    backend: str | None  # None: a value diag does not read
    where: Where
    conds: list[str] = field(default_factory=list)
    field: str = MAIN

    def when(self) -> str:
        return " and ".join(self.conds) if self.conds else "always"


@dataclass
class Choice:
    """The backend SGLang runs, or the candidates it may run when no input decides."""

    candidates: list[Candidate]
    how: str  # "given" | "forced" | "model default" | "default"
    why: str

    @property
    def backend(self) -> str | None:
        """The one backend, when it is decided."""
        names = {c.backend for c in self.candidates}
        if len(names) == 1 and all(c.field == MAIN for c in self.candidates) and None not in names:
            return names.pop()
        return None


# --------------------------------------------------------------------------- evaluation


@dataclass
class _Facts:
    platform: str
    cfg: SpecConfig
    model: Model
    given: bool  # --attention-backend given (the "not set" tests are false)

    def kv_heads(self) -> int | None:
        """`get_total_num_kv_heads` (0.5.23 configs/model_config.py:1626-1690): the first of
        n_head_kv, num_kv_heads, num_key_value_heads, multi_query_group_num,
        num_attention_groups in the text config, else num_attention_heads."""
        p = self.model.params or {}
        text = p.get("text_config") if isinstance(p.get("text_config"), dict) else p
        for k in ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num",
                  "num_attention_groups", "num_attention_heads"):
            v = text.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return None


Tri = tuple[bool | None, str]  # (value, the undecided part in words)


_name = last_name  # probes.source


def _test(node: ast.AST, f: _Facts, env: dict) -> Tri:
    """A condition of SGLang's argument code evaluated for `f`; None where no input decides."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and all(
            isinstance(v, ast.Compare) and isinstance(v.left, ast.Name)
            and isinstance(env.get(v.left.id), str) and isinstance(v.ops[0], ast.Eq)
            and isinstance(v.comparators[0], ast.Constant) for v in node.values) \
            and len({v.left.id for v in node.values}) == 1:  # `head_num == 128 or ... == 16`
        heads = env[node.values[0].left.id]
        return None, f"{heads} is " + " or ".join(str(v.comparators[0].value)
                                                  for v in node.values)
    if isinstance(node, ast.BoolOp):
        parts = [_test(v, f, env) for v in node.values]
        stop = isinstance(node.op, ast.Or)  # the value that decides an or (True) / and (False)
        if any(v is stop for v, _ in parts):
            return stop, ""
        rest = [w for v, w in parts if v is None]
        if not rest:
            return (not stop), ""
        return None, (" or " if stop else " and ").join(rest)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        v, w = _test(node.operand, f, env)
        return (None, f"not {w}") if v is None else (not v, "")
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return _compare(node, f, env)
    alts = env.get(node.id) if isinstance(node, ast.Name) else None
    if isinstance(alts, list) and len(alts) == 1:  # a local set once: `is_diffusion = ...`
        return _test(alts[0][0], f, env)
    name = _name(node)
    if name == "is_hip" or name == "_is_hip":
        return f.platform == "hip", ""
    if name == "is_cuda" or name == "_is_cuda":
        return f.platform == "cuda", ""
    if name in GPU_GENERATION:
        return (False, "") if f.platform == "hip" else (None, GPU_GENERATION[name])
    if name in OTHER_PLATFORM:
        return False, ""
    if name == "is_attention_backend_not_set":
        return not f.given, ""
    if name in ("is_deepseek_dsa", "is_deepseek_nsa"):
        return f.model.dsa, ""
    if name == "use_mla_backend" and f.model.mla is not None:
        return f.model.mla, ""
    if name == "is_no_spec_infer_or_topk_one":
        # 0.5.23 utils/common.py:3960-3966: topk None, or topk 1 with page_size 1 / None
        topk = f.cfg.speculative_eagle_topk
        return topk is None or (topk == 1 and f.cfg.page_size in (None, 1)), ""
    if name == "_forces_eagle_topk_one":  # DFLASH only (0.5.23 model_override_base.py:269-275)
        return (f.cfg.speculative_algorithm or "").upper() == "DFLASH", ""
    if name in UNREAD:
        return None, UNREAD[name]
    return None, ast.unparse(node)[:100]


def _compare(node: ast.Compare, f: _Facts, env: dict) -> Tri:
    left, op, right = node.left, node.ops[0], node.comparators[0]
    text = ast.unparse(node)[:100]
    lname = _name(left)
    if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) \
            and right.value is None:
        is_none: bool | None = None
        if lname == "attention_backend":
            is_none = not f.given
        elif lname in ("prefill_attention_backend", "decode_attention_backend"):
            is_none = True  # diag audits one backend: the split ones are not given
        elif lname == "speculative_draft_attention_backend":
            is_none = f.cfg.draft_attention_backend is None
        elif lname == "speculative_algorithm":
            is_none = False  # a speculative configuration is under audit
        elif lname == "speculative_eagle_topk":
            is_none = f.cfg.speculative_eagle_topk is None
        if is_none is not None:
            return (is_none if isinstance(op, ast.Is) else not is_none), ""
    if lname == "device" and isinstance(right, ast.Constant) and isinstance(op, (ast.Eq,
                                                                                ast.NotEq)):
        same = right.value == "cuda"  # ROCm's torch device is "cuda" too
        return (same if isinstance(op, ast.Eq) else not same), ""
    if lname == "device_sm":
        return (False, "") if f.platform == "hip" else (None, GPU_GENERATION["device_sm"]
                                                        + " " + text.split("device_sm", 1)[1])
    config = _config_fact(left, f)
    if config is not _UNREAD and isinstance(right, ast.Constant) and isinstance(
            op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)):
        same = config is right.value if isinstance(op, (ast.Is, ast.IsNot)) else \
            config == right.value
        return (same if isinstance(op, (ast.Is, ast.Eq)) else not same), ""
    # the architecture: `model_arch in [...]`, `model_arch == "..."`, `"X" in (...architectures)`
    named = env.get(right.id) if isinstance(right, ast.Name) else None  # a module-level list
    if isinstance(named, list) and len(named) == 1:
        right = named[0][0]
    consts = _strings(right) if isinstance(op, (ast.In, ast.NotIn, ast.Eq, ast.NotEq)) else []
    if isinstance(left, ast.Constant) and isinstance(left.value, str) and \
            _name(right) == "model_arch" and f.model.arch:  # `"Llama4" in model_arch` (0.5.9)
        hit = left.value in f.model.arch
        return (hit if isinstance(op, ast.In) else not hit), ""
    if (lname == "model_arch" or ast.unparse(left).endswith("architectures[0]")) and consts \
            and f.model.arch:
        hit = f.model.arch in consts
        return (hit if isinstance(op, (ast.In, ast.Eq)) else not hit), ""
    if isinstance(left, ast.Constant) and isinstance(op, (ast.In, ast.NotIn)) \
            and "architectures" in ast.unparse(right) and f.model.arch:
        hit = left.value == f.model.arch
        return (hit if isinstance(op, ast.In) else not hit), ""
    # `head_num == 128` with head_num = model_config.get_num_kv_heads(tp)
    heads = env.get(left.id) if isinstance(left, ast.Name) else None
    if isinstance(heads, int) and isinstance(right, ast.Constant) \
            and isinstance(op, (ast.Eq, ast.NotEq)):
        hit = heads == right.value
        return (hit if isinstance(op, ast.Eq) else not hit), ""
    if isinstance(heads, str):
        return None, f"{heads} is {right.value}" if isinstance(right, ast.Constant) else text
    if isinstance(heads, list) and len(heads) == 1:  # `model_type = f(...)`: name the call
        return None, text.replace(left.id, ast.unparse(heads[0][0])[:60], 1)
    return None, text


_UNREAD = object()


def _config_fact(node: ast.AST, f: _Facts) -> object:
    """`hf_config.X` / `hf_text_config.X` / `hf_config` itself, from the config.json read;
    _UNREAD for a family name or anything else."""
    params = f.model.params or {}
    if f.model.source.startswith("family") or not params:
        return _UNREAD
    if isinstance(node, ast.Name) and node.id in ("hf_config", "hf_text_config"):
        return params
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id in ("hf_config", "hf_text_config"):
        text = params.get("text_config") if node.value.id == "hf_text_config" \
            and isinstance(params.get("text_config"), dict) else params
        return text.get(node.attr)
    return _UNREAD


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)
                and isinstance(e.value, str)]
    return []


class _Walk:
    """Runs a block of SGLang's argument code for `_Facts`: every write of a backend field (or
    `return "name"` in the default's function) reached, with the undecided tests on its path."""

    def __init__(self, f: _Facts, file: str, returns: bool) -> None:
        self.f, self.file, self.returns = f, file, returns
        self.env: dict = {}
        self.out: list[Candidate] = []

    def block(self, stmts: list[ast.stmt], conds: list[str]) -> bool:
        """Walk `stmts`; True once a return is certainly taken (the rest is not reached). A
        branch that returns leaves its negation on the path of what follows."""
        for st in stmts:
            done = self.stmt(st, conds)
            if done is True:
                return True
            if isinstance(done, str):
                conds = [*conds, done]
        return False

    def stmt(self, st: ast.stmt, conds: list[str]) -> bool | str:
        if isinstance(st, ast.If):
            v, words = _test(st.test, self.f, self.env)
            if v is True:
                return self.block(st.body, conds)
            if v is False:
                return self.block(st.orelse, conds)
            a = self.block(st.body, [*conds, words])
            b = self.block(st.orelse, [*conds, f"not ({words})"])
            return True if a and b else f"not ({words})" if a else words if b else False
        if isinstance(st, ast.Return):
            if st.value is not None:
                if self.returns and isinstance(st.value, ast.Constant) \
                        and isinstance(st.value.value, str):
                    self.emit(MAIN, st.value.value, st.lineno, conds)
                elif isinstance(st.value, ast.Dict):
                    self.dict_writes(st.value, conds)
            return True
        if isinstance(st, (ast.Assign, ast.AnnAssign)):
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            for t in targets:
                self.assign(t, st.value, st.lineno, conds)
            return False
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            for kw in st.value.keywords:  # declare_resolution(..., attention_backend=...)
                if kw.arg in FIELDS:
                    self.write(kw.arg, kw.value, st.lineno, conds)
            return False
        if isinstance(st, (ast.With, ast.Try)):
            return self.block(st.body, conds)
        return False

    def assign(self, target: ast.AST, value: ast.AST | None, line: int, conds: list[str]) -> None:
        if value is None:
            return
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            for t, v in zip(target.elts, value.elts):
                self.assign(t, v, line, conds)
            return
        key = target.attr if isinstance(target, ast.Attribute) else \
            target.slice.value if isinstance(target, ast.Subscript) \
            and isinstance(target.slice, ast.Constant) else None
        if key in FIELDS:
            self.write(key, value, line, conds)
        elif isinstance(target, ast.Name):
            if isinstance(value, ast.Dict):
                self.dict_writes(value, conds)
            elif isinstance(value, ast.Call) and _name(value) == "get_num_kv_heads":
                self.env[target.id] = self.heads()
            elif not conds:
                self.env[target.id] = [(value, [])]
            else:  # one more value under a condition
                self.env.setdefault(target.id, []).append((value, list(conds)))

    def heads(self) -> int | str:
        """KV heads per rank, `get_num_kv_heads(tp)`: max(1, total // tp) (0.5.23
        configs/model_config.py:1700-1711; 0.5.9 :624-631), tp_size 1 by default."""
        total = self.f.kv_heads()
        tp = self.f.cfg.tp_size
        if total is None:
            return "the model's KV heads per rank (not read: pass --model with its config.json)"
        if tp is None:
            return f"the KV heads per rank ({total} // --tp; --tp not given)"
        return max(1, total // tp)

    def dict_writes(self, d: ast.Dict, conds: list[str]) -> None:
        for k, v in zip(d.keys, d.values):
            if isinstance(k, ast.Constant) and k.value in FIELDS:
                self.write(k.value, v, v.lineno, conds)

    def write(self, key: str, value: ast.AST, line: int, conds: list[str]) -> None:
        alts = self.env.get(value.id) if isinstance(value, ast.Name) else None
        for v, extra in alts if isinstance(alts, list) else [(value, [])]:
            path = [*extra, *(c for c in conds if c not in extra)]
            for name, more in self.values(v):
                self.emit(key, name, line, [*path, *more])

    def values(self, value: ast.AST) -> list[tuple[str | None, list[str]]]:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return [(value.value, [])]
        if isinstance(value, ast.IfExp):
            v, words = _test(value.test, self.f, self.env)
            if v is True:
                return self.values(value.body)
            if v is False:
                return self.values(value.orelse)
            return [(n, [words, *c]) for n, c in self.values(value.body)] + \
                [(n, [f"not ({words})", *c]) for n, c in self.values(value.orelse)]
        return [(None, [f"a value diag does not read ({ast.unparse(value)[:60]})"])]

    def emit(self, key: str, name: str | None, line: int, conds: list[str]) -> None:
        if not conds:  # a write taken for certain replaces the writes before it
            self.out = [c for c in self.out if c.field != key]
        self.out.append(Candidate(name, Where(self.file, line), list(conds), key))


# --------------------------------------------------------------------------- the blocks


def _registered(fn: ast.FunctionDef, arch: str) -> bool:
    return any(isinstance(d, ast.Call) and _name(d) in REGISTER and arch in
               [a.value for a in d.args if isinstance(a, ast.Constant)]
               for d in fn.decorator_list)


def _names_arch(test: ast.AST, arch: str, consts: dict[str, list[str]]) -> bool:
    """The test of an `if` naming `arch`: `model_arch in [...]` / `== "..."`, a module-level
    list (`model_arch in LLAMA4_MODEL_ARCHS`, 0.5.14), a part of its name (`"Llama4" in
    model_arch`, 0.5.9)."""
    if "model_arch" not in ast.unparse(test):
        return False
    for c in ast.walk(test):
        if isinstance(c, ast.Constant) and c.value == arch:
            return True
        if isinstance(c, ast.Name) and arch in consts.get(c.id, []):
            return True
        if isinstance(c, ast.Compare) and isinstance(c.left, ast.Constant) \
                and isinstance(c.left.value, str) and c.left.value in arch \
                and _name(c.comparators[0]) == "model_arch":
            return True
    return False


def _module_lists(tree: ast.Module) -> dict[str, list[str]]:
    return {t.id: _strings(n.value) for n in tree.body if isinstance(n, ast.Assign)
            for t in n.targets if isinstance(t, ast.Name) and _strings(n.value)}


Blocks = list[tuple[str, list[ast.stmt], dict[str, list[str]]]]


def model_blocks(target: Target, arch: str) -> Blocks:
    """The code SGLang runs for `arch` before the generic default, in the order it runs:
    server_args.py's / model_hook.py's `if model_arch in [...]` blocks of the model-specific
    adjustments, then the registered overrides (overrides.py, model_overrides/*.py). Kept per
    architecture while the files are unchanged (each verdict asks twice; 18 ms a walk)."""
    rels = [SERVER_ARGS, MODEL_HOOK, OVERRIDES]
    d = target.file(MODEL_OVERRIDES_DIR)
    if d.is_dir():
        rels += [f"{MODEL_OVERRIDES_DIR}/{p.name}" for p in sorted(d.glob("*.py"))]
    return kept(_BLOCKS, (str(target.root), arch, tuple(rels)),
                lambda: _model_blocks(target, arch, rels))


_BLOCKS: dict = {}  # source.kept's


def _model_blocks(target: Target, arch: str, rels: list[str]) -> Blocks:
    out: Blocks = []
    for rel in rels:
        tree = parse_file(target.file(rel))
        if tree is None:
            continue
        file = target.relpath(target.file(rel))
        consts = _module_lists(tree)
        for fn in (n for n in walk_all(tree) if isinstance(n, ast.FunctionDef)):
            if _registered(fn, arch):
                out.append((file, fn.body, consts))
            elif "model_specific_adjustments" in fn.name:
                # the `if` itself (its test may hold more than the architecture), not its elifs
                out += [(file, [ast.If(n.test, n.body, [])], consts) for n in walk_all(fn)
                        if isinstance(n, ast.If) and _names_arch(n.test, arch, consts)]
    if arch == "DeepseekV4ForCausalLM":  # 0.5.12 - 0.5.14: the hook server_args.py calls
        tree = parse_file(target.file(DSV4_HOOK))
        for fn in (n for n in walk_all(tree) if isinstance(n, ast.FunctionDef)
                   and n.name == "apply_deepseek_v4_defaults") if tree is not None else ():
            out.append((target.relpath(target.file(DSV4_HOOK)), fn.body, {}))
    return out


def _model_candidates(target: Target, f: _Facts) -> list[Candidate]:
    out: list[Candidate] = []
    for file, body, consts in model_blocks(target, f.model.arch or ""):
        w = _Walk(f, file, returns=False)
        w.env.update({k: [(ast.List([ast.Constant(x) for x in v]), [])]
                      for k, v in consts.items()})
        w.block(body, [])
        if any(not c.conds for c in w.out):
            out = [c for c in out if c.field not in {x.field for x in w.out if not x.conds}]
        out += w.out
    return out


def default_fn(target: Target) -> tuple[str, ast.FunctionDef | ast.If] | None:
    """The generic default: the function (0.5.10+) or 0.5.9's inline `if
    self.attention_backend is None:` block in `_handle_attention_backend_compatibility`."""
    for rel, name in DEFAULT_FNS:
        tree = parse_file(target.file(rel))
        for fn in (n for n in walk_all(tree) if isinstance(n, ast.FunctionDef)
                   and n.name == name) if tree is not None else ():
            return target.relpath(target.file(rel)), fn
    tree = parse_file(target.file(SERVER_ARGS))
    for fn in (n for n in walk_all(tree) if isinstance(n, ast.FunctionDef)
               and n.name == "_handle_attention_backend_compatibility") if tree else ():
        for node in walk_all(fn):
            if isinstance(node, ast.If) and ast.unparse(node.test) == \
                    "self.attention_backend is None":
                return target.relpath(target.file(SERVER_ARGS)), node
    return None


# --------------------------------------------------------------------------- the choice


def forced(target: Target, platform: str, cfg: SpecConfig, model: Model) -> Choice | None:
    """A backend the model's override writes whatever `--attention-backend` says (DeepSeek-V4:
    dsv4), when it differs from the one given; None otherwise."""
    if not cfg.attention_backend or not model.arch:
        return None
    f = _Facts(platform, cfg, model, given=True)
    sure = [c for c in _model_candidates(target, f) if c.field == MAIN and not c.conds
            and c.backend]
    if not sure or sure[-1].backend == cfg.attention_backend:
        return None
    c = sure[-1]
    return Choice([c], "forced", f"{model.arch} runs {c.backend} whatever --attention-backend "
                                 f"says (the model's override, {c.where})")


def resolve_backend(target: Target, platform: str, cfg: SpecConfig, model: Model) -> Choice:
    """The attention backend SGLang runs for `cfg` on `platform`: forced by the model, given,
    the model's own default, else the generic default (candidates where no input decides)."""
    f = forced(target, platform, cfg, model)
    if f is not None:
        return f
    if cfg.attention_backend:
        return Choice([Candidate(cfg.attention_backend, Where("--attention-backend", 0))],
                      "given", f"--attention-backend {cfg.attention_backend}")
    facts = _Facts(platform, cfg, model, given=False)
    own = _model_candidates(target, facts) if model.arch else []
    own_main = [c for c in own if c.field == MAIN]
    sure = [c for c in own_main if not c.conds]
    if sure:
        c = sure[-1]
        extra = [x for x in own if x.field != MAIN]
        return Choice([c, *extra], "model default",
                      f"SGLang's default for {model.arch}: {c.backend} (the model's override, "
                      f"{c.where})")
    generic = _generic(target, facts)
    if own:
        otherwise = "the model's override does not set it"
        # the override runs first: a generic pick whose conditions include all of an override's
        # is never reached (DeepSeek-V3 on SM100: trtllm_mla, not the generic flashinfer)
        cands = own + [Candidate(c.backend, c.where, [otherwise, *c.conds], c.field)
                       for c in generic if not any(set(o.conds) <= set(c.conds)
                                                   for o in own_main)]
        return Choice(cands, "model default", f"SGLang's default for {model.arch} on "
                                              f"{platform.upper()}: the model's override "
                                              f"({own[0].where}) decides it under a condition, "
                                              "else the generic default")
    what = model.arch or "a model not given"
    one = {c.backend for c in generic}
    pick = f": {one.pop()}" if len(one) == 1 and all(not c.conds for c in generic) else ""
    cite = generic[0].where if generic else None
    return Choice(generic, "default", f"SGLang's default attention backend for {what} on "
                                      f"{platform.upper()}{pick} ({cite})")


def _generic(target: Target, f: _Facts) -> list[Candidate]:
    found = default_fn(target)
    if found is None:
        return []
    file, node = found
    w = _Walk(f, file, returns=True)
    w.block(node.body, [])
    return w.out

def audited_backend(target: Target, platform: str, cfg: SpecConfig) -> tuple[str | None, str]:
    """The attention backend whose classes are audited, and why when it is not the one given:
    the backend SGLang runs, as the per-phase verdicts read it (DeepSeek-V4
    runs dsv4 whatever --attention-backend says; without it, SGLang's default for the model
    and platform when one backend is decided). The sync census and the fixes' applicability
    read it, so they audit the backend the verdicts audit; the verdicts themselves also keep the
    candidates when no input decides one (phases.audited_verdicts)."""
    if not cfg.model:
        return cfg.attention_backend, ""
    try:
        choice = resolve_backend(target, platform, cfg, read_model(target, cfg.model))
    except (ValueError, OSError):  # a model diagnose already reports as unreadable
        return cfg.attention_backend, ""
    if choice.backend is None or choice.how == "given":
        return cfg.attention_backend, ""
    return choice.backend, choice.why


