"""Fix `draft-extend-allowlist`: capture the draft-extend graph for backends a gate leaves out.

SGLang's draft worker (`EagleDraftWorker` in `speculative/eagle_worker_v2.py`) builds the
draft-extend CUDA/HIP graph runner only when the gate of the platform admits the attention
backend: on HIP an allow-list (`supports_hip*draft_extend_graph`; DSV4 before 0.5.18, DSA
before 0.5.19 and QSA are left eager), on CUDA a tuple of classes
(`graph_supported_backend_types`; `FlashAttentionBackend`, `--attention-backend fa3`, Hopper's
default for EAGLE with topk 1, only from 0.5.23: sglang #40762). This fix wraps the worker's
graph-capture method (`init_cuda_graphs` up to 0.5.13.post1, `_capture_cuda_graphs` from
0.5.15.post1). After the release's own method has run, when no draft-extend runner was built,
the process is HIP or CUDA (the module's `_is_hip` / `_is_cuda`), graphs are enabled (the
method's own early-return conditions are false), the kill switch
`SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH` is unset, and the draft-extend backend is an instance of
a class on that platform's list, it builds the runner the way that release builds it (the class
its `Device2ExtendCudaGraphRunner` table names for the device, called with the worker) and
records capture time and memory where the release records them.

Dependency: capturing is refused for a backend whose capture path still syncs the host
(`fixes.capture_syncs`), unless fix `repeat-interleave-output-size` has patched those functions;
e.g. DSV4 on 0.5.17 (`_attach_unified_kv_prefill_meta`).

Lists: DEFAULT_ALLOWLIST (HIP) and CUDA_ALLOWLIST (CUDA: every class a later release admitted
on CUDA), plus `extra` (constructor) and the env `DIAG_ALLOWLIST_EXTRA` (comma list of
`ClassName` or `package.module:ClassName`), which extend the list of the platform at hand.

Size (just over ~600 lines, kept whole): one patch and the checks it needs on every release
shape (HIP and CUDA gates, each capture method's name), with the release notes they cite.
"""

from __future__ import annotations

import ast
import functools
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diag import events
from diag.context import SpecConfig
from diag.errors import FixError
from diag.findings import Finding
from diag.fixes.base import (
    APPLICABLE,
    NO_SGLANG,
    NOT_NEEDED,
    REFUSED,
    UPSTREAM,
    Applicability,
    Fix,
    Prediction,
)
from diag.fixes.capture_syncs import SyncSite, capture_sync_sites
from diag.fixes.start_refusal import refused_at_start
from diag.patcher import Patch, find_def, patched_by
from diag.probes.gate import EXTEND_ATTR, HIP_VAR, env_bool, read_gate
from diag.probes.source import classes_defined, parse_text
from diag.target import Target

FIX_ID = "draft-extend-allowlist"
OUTPUT_SIZE_FIX = "repeat-interleave-output-size"
WORKER_MODULE = "sglang.srt.speculative.eagle_worker_v2"
WORKER_CLASS = "EagleDraftWorker"
GATE_METHODS = ("_capture_cuda_graphs", "init_cuda_graphs")  # newest first
KILL_SWITCH = "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"
EXTRA_ENV = "DIAG_ALLOWLIST_EXTRA"
RUNNER_TABLE = "Device2ExtendCudaGraphRunner"
FALLBACK_RUNNER = "EAGLEDraftExtendCudaGraphRunner"

# class name -> module under sglang/srt/layers/attention (where the releases define it)
DEFAULT_ALLOWLIST: dict[str, str] = {
    "DeepseekV4HipRadixBackend": "sglang.srt.layers.attention.deepseek_v4_backend_hip_radix",
    "DeepseekSparseAttnBackend": "sglang.srt.layers.attention.dsa_backend",
    "QwenSparseAttnBackend": "sglang.srt.layers.attention.qwen_sparse_attn_backend",
}

