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

from contextvars import ContextVar
from dataclasses import dataclass, field, replace

from diag.context import SpecConfig
from diag.probes import backends
from diag.probes import gate as gate_mod
from diag.probes.draft_extend_graph.dispatch import vote_sources, worker_fallbacks
from diag.probes.draft_extend_graph.fallbacks import (  # noqa: F401  (re-exported)
    DP_VOTE,
    Facts,
    Fallback,
    runner_fallbacks,
)
from diag.probes.startup import default_backend
from diag.probes.startup.auto_steps import auto_steps, missing_topk
from diag.probes.startup.draft_tokens import missing_draft_tokens
from diag.probes.startup.frozen_kv_mtp import V1_WORKER, frozen_kv_mtp, v1_seed, worker_facts
from diag.probes.startup.refusals import (  # noqa: F401  (re-exported)
    BACKEND_TOPK_GUARD,
    DEPENDS,
    EAGER,
    GRAPH,
    NO_PASS,
    REFUSED,
    SPEC_HOOK,
    extend_topk_guard,
    only_starting_topk,
    refusal,
)
from diag.probes.startup.refused_start import at_start, gate_for  # noqa: F401  (re-exported)
from diag.probes.startup.resolve import (  # noqa: F401  (re-exported)
    BACKEND_PAGE,
    DSA_UTILS,
    DSV2_OVERRIDES,
    DSV4_HOOK,
    DSV4_OVERRIDES,
    FAMILIES,
    FAMILY_PARAMS,
    IMPLIED_MODEL,
    MODEL_CONFIG,
    MODEL_HOOK,
    OVERRIDES,
    Model,
    PageSize,
    Where,
    env_of,
    find_first,
    find_line,
    multi_layer,
    multi_layer_archs,
    read_model,
    resolve_page_size,
)
from diag.target import Target

# Attention backends that run on AMD GPUs; the HIP table lists these only. In sglang 0.5.23:
# the HIP gate's classes (srt/speculative/eagle_worker_v2.py:560-564) come from aiter, dsv4 (HIP
# branch at srt/layers/attention/attention_registry.py:185), dsa/nsa and qsa (registry :127,
# :177, :150, :166, :157); wave (:134) is AMD's and triton (:206) runs on HIP too.
HIP_BACKENDS = ("aiter", "wave", "dsv4", "dsa", "nsa", "qsa", "triton")

PHASES = ("target-verify", "draft-decode", "draft-extend")
MODES = (GRAPH, EAGER, REFUSED, DEPENDS, NO_PASS)
UNDER_AUDIT = "under audit"

DRAFT_RUNNER = "srt/speculative/eagle_draft_cuda_graph_runner.py"
EXTEND_RUNNER = "srt/speculative/eagle_draft_extend_cuda_graph_runner.py"
VERIFY_RUNNER = "srt/model_executor/runner/decode_cuda_graph_runner.py"
# the target's decode runner before model_executor/runner/ (0.5.9 - 0.5.13.post1; 0.5.9
# model_executor/cuda_graph_runner.py:287 captures TARGET_VERIFY, `can_run` at :385)
OLD_VERIFY_RUNNER = "srt/model_executor/cuda_graph_runner.py"
# the multi-layer worker's draft-extend runner (MultiLayerEagleDraftExtendCudaGraphRunner, the
# first replay test of the file; its multi-step wrapper asks runners[0]: 0.5.23 :976-977) and
# the FROZEN_KV_MTP worker's draft runner (0.5.23 frozen_kv_mtp_worker_v2.py:399)
MULTI_EXTEND_RUNNER = "srt/speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py"
FROZEN_RUNNER = "srt/speculative/frozen_kv_mtp_cuda_graph_runner.py"



@dataclass
class PhaseVerdict:
    phase: str
    backend: str
    mode: str  # graph | eager | refused | depends | none (no such pass)
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


# --------------------------------------------------------------------------- runtime fallbacks


# set by `start_refused_verdict`: the modes alone are asked for, so no runtime fallback is read
# (they are most of a verdict's cost, and a refusal comes before any of them)
_MODES_ONLY: ContextVar[bool] = ContextVar("modes_only", default=False)


