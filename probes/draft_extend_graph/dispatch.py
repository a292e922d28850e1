"""Worker-side fallbacks: where the worker that runs a phase asks the phase's runner whether it
can replay, and what else sends the pass eager although a graph was captured.

Why: the runner's own replay test (`fallbacks`) is not the whole story. The caller decides too:
its gate also needs the runner to exist and may test more (0.5.23 model_executor/
model_runner.py:1991 `can_run_graph = bool(mode_check() and self.decode_cuda_graph_runner and
...can_run_graph(forward_batch))`); a worker may force its flag to False afterwards (0.5.23
speculative/eagle_worker_v2.py:673, the draft-decode graph skipped while a DSA draft has no
seeded top-k yet); adaptive speculation swaps each phase's runner for the active state's
(0.5.23 eagle_worker_v2.py:1884, :1892, :1897); with DP attention, the spec/prefill
coordination plan clears the batch's replay flag per stage (0.5.23 eagle_worker_v2.py:1644,
:1653, :1668); a prefill batch's draft extend never reaches the draft-extend runner (0.5.23
eagle_worker_v2.py:1423). Each is found by its shape in the files of the worker that runs (v1 or v2, one-
or multi-layer) and in the helpers that worker reaches by name, never by a line kept here.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from diag.probes.draft_extend_graph.fallbacks import DECLINED, Fallback, and_parts
from diag.probes.gate import env_bool
from diag.probes.source import parse_file, parse_pruned, unparse, walk_all
from diag.target import Target

MODEL_RUNNER = "srt/model_executor/model_runner.py"
V2_WORKER = "srt/speculative/eagle_worker_v2.py"
V1_WORKER = "srt/speculative/eagle_worker.py"
MULTI_V2_WORKER = "srt/speculative/multi_layer_eagle_worker_v2.py"
MULTI_V1_WORKER = "srt/speculative/multi_layer_eagle_worker.py"
# the Gemma4 assistant draft's worker (both files in 0.5.12 - 0.5.13.post1, v2 only from 0.5.14)
FROZEN_V1_WORKER = "srt/speculative/frozen_kv_mtp_worker.py"
FROZEN_V2_WORKER = "srt/speculative/frozen_kv_mtp_worker_v2.py"
# module-level or mixin helpers the v2 workers call (0.5.9 eagle_info_v2.py:177 `prepare_for_
# v2_draft`; 0.5.14 base_spec_worker.py:159; 0.5.19 eagle_worker_common.py:194; 0.5.23
# eagle_utils.py:401 `eagle_prepare_for_verify`)
V2_HELPERS = ("srt/speculative/eagle_utils.py", "srt/speculative/eagle_info_v2.py",
              "srt/speculative/base_spec_worker.py", "srt/speculative/eagle_worker_common.py")
ENVIRON = "srt/environ.py"
LIMIT = 400  # characters of a condition's words
ASKS = ("can_run_graph", "can_run")
EXTEND_RUNNER_ATTR = "cuda_graph_runner_for_draft_extend"
# where a DP rank casts its replay vote (0.5.9 managers/scheduler_dp_attn_mixin.py, then
# managers/scheduler_components/dp_attn.py)
DP_VOTE_FILES = ("srt/managers/scheduler_components/dp_attn.py",
                 "srt/managers/scheduler_dp_attn_mixin.py")
# the coordination plan's stage names (0.5.23 eagle_worker_v2.py:1644 "draft", :1653 "target",
# :1668 "draft_extend")
PLAN_STAGES = {"target": "target-verify", "draft": "draft-decode",
               "draft_extend": "draft-extend"}
_FLAG = re.compile(r"can_(run|cuda)")


def worker_files(worker: str, multi: bool, frozen: bool = False) -> tuple[str, ...]:
    """The worker file that runs (FROZEN_KV_MTP's own worker where `frozen`), then the helpers
    it may reach (the v2 workers' only)."""
    if worker == "v1":
        return (FROZEN_V1_WORKER if frozen else MULTI_V1_WORKER if multi else V1_WORKER,)
    return (FROZEN_V2_WORKER if frozen else MULTI_V2_WORKER if multi else V2_WORKER,) \
        + V2_HELPERS


def worker_fallbacks(target: Target, phase: str, worker: str, multi: bool,
                     dp_attention: bool | None = None, env: dict[str, str] | None = None,
                     frozen: bool = False, adaptive: bool | None = None,
                     params: dict | None = None, topk: int | None = None) -> list[Fallback]:
    """The caller gates, overrides, runner swaps and coordination stages of `phase` in the
    worker that runs (and the target's ModelRunner for target-verify), then for draft-extend
    the prefill route; each kind in file and line order.
    The coordination stages run only with DP attention and their switch on: `dp_attention`
    False, or the switch off in `env` (the server's environment; None: not known), drops
    them; the runner swaps happen only with `--speculative-adaptive` (`adaptive` False drops
    them, None names the switch; SGLang itself turns it off for a `topk` other than 1 or with
    DP attention). `params`: the model's config parameters (None: no model given); an override
    whose switch needs a parameter the model lacks is dropped."""
    out: list[Fallback] = []
    if phase == "target-verify":
        out += _gates(target, MODEL_RUNNER, phase, None)
    files = worker_files(worker, multi, frozen)
    if not target.file(files[0]).is_file() and frozen and worker == "v1":
        files = worker_files("v2", multi, frozen)  # 0.5.14 on: the v2 frozen worker only
    reached = _reached(target, files)
    if frozen and phase == "target-verify" and files[0] == FROZEN_V2_WORKER and \
            _subclasses(target, files[0], "EAGLEWorkerV2"):
        # the frozen worker verifies through the EAGLE v2 worker it extends (0.5.23
        # frozen_kv_mtp_worker_v2.py:59 imports EAGLEWorkerV2; its `verify` is inherited)
        reached |= _reached(target, (V2_WORKER,) + files[1:])
    for rel in files:
        out += _gates(target, rel, phase, None if rel == files[0] else reached)
    out += _overrides(target, files[0], phase, params)
    if adaptive is not False and not adaptive_turned_off(target, topk, dp_attention):
        out += _swaps(target, files[0], phase, adaptive)
    if dp_attention is not False:
        out += _plan_stages(target, files[0], phase, env)
    if phase in ("draft-extend", "target-verify"):
        out += _prefill_route(target, files[0], phase)
    seen: set[tuple[str, int]] = set()
    return [f for f in out if not ((f.file, f.line) in seen or seen.add((f.file, f.line)))]


# --------------------------------------------------------------------------- reading


def _functions(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef]]:
    """Every function of a module with its qualified name (Class.method or name)."""
    for node in tree.body if isinstance(tree, ast.Module) else ():
        if isinstance(node, ast.FunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for m in node.body:
                if isinstance(m, ast.FunctionDef):
                    yield f"{node.name}.{m.name}", m


def _called_names(fn: ast.AST) -> set[str]:
    names = set()
    for n in walk_all(fn):
        if isinstance(n, ast.Call):
            f = n.func
            names.add(f.attr if isinstance(f, ast.Attribute) else
                      f.id if isinstance(f, ast.Name) else "")
    return names


def _reached(target: Target, files: tuple[str, ...]) -> set[str]:
    """The helper functions the worker file calls by name, and those they call in turn."""
    main = parse_file(target.file(files[0]))
    if main is None:
        return set()
    helpers = {name.rsplit(".", 1)[-1]: fn for rel in files[1:]
               if (tree := parse_file(target.file(rel))) is not None
               for name, fn in _functions(tree)}
    todo, reached = list(_called_names(main)), set()
    while todo:
        name = todo.pop()
        if name in helpers and name not in reached:
            reached.add(name)
            todo += _called_names(helpers[name])
    return reached


def _subclasses(target: Target, rel: str, base: str) -> bool:
    tree = parse_file(target.file(rel))
    return tree is not None and any(
        isinstance(c, ast.ClassDef) and any(unparse(b) == base for b in c.bases)
        for c in walk_all(tree))


def _phase_of(receiver: str, fn_name: str, rel: str) -> str | None:
    """The phase whose runner `receiver` is (the ModelRunner's own runner, the target worker's,
    the draft-extend runner, or the draft runner a helper is handed)."""
    low = receiver.lower()
    if any(w in low for w in ("backend", "prefill", "piecewise", "dual_gemm", "runners[")):
        return None
    if rel == MODEL_RUNNER or "target_worker" in receiver:
        return "target-verify" if rel == MODEL_RUNNER or "model_runner" in receiver else None
    if EXTEND_RUNNER_ATTR in receiver:
        return "draft-extend"
    if receiver.endswith("cuda_graph_runner"):
        return "draft-extend" if "extend" in fn_name.rsplit(".", 1)[-1] else "draft-decode"
    return None


def _statement_of(fn: ast.FunctionDef, node: ast.AST) -> ast.stmt | None:
    """The innermost simple statement of `fn` that holds `node`."""
    best = None
    for st in walk_all(fn):
        if isinstance(st, (ast.Assign, ast.AnnAssign, ast.If, ast.Return, ast.Expr)) and \
                st.lineno <= node.lineno <= (st.end_lineno or st.lineno) and \
                any(n is node for n in walk_all(st.test if isinstance(st, ast.If) else st)):
            if best is None or st.lineno >= best.lineno:
                best = st
    return best


def _gates(target: Target, rel: str, phase: str, reached: set[str] | None) -> list[Fallback]:
    """The statements of `rel` that ask `phase`'s runner (in the functions reached, for a
    helper file). Only functions that name a test are read: the others are not parsed."""
    tree = parse_pruned(target.file(rel), ASKS)
    if tree is None:
        return []
    out = []
    for name, fn in _functions(tree):
        if reached is not None and name.rsplit(".", 1)[-1] not in reached:
            continue
        for call in walk_all(fn):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and
                    call.func.attr in ASKS):
                continue
            receiver = unparse(call.func.value)
            if _phase_of(receiver, name, rel) != phase:
                continue
            st = _statement_of(fn, call)
            if st is None:
                continue
            code = _one_line(st.test if isinstance(st, ast.If) else st)
            out.append(Fallback(
                f"{name}'s test is false (no runner, or the runner declines): {code}"[:LIMIT],
                DECLINED, target.relpath(target.file(rel)), st.lineno))
    return out


def _overrides(target: Target, rel: str, phase: str, params: dict | None = None
               ) -> list[Fallback]:
    """`if <flag> and <cond>: <flag> = False` after a gate: the pass runs eager when <cond>;
    not where a switch <cond> reads needs a config parameter the model lacks (`params`)."""
    tree = parse_file(target.file(rel))
    if tree is None:
        return []
    out = []
    for name, fn in _functions(tree):
        fn_phase = _function_phase(fn, name)
        if fn_phase != phase:
            continue
        for st in walk_all(fn):
            if not isinstance(st, ast.If):
                continue
            for a in st.body:
                if isinstance(a, ast.Assign) and len(a.targets) == 1 and \
                        isinstance(a.targets[0], ast.Name) and _FLAG.search(a.targets[0].id) \
                        and isinstance(a.value, ast.Constant) and a.value.value is False:
                    flag = a.targets[0].id
                    if params is not None and _needs(tree, st.test) - set(params):
                        continue  # 0.5.19 eagle_worker_v2.py:267-269: no index_topk, no seed
                    rest = [v for v in and_parts(st.test)
                            if not (isinstance(v, ast.Name) and v.id == flag)]
                    cond = " and ".join(_one_line(v) for v in rest) or _one_line(st.test)
                    cond += _set_at(tree, rel, st.test)
                    out.append(Fallback(f"{cond} ({name} turns the graph off)"[:LIMIT],
                                        DECLINED, target.relpath(target.file(rel)), st.lineno))
    return out


def _function_phase(fn: ast.FunctionDef, name: str) -> str | None:
    """The phase a worker method's replay flag belongs to: the runner it asks or hands on."""
    attrs = [n for n in walk_all(fn) if isinstance(n, ast.Attribute)]
    if any(n.attr == EXTEND_RUNNER_ATTR for n in attrs):
        return "draft-extend"
    if any(n.attr == "cuda_graph_runner" and isinstance(n.value, ast.Name)
           and n.value.id == "self" for n in attrs):
        return "draft-decode"
    return None


def _swaps(target: Target, rel: str, phase: str, adaptive: bool | None) -> list[Fallback]:
    """A runner replaced at run time by an adaptive state's (`x.<runner> = state.<...>`)."""
    tree = parse_file(target.file(rel))
    if tree is None or "speculative_adaptive" not in _text(target, rel):
        return []
    # the target's runner is `graph_runner` up to 0.5.13.post1 (0.5.11 eagle_worker.py:327)
    attrs = {"target-verify": ("decode_cuda_graph_runner", "graph_runner"),
             "draft-decode": ("cuda_graph_runner",),
             "draft-extend": (EXTEND_RUNNER_ATTR,)}[phase]
    out = []
    for name, fn in _functions(tree):
        for st in walk_all(fn):
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and \
                    isinstance(st.targets[0], ast.Attribute) and st.targets[0].attr in attrs \
                    and (phase != "target-verify" or
                         "model_runner" in unparse(st.targets[0].value)) \
                    and isinstance(st.value, ast.Attribute) and \
                    isinstance(st.value.value, ast.Name) and st.value.value.id == "state":
                out.append(Fallback(
                    ("the active adaptive state has no runner ("
                     + ("" if adaptive else "only with --speculative-adaptive: ")
                     + f"{name} swaps it in, {_one_line(st)})")[:LIMIT],
                    "no-runner", target.relpath(target.file(rel)), st.lineno))
    return out


ADAPTIVE_PARAMS = "srt/speculative/adaptive_spec_params.py"


def adaptive_turned_off(target: Target, topk: int | None, dp_attention: bool | None) -> bool:
    """SGLang turns `--speculative-adaptive` off at start for a topk other than 1 and with
    attention DP (0.5.23 speculative/adaptive_spec_params.py:75-79 and :80-84, the reasons
    `_maybe_disable_adaptive` logs, called from arg_groups/speculative_hook.py:261; 0.5.19
    `adaptive_unsupported_reason` :64-73): then no runner is ever swapped."""
    text = _text(target, ADAPTIVE_PARAMS)
    return ((topk is not None and topk != 1 and "speculative_eagle_topk != 1" in text
             and "only topk=1 is supported" in text)
            or (dp_attention is True and re.search(
                r"(attention DP|enable_dp_attention=True) is not supported", text) is not None))


def _prefill_route(target: Target, rel: str, phase: str = "draft-extend") -> list[Fallback]:
    """The branch of `forward_batch_generation` that takes a prefill batch (0.5.23
    eagle_worker_v2.py:1423 `if batch.forward_mode.is_extend() or batch.is_extend_in_batch:`):
    the draft's extend over the new prompt runs through the draft model runner's forward
    (`_draft_extend_for_prefill`; v1 `forward_draft_extend`), never the draft-extend runner.
    For target-verify: with `--enable-mixed-chunk` (EAGLE keeps it, 0.5.23 spec_info.py:147-157)
    the running requests join a prefill batch, and the target runs one extend forward for them
    that step, not its TARGET_VERIFY graph. The live counters do not count either (`runtime`),
    so the reason is `prefill`, not theirs."""
    tree = parse_file(target.file(rel))
    if tree is None:
        return []
    for name, fn in _functions(tree):
        if name.rsplit(".", 1)[-1] != "forward_batch_generation":
            continue
        for st in walk_all(fn):
            if isinstance(st, ast.If) and "is_extend()" in unparse(st.test):
                words = (f"the batch is a prefill ({_one_line(st.test)}): {name} runs its draft "
                         "extend through the draft model's own forward, never the draft-extend "
                         "runner (not counted live)") if phase == "draft-extend" else (
                    f"only with --enable-mixed-chunk: running requests joined to a prefill "
                    f"batch ({_one_line(st.test)}) get the target's extend forward that step, "
                    f"not its TARGET_VERIFY graph ({name}; not counted live)")
                return [Fallback(words[:LIMIT], "prefill", target.relpath(target.file(rel)),
                                 st.lineno)]
    return []


def _plan_stages(target: Target, rel: str, phase: str, env: dict[str, str] | None
                 ) -> list[Fallback]:
    """The DP spec/prefill coordination plan applied to the batch before a stage: it may clear
    the batch's replay flags (only with DP attention and the coordination switch)."""
    tree = parse_file(target.file(rel))
    if tree is None:
        return []
    m = re.search(r"envs\.(SGLANG_\w*COORDINATION\w*)", _text(target, rel))
    if m and env is not None and not _switch_on(target, m.group(1), env):
        return []
    out = []
    for name, fn in _functions(tree):
        for call in walk_all(fn):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and \
                    call.func.attr == "apply" and unparse(call.func.value) == "plan" and \
                    len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) and \
                    PLAN_STAGES.get(call.args[1].value) == phase:
                switch = f"{m.group(1)}=1" if m else None
                out.append(Fallback(
                    f"the DP spec/prefill coordination plan marks the batch unable to replay "
                    f"({name}: {_one_line(call)}) (only with --enable-dp-attention"
                    + (f" and {switch}" if switch else "") + ")",
                    DECLINED, target.relpath(target.file(rel)), call.lineno))
    return out