# CUDA: class -> (module, the first release whose CUDA tuple admits it), read from each release's
# `EagleDraftWorker._capture_cuda_graphs` (srt/speculative/eagle_worker_v2.py): 0.5.12.post1
# admits TritonAttnBackend and TRTLLMMLABackend only; 0.5.15.post1 adds FlashInfer, TRT-LLM MHA
# and DSA; 0.5.17 DeepseekV4AttnBackend and FlashMLABackend (:557, under `if _is_cuda`); 0.5.20
# QwenSparseAttnBackend; 0.5.23 FlashAttentionBackend (:113-119, sglang #40762).
CUDA_ALLOWLIST: dict[str, str] = {
    "FlashAttentionBackend": "sglang.srt.layers.attention.flashattention_backend",
    "QwenSparseAttnBackend": "sglang.srt.layers.attention.qwen_sparse_attn_backend",
    "DeepseekV4AttnBackend": "sglang.srt.layers.attention.deepseek_v4_backend",
    "FlashMLABackend": "sglang.srt.layers.attention.flashmla_backend",
    "FlashInferAttnBackend": "sglang.srt.layers.attention.flashinfer_backend",
    "TRTLLMHAAttnBackend": "sglang.srt.layers.attention.trtllm_mha_backend",
    "DeepseekSparseAttnBackend": "sglang.srt.layers.attention.dsa_backend",
}
FIRST_ADMITTED_CUDA: dict[str, str] = {
    "FlashAttentionBackend": "0.5.23 (sglang #40762)", "QwenSparseAttnBackend": "0.5.20",
    "DeepseekV4AttnBackend": "0.5.17", "FlashMLABackend": "0.5.17",
    "FlashInferAttnBackend": "0.5.15.post1", "TRTLLMHAAttnBackend": "0.5.15.post1",
    "DeepseekSparseAttnBackend": "0.5.15.post1",
}
CAPTURE_METHOD = "init_forward_metadata_capture_cuda_graph"

_log = logging.getLogger("diag.fixes.draft_extend_allowlist")


# ----------------------------------------------------------------------------- static reading


def _assigns_gate_var(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Assign) and len(n.targets) == 1 and
               isinstance(n.targets[0], ast.Name) and HIP_VAR.match(n.targets[0].id)
               for n in ast.walk(node))


def class_locations(target: Target, names: Iterable[str]) -> dict[str, str]:
    """class name -> sglang-relative file defining it (searched under srt/layers/attention)."""
    base = target.file("srt/layers/attention")
    out: dict[str, str] = {}
    for path, defined in classes_defined(sorted(base.rglob("*.py")) if base.is_dir() else (),
                                         names).items():
        for name in defined:
            out.setdefault(name, str(path.relative_to(target.package)))
    return out


def capture_branch(target: Target, rel: str, name: str) -> bool | None:
    """Does class `name` (in sglang-relative file `rel`) prepare draft-extend metadata for a
    graph capture? Its `init_forward_metadata_capture_cuda_graph` tests `is_draft_extend*`:
    True; it has that method without such a test: False (capturing would record another
    phase's metadata); no such method in the class: None (cannot tell)."""
    return capture_branch_in(target.source(rel) or "", name, rel)


def capture_branch_in(source: str, name: str, filename: str = "<source>") -> bool | None:
    """`capture_branch` on a module's source text (the engine reads its loaded file)."""
    try:
        tree = parse_text(source, filename)
    except (SyntaxError, ValueError):
        return None
    cls = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name),
               None)
    if cls is None:
        return None
    meth = next((n for n in cls.body if isinstance(n, ast.FunctionDef)
                 and n.name == CAPTURE_METHOD), None)
    if meth is None:
        return None
    return any(isinstance(n, ast.Attribute) and n.attr.startswith("is_draft_extend")
               for n in ast.walk(meth))


def parse_extra(text: str | None) -> dict[str, str | None]:
    """`A, pkg.mod:B` -> {"A": None, "B": "pkg.mod"} (None: matched by class name in the MRO)."""
    out: dict[str, str | None] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        mod, _, name = item.rpartition(":")
        if not name.isidentifier() or (mod and not all(p.isidentifier() for p in mod.split("."))):
            raise FixError(f"{EXTRA_ENV}/extra: {item!r} is not ClassName or package.module:ClassName",
                           exit_code=2)
        out[name] = mod or None
    return out