def fallbacks(target: Target, rel: str, cfg: SpecConfig, arch: str | None = None,
              worker: tuple[str, str, bool] | None = None, frozen: bool = False,
              params: dict | None = None) -> list[Fallback]:
    """The runner's fallbacks that can happen under `cfg` (`fallbacks.runner_fallbacks`): the
    data-parallel vote only with DP attention (`require_mlp_sync()` is false without it); then,
    for `worker` (phase, "v1"|"v2", multi-layer), the worker's own (`dispatch`; `params`, the
    model's config parameters, drop an override a switch of the model's config rules out)."""
    if _MODES_ONLY.get():
        return []
    out = runner_fallbacks(target, rel, Facts(cfg.speculative_algorithm, arch))
    if cfg.enable_dp_attention is False:
        out = [f for f in out if not f.condition.startswith(DP_VOTE)]
    else:
        w = find_line(target, "srt/utils/common.py", r"def require_mlp_sync")
        only = (" (only with --enable-dp-attention: require_mlp_sync()" + (f", {w})" if w else ")")
                if cfg.enable_dp_attention is None else "")
        sources = vote_sources(target)
        for f in list(out):
            if f.condition.startswith(DP_VOTE):
                f.condition += only
                src = sources.get("draft" if "draft" in f.condition else "decode")
                if src is not None and not any((g.file, g.line) == src[1:] for g in out):
                    # where each rank casts the vote the runner reads
                    out.append(Fallback(f"{DP_VOTE}: {src[0]}{only}", f.reason, *src[1:]))
    if worker is not None:
        out += worker_fallbacks(target, *worker, dp_attention=cfg.enable_dp_attention,
                                env=cfg.environ, frozen=frozen,
                                adaptive=cfg.speculative_adaptive, params=params,
                                topk=cfg.speculative_eagle_topk)
    return out


# --------------------------------------------------------------------------- the verdicts


def phase_verdicts(target: Target, platform: str, cfg: SpecConfig, backend: str,
                   gate: gate_mod.GateInfo | None = None,
                   config_label: str = UNDER_AUDIT,
                   _multi: tuple[bool, str] | None = None) -> list[PhaseVerdict]:
    """target-verify, draft-decode and draft-extend for `backend` under `cfg` (`_multi`: the
    worker decided by the caller, when the algorithm left it open). Where one value of an input
    not given is the only one SGLang starts with (`only_starting_topk`), the phases are that
    value's, the reason saying so; where the steps are not given, those SGLang picks or its
    refusal to start (`auto_steps`)."""
    model = read_model(target, cfg.model or IMPLIED_MODEL.get(backend))
    auto = auto_steps(target, cfg, model) if _multi is None else None
    if auto is not None and auto.chosen is not None:  # the server runs SGLang's own choice
        steps, topk, tokens = auto.chosen
        out = phase_verdicts(target, platform, replace(
            cfg, speculative_num_steps=steps, speculative_eagle_topk=topk,
            speculative_num_draft_tokens=tokens), backend, None, config_label)
        if not all(pv.mode == REFUSED for pv in out):
            for pv in out:
                pv.reason += f" [{auto.words}]"
            return out
        # SGLang's own choice does not start: a server that runs was given the three (the
        # topk rules below say `depends` on it)
        refused_choice = f"{auto.words}, which does not start ({out[0].reason[:200]}): " \
                         f"read as a server given them"
    only = only_starting_topk(target, cfg, model)
    notes: list[str] = [n for n in [missing_draft_tokens(target, cfg)] if n]
    if frozen_kv_mtp(target, cfg)[0] is False and (m := missing_topk(target, cfg, model)):
        notes.append(m)  # said next to the verdicts: a server that runs was given topk
    if auto is not None and auto.chosen is not None:
        notes.append(refused_choice)
    if auto is not None and auto.refused is not None:  # unless refused before (or anyway)
        out = _phase_verdicts(target, platform, cfg, backend, gate, config_label, _multi,
                              notes)
        if all(pv.mode == REFUSED for pv in out):
            return out
        return [PhaseVerdict(p, backend, REFUSED, auto.words, auto.refused, config_label, [])
                for p in PHASES]
    if only is None:
        out = _phase_verdicts(target, platform, cfg, backend, gate, config_label, _multi,
                              notes)
    else:  # the gate read again for topk 1 (the worker a release picks may follow the topk)
        out = _phase_verdicts(target, platform, replace(cfg, speculative_eagle_topk=1),
                              backend, None, config_label, _multi, notes)
        notes.insert(0, only[0])
    for pv in out:
        for note in notes:
            if note not in pv.reason:
                pv.reason += f" [{note}]"
    return out