def _switch_on(target: Target, name: str, env: dict[str, str]) -> bool:
    """An `EnvBool` switch as the engine reads it from `env`, its default read from the
    release's environ.py (0.5.23 :1558 `SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION =
    EnvBool(False)`); on where the default cannot be read."""
    try:
        text = target.file(ENVIRON).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True
    d = re.search(rf"^\s*{name}\s*=\s*EnvBool\((True|False)\)", text, re.M)
    if d is None:
        return True
    return env_bool(env.get(name), d.group(1) == "True")


def _self_assign(tree: ast.AST, attr: str) -> ast.Assign | None:
    return next((st for st in walk_all(tree) if isinstance(st, ast.Assign) and any(
        isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
        and t.value.id == "self" for t in st.targets)), None)


def _needs(tree: ast.AST, cond: ast.AST) -> set[str]:
    """The model config parameters a condition's switches need: `self.s = (... and self.p is
    not None)` with `self.p = getattr(hf_config, "P", None)` needs P (0.5.19 eagle_worker_v2.py
    :266-269, `seed_dsa_topk_from_draft_extend` needs `index_topk`), also through a value that
    is None unless a test holds (`self.w = (f(c) if ... and self.p is not None else None)`,
    0.5.23 :313-321)."""
    out: set[str] = set()
    for sw in {n.attr for n in walk_all(cond) if isinstance(n, ast.Attribute)
               and isinstance(n.value, ast.Name) and n.value.id == "self"}:
        st = _self_assign(tree, sw)
        if st is not None:
            out |= _not_none_needs(tree, st.value, 0)
    return out