# ----------------------------------------------------------------------------- run-time pieces


@dataclass
class _MethodFacts:
    """Read once per loaded gate method from its source: early returns and the runner table."""

    early_returns: list[Any]  # compiled conditions of `if <cond>: return` before the gate
    runner_table: dict[str, str]  # device -> runner class name


def _method_facts(func: Callable, qualname: str) -> _MethodFacts:
    filename = func.__code__.co_filename
    tree = parse_text(Path(filename).read_text(encoding="utf-8"), filename)
    node = find_def(tree, qualname)
    conds = []
    for stmt in node.body:
        if isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1 and \
                isinstance(stmt.body[0], ast.Return):
            expr = ast.Expression(stmt.test)
            ast.fix_missing_locations(expr)
            conds.append(compile(expr, filename, "eval"))
        if _assigns_gate_var(stmt):
            break  # early returns after the gate do not decide about graphs
    table: dict[str, str] = {}
    for n in ast.walk(node):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and \
                isinstance(n.targets[0], ast.Name) and n.targets[0].id == RUNNER_TABLE and \
                isinstance(n.value, ast.Dict):
            for k, v in zip(n.value.keys, n.value.values):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Name):
                    table[k.value] = v.id
    return _MethodFacts(conds, table)


@dataclass
class CaptureRecord:
    """One decision of the fix in this process (also emitted as a `fix` event)."""

    state: str  # captured | skipped | error
    reason: str
    backend: str | None = None
    seconds: float | None = None
    memory_gb: float | None = None


@dataclass
class _Runtime:
    facts: dict[int, _MethodFacts] = field(default_factory=dict)
    syncs: dict[tuple[str, str], list[SyncSite] | None] = field(default_factory=dict)
    branches: dict[tuple[str, str], bool | None] = field(default_factory=dict)