def _phase_verdicts(target: Target, platform: str, cfg: SpecConfig, backend: str,
                    gate: gate_mod.GateInfo | None, config_label: str,
                    _multi: tuple[bool, str] | None, notes: list[str]) -> list[PhaseVerdict]:
    env = env_of(cfg)
    model = read_model(target, cfg.model or IMPLIED_MODEL.get(backend))
    implied = (f" [model family implied by --attention-backend {backend}: {model.arch}; "
               "--model overrides]" if not cfg.model and backend in IMPLIED_MODEL else "")
    page = resolve_page_size(target, platform, cfg, model, env, backend,
                             env_given=cfg.environ is not None)
    gate = gate or gate_for(target, cfg)
    info = backends.backend_map(target, platform, mla=model.mla).get(backend)

    def out(phase: str, mode: str, reason: str, where: Where | None = None,
            fallbacks: list[Fallback] | None = None) -> PhaseVerdict:
        return PhaseVerdict(phase, backend, mode, reason, where, config_label,
                            fallbacks or [])

    # what the start does before any phase runs (probes.startup.refused_start, which the sync
    # census reads too)
    ref = at_start(target, platform, cfg, backend, model, page, gate, notes)
    if ref is not None:
        return [out(p, ref[0], ref[1] + implied, ref[2]) for p in PHASES]
    frozen, frozen_why = frozen_kv_mtp(target, cfg)
    if cfg.disable_cuda_graph:
        no_extend, none_why = (worker_facts(target)[0] if frozen else None), ""
        if no_extend is not None:
            none_why = f"the frozen draft has no draft-extend forward ({no_extend})"
        elif frozen and (v1 := v1_seed(target)) is not None and v1[0] == NO_PASS:
            none_why, no_extend = v1[1], v1[2]
        return [out(p, NO_PASS, f"{frozen_why}: {none_why}", no_extend)
                if no_extend is not None and p == "draft-extend" else
                out(p, EAGER, "CUDA graphs disabled (--disable-cuda-graph)") for p in PHASES]
    steps = cfg.speculative_num_steps
    multi, multi_why = _multi or multi_layer(target, cfg, model)
    if multi is None:  # the algorithm decides the worker: both answers, if they differ
        on = phase_verdicts(target, platform, cfg, backend, gate, config_label,
                            (True, multi_why))
        off = phase_verdicts(target, platform, cfg, backend, gate, config_label, (False, ""))
        return [a if (a.mode, a.reason) == (b.mode, b.reason) else out(
            a.phase, DEPENDS, f"with --speculative-algorithm EAGLE {multi_why}: {a.mode} ("
                              f"{a.reason.removeprefix(multi_why).lstrip(':; ')}); with NEXTN: "
                              f"{b.mode} ({b.reason})", a.where)
            for a, b in zip(on, off)]
    verdicts = []
    # the model's config parameters, when known (a DSA or DeepSeek-V4 model: its indexer's,
    # `index_topk`, whatever the family name gives)
    mp = model.params if model.arch and not (model.dsa or model.dsv4) else None
    # target-verify: the target's decode runner captures TARGET_VERIFY when speculating
    vr = VERIFY_RUNNER if target.file(VERIFY_RUNNER).is_file() else OLD_VERIFY_RUNNER
    w = find_line(target, vr, r"capture_forward_mode = ForwardMode\.TARGET_VERIFY")
    verdicts.append(out("target-verify", GRAPH,
                        f"the target's decode graph runner captures TARGET_VERIFY ({w})"
                        if w else "the target's decode graph runner (capture line not found)",
                        w, fallbacks(target, vr, cfg, model.arch,
                                     None if frozen is None else
                                     ("target-verify", gate.worker, bool(multi)),
                                     frozen=bool(frozen), params=mp)))
    if frozen is not False:  # a Gemma4 assistant draft: FROZEN_KV_MTP with EAGLE or NEXTN
        return verdicts + _frozen(target, cfg, frozen, frozen_why, out,
                                  fallbacks(target, FROZEN_RUNNER, cfg, model.arch,
                                            None if frozen is None else
                                            ("draft-decode", gate.worker, False),
                                            frozen=True, params=mp))
    # draft-decode: a runner only with more than one step
    w = find_line(target, gate_mod.V1_FILE if gate.worker == "v1" else gate_mod.V2_FILE,
                  r"self\.speculative_num_steps > 1")
    dd_fallbacks = fallbacks(target, DRAFT_RUNNER, cfg, model.arch,
                             ("draft-decode", gate.worker, bool(multi)), params=mp)
    if multi:
        mw = find_line(target, gate_mod.MULTI_LAYER_FILE, r"self\.cuda_graph_runner = None$")
        verdicts.append(out("draft-decode", EAGER, f"{multi_why}: the multi-layer worker builds "
                            f"no draft-decode runner ({mw}); its draft tokens come from the "
                            "draft-extend pass (no-runner)", mw))
    elif steps is None:
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
                         multi_layer=bool(multi), release=target.version)
    line = gate.cuda_line if platform == "cuda" and gate.cuda_line else gate.line
    gw = Where(gate.file, line) if gate.file and line else None
    if multi and gate.multi_layer is not None:
        gw = Where(gate.multi_layer.file, gate.multi_layer.line)
        v = gate_mod.Verdict(v.mode, f"{multi_why}; {v.reason}", v.cause)
    mode = {gate_mod.GRAPH: GRAPH, gate_mod.EAGER: EAGER,
            gate_mod.UNSUPPORTED: REFUSED}.get(v.mode, DEPENDS)
    reason = v.reason
    if mode == GRAPH and steps is None and "needs --speculative-num-steps" in reason:
        mode = DEPENDS
    if mode == GRAPH and model.mla is None and _mla_split(info) and not multi:
        # the class matters only where the gate tells the classes apart: the v1 worker
        # (0.5.9 eagle_worker.py:260; 0.5.11 / 0.5.12.post1 with the v2 worker off) and the
        # multi-layer worker capture every class on a non-NPU device
        modes = {gate_mod.verdict(gate, backends.backend_map(target, platform, mla=m)
                                  .get(backend), platform, steps, killed,
                                  cfg.disable_cuda_graph, release=target.version).mode
                 for m in (True, False)}
        if len(modes) > 1:
            mode, reason = DEPENDS, (f"{reason}; the class depends on the model "
                                     f"(MLA or MHA: pass --model)")
        else:
            reason += "; the same for the MLA and the MHA class"
    g = extend_topk_guard(target, backend) if (cfg.speculative_eagle_topk or 1) > 1 else None
    if g is not None and g[1] is not None and g[2] is not None:
        reason += (f"; {backend}'s SPEC_V2 topk guard ({g[0]}) does not fire: the draft-extend "
                   f"backend is built without topk ({g[1]}), default 1 ({g[2]})")
    er = MULTI_EXTEND_RUNNER if multi and target.file(MULTI_EXTEND_RUNNER).is_file() \
        else EXTEND_RUNNER
    verdicts.append(out("draft-extend", mode, reason, gw,
                        fallbacks(target, er, cfg, model.arch,
                                  ("draft-extend", gate.worker, bool(multi)), params=mp)
                        if mode == GRAPH else None))
    return verdicts