def _not_none_needs(tree: ast.AST, expr: ast.AST, depth: int) -> set[str]:
    """Parameters the `and` operands `self.p is not None` of `expr` need (see `_needs`)."""
    out: set[str] = set()
    for part in and_parts(expr) if depth < 4 else ():
        if not (isinstance(part, ast.Compare) and len(part.ops) == 1
                and isinstance(part.ops[0], ast.IsNot)
                and isinstance(part.comparators[0], ast.Constant)
                and part.comparators[0].value is None
                and isinstance(part.left, ast.Attribute)
                and isinstance(part.left.value, ast.Name) and part.left.value.id == "self"):
            continue
        src = _self_assign(tree, part.left.attr)
        v = src.value if src is not None else None
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "getattr" \
                and len(v.args) == 3 and isinstance(v.args[1], ast.Constant) \
                and isinstance(v.args[1].value, str) and isinstance(v.args[2], ast.Constant) \
                and v.args[2].value is None and "config" in _one_line(v.args[0]):
            out.add(v.args[1].value)
        elif isinstance(v, ast.IfExp) and isinstance(v.orelse, ast.Constant) \
                and v.orelse.value is None:
            out |= _not_none_needs(tree, v.test, depth + 1)
    return out


def _set_at(tree: ast.AST, rel: str, cond: ast.AST) -> str:
    """Where each `self.<switch>` a condition reads is set in the worker (`self.x = ...`), for
    the words: what decides it is the model's or the server's."""
    said = []
    for attr in dict.fromkeys(n.attr for n in walk_all(cond) if isinstance(n, ast.Attribute)
                              and isinstance(n.value, ast.Name) and n.value.id == "self"):
        st = _self_assign(tree, attr)
        if st is not None:
            said.append(f"self.{attr} = {_one_line(st.value)} at {rel.rsplit('/', 1)[-1]}:"
                        f"{st.lineno}")
    return f" [{'; '.join(said)}]" if said else ""