class DraftExtendAllowlistFix(Fix):
    id = FIX_ID
    title = "Capture the draft-extend graph for backends the release's gate leaves out"
    addresses = ("draft-extend-graph",)
    # Needed per backend and release (`dependencies(target)`): e.g. DSV4 on 0.5.17.
    depends_on = (OUTPUT_SIZE_FIX,)
    revertible = True
    bench = "diag.fixes.bench_draft_extend:run"

    def __init__(self, extra: Iterable[str] = ()) -> None:
        super().__init__()
        self.extra = parse_extra(",".join(extra))
        self.records: list[CaptureRecord] = []
        self._rt = _Runtime()

    # -- the lists
    def allowlist(self, platform: str = "hip") -> dict[str, str | None]:
        """The classes the fix admits on `platform` (the HIP allow-list, or the CUDA tuple's
        later additions), plus the user's extras."""
        out: dict[str, str | None] = dict(CUDA_ALLOWLIST if platform == "cuda"
                                          else DEFAULT_ALLOWLIST)
        out.update(self.extra)
        out.update(parse_extra(os.environ.get(EXTRA_ENV)))
        return out

    # -- static applicability
    def dependencies(self, target: Target, platform: str = "hip") -> dict[str, list[SyncSite]]:
        """Listed classes of this release whose capture path syncs (needs OUTPUT_SIZE_FIX)."""
        out: dict[str, list[SyncSite]] = {}
        for name, rel in class_locations(target, self.allowlist(platform)).items():
            sites = capture_sync_sites(target.source(rel) or "", name)
            if sites:
                out[name] = sites
        return out

    def _uncovered(self, target: Target, platform: str, config: SpecConfig | None,
                   present: dict[str, str], cls: str) -> list[str]:
        """`file:line function` of the syncs under `cls`'s capture that no applicable fix
        removes (the dependency says what it patches in `changes`)."""
        sites = capture_sync_sites(target.source(present[cls]) or "", cls)
        if not sites:
            return []
        from diag import fixes

        try:
            dep = fixes.get(OUTPUT_SIZE_FIX).applies_to(target, platform, config)
            covered = set(dep.changes) if dep.status == APPLICABLE else set()
        except Exception:
            covered = set()
        return [f"sglang/{present[cls]}:{s.line} {cls}.{s.function} (repeat_interleave("
                f"repeats={s.repeats}) without output_size)"
                for s in sites if f"{cls}.{s.function}" not in covered]

    def _captured_here(self, target: Target, gate, platform: str = "hip"
                       ) -> tuple[list[str], list[str]]:
        """(backends this release captures on `platform`, backends no list admits)."""
        from diag.probes.backends import backend_map
        from diag.probes.draft_extend_graph.phases import HIP_BACKENDS
        from diag.probes.gate import GRAPH, verdict

        bm = backend_map(target, platform)
        allow = set(self.allowlist(platform))
        names = [n for n in HIP_BACKENDS if n in bm] if platform == "hip" else \
            sorted(n for n, b in bm.items() if b.has_draft_factory_entry)
        graph, never = [], []
        for n in names:
            v = verdict(gate, bm[n], platform, None, release=target.version)
            if v.mode == GRAPH:
                graph.append(n + (" (with --speculative-num-steps >= 2)"
                                  if "speculative-num-steps" in v.reason else ""))
            elif v.cause == "not_allowlisted" and not (
                    allow & set(bm[n].draft_extend_classes + bm[n].draft_extend_ancestors)):
                never.append(n)
        return graph, never

    def _instead(self, target: Target, gate, platform: str = "hip") -> str:
        graph, never = self._captured_here(target, gate, platform)
        text = (f"on {platform.upper()} sglang {target.version} captures draft-extend for "
                f"{', '.join(graph) or 'no backend'}")
        if never:
            text += (f"; {', '.join(never)}: no upstream {_gate_word(platform)} ever admitted "
                     f"{'it' if len(never) == 1 else 'them'} (nor does this fix), so "
                     f"draft-extend stays eager: use one of the captured backends "
                     f"(or try {EXTRA_ENV}=ClassName at your own risk)")
        return text

    def applies_to(self, target: Target | None, platform: str,
                   config: SpecConfig | None = None) -> Applicability:
        if target is None:
            return Applicability(REFUSED, NO_SGLANG)
        if platform not in ("hip", "cuda"):
            return Applicability(NOT_NEEDED, f"no draft-extend gate to extend on {platform}")
        plat = platform.upper()
        if config is not None:  # the worker this configuration runs (topk, switch, flag)
            from diag.probes.draft_extend_graph.phases import gate_for

            default = gate_for(target, config)
            if (refused := refused_at_start(target, platform, config, default)) is not None:
                return refused
        else:
            default = read_gate(target)
        if default.worker == "v1" and (default.hip_policy if platform == "hip"
                                       else default.cuda_policy) == "any":
            how = f" ({default.selection})" if config is not None and default.selection else \
                " by default"
            return Applicability(NOT_NEEDED, f"no {plat} gate: this release runs the v1 EAGLE "
                                 f"worker{how}, which captures draft-extend on every "
                                 "non-NPU device")
        gate = read_gate(target, "v2")
        if not gate.recognised:
            return Applicability(REFUSED, f"draft worker not recognised ({gate.problem}); "
                                 "nothing patched")
        policy = gate.hip_policy if platform == "hip" else gate.cuda_policy
        if policy != "allowlist":
            return Applicability(REFUSED, f"{gate.worker_class}.{gate.method} has no {plat} "
                                 f"allow-list ({plat} policy: {policy}); nothing to extend")
        checks = gate.hip_checks if platform == "hip" else gate.cuda_checks
        admitted = {c.cls for c in checks if c.attr == EXTEND_ATTR}
        allow = self.allowlist(platform)
        present = class_locations(target, allow)
        name = None
        if config:  # the backend SGLang runs (DeepSeek-V4: dsv4, whatever was given)
            from diag.probes.startup.default_backend import audited_backend

            name = config.draft_attention_backend or audited_backend(target, platform, config)[0]
        if name:
            return self._for_backend(target, platform, config, gate, present, name)
        instead = self._instead(target, gate, platform)
        if not present:
            return Applicability(NOT_NEEDED, "the release has none of the listed "
                                 f"{plat} backends ({', '.join(allow)})", instead)
        missing = [c for c in present if c not in admitted]
        if not missing:
            return Applicability(UPSTREAM, f"{gate.worker_class}.{gate.method} already admits "
                                 f"{', '.join(present)} on {plat}", instead)
        blocked = {c: u for c in missing
                   if (u := self._uncovered(target, platform, config, present, c))}
        blocked.update({c: [f"sglang/{present[c]}: {c}.{CAPTURE_METHOD} prepares no "
                            "draft-extend metadata"]
                        for c in missing if c not in blocked and platform == "cuda"
                        and capture_branch(target, present[c], c) is False})
        capturable = [c for c in missing if c not in blocked]
        held = "; ".join(f"capturing {c} would hold a host sync that no fix removes: {u[0]}"
                         if "metadata" not in u[0] else f"not capturing {c}: {u[0]}"
                         for c, u in blocked.items())
        if not capturable:
            return Applicability(REFUSED, held, instead)
        reason = (f"{gate.worker_class}.{gate.method} ({_gate_name(gate, platform)}) does not "
                  f"admit {', '.join(capturable)}; the fix captures their draft-extend graph")
        if platform == "cuda":
            reason += " (" + "; ".join(f"{c}: on CUDA upstream from {FIRST_ADMITTED_CUDA[c]}"
                                       for c in capturable if c in FIRST_ADMITTED_CUDA) + ")"
        deps = self.dependencies(target, platform)
        need = [c for c in capturable if c in deps]
        if need:
            reason += "; " + "; ".join(
                f"{c} only with fix {OUTPUT_SIZE_FIX} (sync under capture: "
                f"{deps[c][0].describe()})" for c in need)
        if held:
            reason += f"; not {', '.join(blocked)}: {held}"
        return Applicability(APPLICABLE, reason, instead, tuple(capturable))

    def _for_backend(self, target: Target, platform: str, config: SpecConfig, gate,
                     present: dict[str, str], name: str) -> Applicability:
        """For the configuration's backend: would the fix capture its draft-extend?"""
        from diag.probes.backends import backend_map
        from diag.probes.gate import GRAPH, verdict
        from diag.probes.startup.frozen_kv_mtp import frozen_kv_mtp, v1_seed

        frozen, why = frozen_kv_mtp(target, config)
        v1 = v1_seed(target) if frozen else None  # None where the v2 worker runs (0.5.14+)
        if v1 is not None and v1[0] == "eager":  # the v1 frozen worker's seed forward
            return Applicability(REFUSED, f"{why}: {v1[1]}: no HIP allow-list gates it, so "
                                 "this fix cannot capture it")
        if frozen:  # a Gemma4 assistant draft: no draft-extend pass to capture
            return Applicability(NOT_NEEDED, f"{why}: no draft-extend pass runs, nothing to "
                                 "capture")

        from diag.probes.draft_extend_graph.phases import multi_layer
        from diag.probes.startup.auto_steps import auto_steps
        from diag.probes.startup.resolve import read_model

        info = backend_map(target, platform).get(name)
        steps = config.speculative_num_steps
        try:  # the worker SGLang runs, as the report judges it (MiMoV2 with EAGLE: multi-layer)
            model = read_model(target, config.model)
            multi, multi_why = multi_layer(target, config, model)
            auto = auto_steps(target, config, model)
        except ValueError:
            multi, multi_why, auto = False, "", None
        if auto is not None and auto.chosen is not None:  # no steps given: SGLang's own choice
            steps = auto.chosen[0]
        v = verdict(gate, info, platform, steps, False,
                    config.disable_cuda_graph, bool(multi), target.version)
        if steps != config.speculative_num_steps and auto is not None:
            v = type(v)(v.mode, f"{v.reason} [{auto.words}]", v.cause)
        if multi and v.mode == GRAPH and v.cause == "multi_layer":
            return Applicability(NOT_NEEDED, f"{name}: {multi_why}; {v.reason}: the fix adds "
                                 "nothing")
        allow = self.allowlist(platform)
        classes = (info.draft_extend_classes + info.draft_extend_ancestors) if info else []
        hit = [c for c in allow if c in classes]
        if v.mode == GRAPH:
            if hit:  # the release admits what the fix would add
                return Applicability(UPSTREAM, f"{name}: {v.reason} (the release admits "
                                     f"{hit[0]} itself)")
            return Applicability(NOT_NEEDED, f"{name}: {v.reason} (on the release's own "
                                 f"{platform.upper()} list; the fix adds nothing)")
        instead = self._instead(target, gate, platform)
        if v.cause == "graphs_disabled":
            return Applicability(REFUSED, f"{name}: {v.reason}; the fix captures only with "
                                 "graphs enabled", "drop --disable-cuda-graph")
        if v.cause == "num_steps":
            return Applicability(REFUSED, f"{name}: {v.reason}; the fix does not change that",
                                 "run with --speculative-num-steps >= 2")
        if v.cause != "not_allowlisted" or info is None:
            return Applicability(REFUSED, f"{name}: {v.reason}", instead)
        if not hit:
            return Applicability(REFUSED, f"{name}'s draft-extend backend "
                                 f"({info.draft_extend_class or '?'}) is not on the fix's "
                                 f"{platform.upper()} list: no upstream {_gate_word(platform)} "
                                 "ever admitted it", instead)
        cls = hit[0]
        if cls not in present:
            present = {**present, **class_locations(target, [cls])}
        unc = self._uncovered(target, platform, config, present, cls) if cls in present else []
        if unc:
            return Applicability(REFUSED, f"{name}: capturing {cls} would hold a host sync that "
                                 f"no fix removes: {unc[0]}", instead)
        if platform == "cuda" and cls in present and \
                capture_branch(target, present[cls], cls) is False:
            return Applicability(REFUSED, f"{name}: {cls}.{CAPTURE_METHOD} (sglang/"
                                 f"{present[cls]}) prepares no draft-extend metadata: capturing "
                                 "it would replay another phase's", instead)
        reason = (f"{gate.worker_class}.{gate.method} ({_gate_name(gate, platform)}) does not "
                  f"admit {cls} ({name}); the fix captures its draft-extend graph")
        if platform == "cuda" and cls in FIRST_ADMITTED_CUDA:
            reason += f" (on CUDA upstream from {FIRST_ADMITTED_CUDA[cls]})"
        if cls in self.dependencies(target, platform):
            reason += f", with fix {OUTPUT_SIZE_FIX} (applied first)"
        return Applicability(APPLICABLE, reason, instead, (cls,))

    def predict(self, counters: dict, passes_per_token: float | None = None) -> Prediction | None:
        """From one engine's counters: the draft-extend passes the gate left eager (reason
        `no-runner`) would replay a graph; what each saves is `replay_saving` (probes.draft_extend_graph.
        runtime: the eager forward minus this engine's own replay cost). Per token:
        that x draft-extend passes per output token (batch 1: 1 / accept length), where the
        caller knows it."""
        from diag.probes.draft_extend_graph.runtime import replay_saving

        got = replay_saving(counters, ("no-runner",))
        if got is None:
            return None
        per_pass, passes, basis = got
        per_token = per_pass * passes_per_token if passes_per_token else None
        return Prediction(FIX_ID, "draft-extend", passes, per_pass, basis, per_token)

    def would_change(self, finding: Finding, applicability: Applicability) -> tuple[bool, str]:
        """Only when an eager backend of the finding is one the fix captures (its rows)."""
        ok, why = super().would_change(finding, applicability)
        if not ok:
            return ok, why
        rows = [e.data for e in finding.evidence
                if e.kind == "row" and e.data and "backend" in e.data and "mode" in e.data]
        rows = [r for r in rows if r.get("config") == "under audit"] or rows
        if not rows:  # the live finding: applies_to judged the server's configuration
            return True, ""
        eager = [r for r in rows if r.get("mode") == "eager"]
        if any(c in str(r.get("draft_extend", "")) for r in eager for c in applicability.changes):
            return True, ""
        return False, (f"it captures {', '.join(applicability.changes) or 'nothing here'}, "
                       f"not {', '.join(str(r['backend']) for r in eager) or 'these backends'}")

    # -- the patch
    def _gate_method(self, target: Target | None) -> str:
        mod = sys.modules.get(WORKER_MODULE)
        if mod is not None:
            cls = vars(mod).get(WORKER_CLASS)
            for m in GATE_METHODS:
                if cls is not None and m in vars(cls):
                    return m
            raise FixError(f"{WORKER_MODULE}.{WORKER_CLASS} has none of {', '.join(GATE_METHODS)}: "
                           "unexpected shape, nothing patched")
        if target is None:
            raise FixError("sglang is not importable here: cannot tell which graph-capture "
                           "method to wrap")
        gate = read_gate(target, "v2")
        if not gate.recognised or "allowlist" not in (gate.hip_policy, gate.cuda_policy) \
                or gate.method not in GATE_METHODS:
            raise FixError(f"{target.describe()}: no draft-extend gate in {WORKER_CLASS}; "
                           "nothing to patch")
        return gate.method

    def build_patch(self, target: Target | None) -> Patch:
        method = self._gate_method(target)
        return Patch(FIX_ID).add(WORKER_MODULE, f"{WORKER_CLASS}.{method}",
                                 functools.partial(self._wrap, f"{WORKER_CLASS}.{method}"))

    # -- the wrapper
    def _wrap(self, qualname: str, original: Callable) -> Callable:
        fix = self

        @functools.wraps(original)
        def capture_cuda_graphs_with_allowlist(worker, *args, **kwargs):
            out = original(worker, *args, **kwargs)
            try:
                fix._after_capture(worker, original, qualname)
            except Exception as e:  # never take the engine down: it goes on eager
                fix._record(CaptureRecord("error", f"{type(e).__name__}: {e}"))
                _log.warning("%s: draft-extend capture failed, staying eager: %s", FIX_ID, e,
                             exc_info=True)
            return out

        return capture_cuda_graphs_with_allowlist

    def _record(self, rec: CaptureRecord) -> CaptureRecord:
        self.records.append(rec)
        events.emit(events.FixEvent(fix=FIX_ID, state=rec.state, reason=rec.reason, extra={
            "backend": rec.backend, "seconds": rec.seconds, "memory_gb": rec.memory_gb}))
        return rec

    def _match(self, backend: Any, platform: str = "hip") -> type | None:
        """The listed class `backend` is an instance of (isinstance; no imports)."""
        mro = type(backend).__mro__
        for name, module in self.allowlist(platform).items():
            if module is None:
                hit = next((c for c in mro if c.__name__ == name), None)
                if hit is not None:
                    return hit
                continue
            cls = getattr(sys.modules.get(module), name, None)
            if isinstance(cls, type) and isinstance(backend, cls):
                return cls
        return None

    def _unfixed_syncs(self, cls: type) -> list[SyncSite]:
        """Sync sites on `cls`'s capture path not patched by OUTPUT_SIZE_FIX in this process."""
        mod = sys.modules.get(cls.__module__)
        path = getattr(mod, "__file__", None)
        key = (str(path), cls.__name__)
        if key not in self._rt.syncs:
            try:
                self._rt.syncs[key] = capture_sync_sites(
                    Path(path).read_text(encoding="utf-8"), cls.__name__) if path else None
            except (OSError, SyntaxError):
                self._rt.syncs[key] = None
        sites = self._rt.syncs[key] or []
        out = []
        for s in sites:
            fn = next((vars(k)[s.function] for k in cls.__mro__ if s.function in vars(k)), None)
            if fn is None or not patched_by(fn, OUTPUT_SIZE_FIX):  # also under a sync counter
                out.append(s)
        return out

    def _capture_branch(self, cls: type) -> bool | None:
        """`capture_branch_in` on the loaded module's file (read once per class)."""
        path = getattr(sys.modules.get(cls.__module__), "__file__", None)
        key = (str(path), "capture-branch:" + cls.__name__)
        if key not in self._rt.branches:
            try:
                text = Path(path).read_text(encoding="utf-8") if path else ""
            except OSError:
                text = ""
            self._rt.branches[key] = capture_branch_in(text, cls.__name__, str(path))
        return self._rt.branches[key]

    def _after_capture(self, worker: Any, original: Callable, qualname: str) -> None:
        if getattr(worker, "cuda_graph_runner_for_draft_extend", None) is not None:
            return  # the release captured it itself
        g = original.__globals__
        if g.get("_is_hip"):
            platform = "hip"
        elif g.get("_is_cuda"):
            platform = "cuda"
        else:
            return  # NPU, XPU, MUSA, CPU: no gate of the fix's
        code_id = id(original.__code__)
        if code_id not in self._rt.facts:
            self._rt.facts[code_id] = _method_facts(original, qualname)
        facts = self._rt.facts[code_id]
        backend = getattr(worker, "draft_extend_attn_backend", None)
        if not backend:
            return
        if any(eval(c, g, {"self": worker}) for c in facts.early_returns):
            self._record(CaptureRecord("skipped", "CUDA graphs disabled"))
            return
        envs = g.get("envs")
        field_ = getattr(envs, KILL_SWITCH, None)
        killed = field_.get() if field_ is not None else env_bool(os.environ.get(KILL_SWITCH))
        if killed:
            self._record(CaptureRecord("skipped", f"{KILL_SWITCH} is set"))
            return
        cls = self._match(backend, platform)
        if cls is None:
            return
        name = cls.__name__
        unfixed = self._unfixed_syncs(cls)
        if unfixed:
            self._record(CaptureRecord(
                "skipped", f"{name}: capture would sync the host ({unfixed[0].describe()}); "
                f"apply fix {OUTPUT_SIZE_FIX} first", backend=name))
            _log.warning("%s: not capturing %s draft-extend: needs fix %s", FIX_ID, name,
                         OUTPUT_SIZE_FIX)
            return
        if platform == "cuda" and self._capture_branch(cls) is False:
            self._record(CaptureRecord(
                "skipped", f"{name}.{CAPTURE_METHOD} prepares no draft-extend metadata: "
                "not captured", backend=name))
            return
        device = getattr(getattr(worker, "target_worker", None), "device", None)
        runner_name = facts.runner_table.get(device, FALLBACK_RUNNER)
        runner_cls = g.get(runner_name)
        if runner_cls is None:
            self._record(CaptureRecord("error", f"runner class {runner_name} not found in "
                                       f"{WORKER_MODULE}", backend=name))
            return
        mem = g.get("get_available_gpu_memory")
        logger = g.get("logger") or _log
        tic = time.perf_counter()
        before = mem(worker.device, worker.gpu_id) if mem else None
        logger.info("Capture draft extend CUDA graph begin (diag %s, %s gate). backend=%s, "
                    "num_tokens_per_req=%s", FIX_ID, platform.upper(), name,
                    getattr(worker, "speculative_num_draft_tokens", "?"))
        worker.cuda_graph_runner_for_draft_extend = runner_cls(worker)
        after = mem(worker.device, worker.gpu_id) if mem else None
        seconds = time.perf_counter() - tic
        used = (before - after) if before is not None and after is not None else None
        for attr, value in (("_specialized_graph_time_usage", seconds),
                            ("_specialized_graph_memory_usage", used)):
            usage = getattr(worker, attr, None)
            if isinstance(usage, dict) and value is not None:
                usage["draft_extend"] = usage.get("draft_extend", 0.0) + value
        logger.info("Capture draft extend CUDA graph end (diag %s). elapsed=%.2f s, "
                    "mem usage=%s GB.", FIX_ID, seconds,
                    f"{used:.2f}" if used is not None else "?")
        self._record(CaptureRecord("captured", f"{name}: built {runner_name} ({platform.upper()} "
                                   "gate)", backend=name, seconds=seconds, memory_gb=used))


def _gate_name(gate, platform: str) -> str:
    """The gate as the release names it: the HIP variable, or the CUDA tuple."""
    if platform == "hip":
        return gate.variable or "HIP gate"
    return "graph_supported_backend_types, the CUDA tuple"


def _gate_word(platform: str) -> str:
    return "HIP allow-list" if platform == "hip" else "CUDA tuple"