def _frozen(target: Target, cfg: SpecConfig, frozen: bool | None, why: str,
            out, dd_fallbacks: list[Fallback]) -> list[PhaseVerdict]:
    """draft-decode and draft-extend of the FROZEN_KV_MTP worker (probes.startup.frozen_kv_mtp):
    its own draft graph runner, captured on a GPU; no draft-extend pass (the v2 worker), or the
    v1 worker's seed step (`v1_seed`: eager, or no pass of its own). `frozen` None: no
    algorithm given, so each is `depends`."""
    no_extend, on_cuda = worker_facts(target)
    v1 = v1_seed(target) if no_extend is None else None
    if v1 is not None:  # the v1 worker: its graph is captured only with more than one step
        on_cuda = find_line(target, V1_WORKER, r'self\.target_worker\.device != "cuda"')
        one = find_line(target, V1_WORKER, r"speculative_num_steps <= 1")
        steps = cfg.speculative_num_steps
        if on_cuda is not None and one is not None and steps is not None and steps <= 1:
            dd = (EAGER, f"{why}: one step captures no draft graph ({one})", one)
        elif on_cuda is not None and one is not None and steps is not None:
            dd = (GRAPH, f"{why}: its draft graph runner is captured on a GPU with more than "
                         f"one step (the device is \"cuda\" under ROCm too: {on_cuda}; {one})",
                  on_cuda)
        else:
            dd = (DEPENDS, f"{why}: its draft graph is captured only with more than one step "
                           f"({one or V1_WORKER}): pass --speculative-num-steps", one)
        de = (v1[0], f"{why}: {v1[1]}"
              + ("; nothing runs, eager or graph" if v1[0] == NO_PASS else ""), v1[2])
    elif on_cuda is not None:
        dd = (GRAPH, f"{why}: its draft graph runner is captured on a GPU (the device is "
                     f"\"cuda\" under ROCm too: {on_cuda})", on_cuda)
    else:
        dd = (DEPENDS, f"{why}: sglang {target.version}'s frozen worker is not read here", None)
    if v1 is None and no_extend is not None:
        de = (NO_PASS, f"{why}: the frozen draft has no draft-extend forward ({no_extend}); "
                       "nothing runs, eager or graph", no_extend)
    elif v1 is None:
        de = (DEPENDS, f"{why}: sglang {target.version}'s frozen worker is not read here", None)
    res = []
    for phase, (mode, reason, w) in (("draft-decode", dd), ("draft-extend", de)):
        if frozen is None:
            mode, reason = DEPENDS, (f"with --speculative-algorithm EAGLE or NEXTN: {mode} "
                                     f"({reason}); pass --speculative-algorithm")
        res.append(out(phase, mode, reason, w,
                       dd_fallbacks if phase == "draft-decode" and mode == GRAPH else None))
    return res