def _one_line(node: ast.AST) -> str:
    return " ".join(unparse(node).split())


def _text(target: Target, rel: str) -> str:
    """A file's text, for a textual test (a switch's name): no unparse of the whole module."""
    try:
        return target.file(rel).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def vote_sources(target: Target) -> dict[str, tuple[str, str, int]]:
    """What makes one DP rank vote against replaying, by the batch flag the runner reads
    ("decode" | "draft" -> (words, file, line)): the decode vote (`can_run_decode_cuda_graph`,
    `can_run_dp_cuda_graph` up to 0.5.17) is no unless the rank's batch is decode or idle
    (0.5.23 dp_attn.py:377, 0.5.9 scheduler_dp_attn_mixin.py:164); the draft vote
    (`can_run_dp_draft_cuda_graph`) is no where the rank's speculative input is not
    graph-compatible (0.5.23 dp_attn.py:99)."""
    rel = next((r for r in DP_VOTE_FILES if target.file(r).is_file()), None)
    tree = parse_file(target.file(rel)) if rel else None
    if tree is None:
        return {}
    where = target.relpath(target.file(rel))
    out = {}
    for attr, needle, words in (
            ("decode", "is_decode_or_idle", "a rank votes no unless its batch is decode or "
                                            "idle (one rank prefilling sends every rank eager)"),
            ("draft", "cuda_graph_compatible", "a rank votes no where its speculative input "
                                               "is not graph-compatible")):
        st = _innermost_statement(tree, needle)
        if st is not None:
            if attr == "decode" and "is_prebuilt" in unparse(st):
                words = words.replace("decode or idle", "decode, idle or prebuilt")
            out[attr] = (words, where, st.lineno)
    return out


def _innermost_statement(tree: ast.AST, needle: str) -> ast.stmt | None:
    """The innermost statement whose text first holds an attribute named `needle`."""
    hit = next((n for n in walk_all(tree) if isinstance(n, ast.Attribute) and n.attr == needle),
               None)
    if hit is None:
        return None
    best = None
    for st in walk_all(tree):
        if isinstance(st, ast.stmt) and not isinstance(st, (ast.FunctionDef, ast.ClassDef,
                                                             ast.If, ast.For, ast.While,
                                                             ast.With, ast.Try)) and \
                st.lineno <= hit.lineno <= (st.end_lineno or st.lineno) and \
                (best is None or st.lineno >= best.lineno):
            best = st
    return best