def _mla_split(info: backends.BackendInfo) -> bool:
    return any("MLA" in c for c in info.draft_extend_classes) and any(
        "MLA" not in c for c in info.draft_extend_classes)


def table_backends(target: Target, platform: str) -> list[str]:
    """The backends a per-phase table lists when no backend is under audit."""
    bm = backends.backend_map(target, platform)
    if platform == "hip":
        return [n for n in HIP_BACKENDS if n in bm]
    return [n for n, b in bm.items() if b.has_draft_factory_entry]


# --------------------------------------------------------------------------- the backend run


@dataclass
class Audit:
    """The backend SGLang runs for a configuration and its per-phase verdicts."""

    backend: str  # the backend, or the candidates joined by "|" where no input decides
    first: str  # the backend the gate's table row and the hint are read for
    how: str  # given | forced | model default | default | draft
    why: str
    verdicts: list[PhaseVerdict]


def audited_verdicts(target: Target, platform: str, cfg: SpecConfig,
                     gate: gate_mod.GateInfo | None = None) -> Audit | None:
    """The per-phase verdicts of the backend SGLang runs: `--speculative-draft-attention-backend`
    as given; else a backend the model forces (DeepSeek-V4: dsv4), the one given, or SGLang's
    default for the model and platform (default_backend). None when no backend is given and no
    model can be read (the default then depends on the model: `default_hint`)."""
    if cfg.draft_attention_backend:
        return Audit(cfg.draft_attention_backend, cfg.draft_attention_backend, "draft",
                     "--speculative-draft-attention-backend",
                     phase_verdicts(target, platform, cfg, cfg.draft_attention_backend, gate))
    if not cfg.model:  # a model implied by the backend (dsv4, dsa) forces nothing more
        return Audit(cfg.attention_backend, cfg.attention_backend, "given",
                     f"--attention-backend {cfg.attention_backend}",
                     phase_verdicts(target, platform, cfg, cfg.attention_backend, gate)
                     ) if cfg.attention_backend else None
    model = read_model(target, cfg.model)
    if not cfg.attention_backend and model.arch is None:
        return None  # a server's model path not readable here: the default is not known
    choice = default_backend.resolve_backend(target, platform, cfg, model)
    one = choice.backend
    if one is not None:
        pvs = phase_verdicts(target, platform, cfg, one, gate)
        if choice.how != "given":
            for pv in pvs:
                pv.reason += f" [{choice.why}]"
        return Audit(one, one, choice.how, choice.why, pvs)
    cands: dict[str, list[default_backend.Candidate]] = {}
    for c in choice.candidates:
        cands.setdefault(c.backend or "?", []).append(c)
    if "?" in cands or any(c.field != default_backend.MAIN for c in choice.candidates) \
            or not cands:
        said = "; ".join(f"{c.field} {c.backend or '(not read)'} when {c.when()} ({c.where})"
                         for c in choice.candidates)
        why = f"{choice.why}: {said or 'nothing found'}; pass --attention-backend"
        return Audit("?", next(iter(cands), "?"), choice.how, why,
                     [PhaseVerdict(p, "?", DEPENDS, why) for p in PHASES])
    each = {b: phase_verdicts(target, platform, cfg, b, gate) for b in cands}
    label = "|".join(cands)

    def when(b: str) -> str:
        return " or ".join(f"{c.when()} ({c.where})" for c in cands[b])

    out = []
    for i, phase in enumerate(PHASES):
        modes = {b: pvs[i].mode for b, pvs in each.items()}
        first = each[next(iter(cands))][i]
        if len(set(modes.values())) == 1:
            first.reason += (f" [{choice.why}: {' or '.join(cands)} by the condition, the same "
                             f"verdict for each: " + "; ".join(f"{b} when {when(b)}"
                                                              for b in cands) + "]")
            first.backend = label
            out.append(first)
        else:
            out.append(PhaseVerdict(phase, label, DEPENDS, f"{choice.why}: depends on which "
                                    "backend SGLang picks: " + "; ".join(
                                        f"{b} ({modes[b]}) when {when(b)}" for b in cands)))
    return Audit(label, next(iter(cands)), choice.how, choice.why, out)


def start_refused_verdict(target: Target, platform: str, cfg: SpecConfig,
                          gate: gate_mod.GateInfo | None = None) -> PhaseVerdict | None:
    """The verdict of a configuration SGLang refuses at start (every phase `refused`), else
    None: `audited_verdicts`' modes (`gate`: `gate_for(target, cfg)`, where the caller has it),
    read without the runtime fallbacks, which no refusal reaches. The fixes read it
    (fixes.start_refusal)."""
    token = _MODES_ONLY.set(True)
    try:
        audit = audited_verdicts(target, platform, cfg, gate)
    finally:
        _MODES_ONLY.reset(token)
    if audit is None or not audit.verdicts or any(pv.mode != REFUSED for pv in audit.verdicts):
        return None
    return audit.verdicts[-1]


def default_hint(target: Target, platform: str) -> str:
    """What SGLang's default backend depends on when no model is given (the generic default's
    home in this release, for the words)."""
    found = default_backend.default_fn(target)
    where = f"{found[0]}:{found[1].lineno}" if found else "SGLang's argument code"
    return (f"SGLang's default attention backend on {platform.upper()} depends on the model "
            f"(MLA or not, its KV heads per --tp rank, the model's own override; {where}): "
            "pass --model")
