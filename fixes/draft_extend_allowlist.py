"""Fix `draft-extend-allowlist`: capture the draft-extend graph on HIP for more backends.

SGLang's draft worker (`EagleDraftWorker` in `speculative/eagle_worker_v2.py`) builds the
draft-extend CUDA/HIP graph runner only when its HIP gate admits the attention backend; DSV4
(before 0.5.18), DSA (before 0.5.19) and QSA are left eager. This fix wraps the worker's
graph-capture method (`init_cuda_graphs` up to 0.5.13.post1, `_capture_cuda_graphs` from
0.5.15.post1). After the release's own method has run, when no draft-extend runner was built,
the process is HIP (the module's `_is_hip`), graphs are enabled (the method's own early-return
conditions are false), the kill switch `SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH` is unset, and the
draft-extend backend is an instance of an allow-listed class, it builds the runner the way that
release builds it (the class its `Device2ExtendCudaGraphRunner` table names for the device,
called with the worker) and records capture time and memory where the release records them.

Dependency: capturing is refused for a backend whose capture path still syncs the host
(`fixes.capture_syncs`), unless fix `repeat-interleave-output-size` has patched those functions;
e.g. DSV4 on 0.5.17 (`_attach_unified_kv_prefill_meta`).

Allow-list: DEFAULT_ALLOWLIST, plus `extra` (constructor) and the env `DIAG_ALLOWLIST_EXTRA`
(comma list of `ClassName` or `package.module:ClassName`).
"""

from __future__ import annotations

import ast
import functools
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diag import telemetry
from diag.errors import FixError
from diag.fixes.base import APPLICABLE, NOT_NEEDED, REFUSED, UPSTREAM, Applicability, Fix
from diag.fixes.capture_syncs import SyncSite, capture_sync_sites
from diag.patcher import Patch, find_def, patched_by
from diag.probes.gate import EXTEND_ATTR, HIP_VAR, env_bool, read_gate
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

_log = logging.getLogger("diag.fixes.draft_extend_allowlist")


# ----------------------------------------------------------------------------- static reading


def _assigns_gate_var(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Assign) and len(n.targets) == 1 and
               isinstance(n.targets[0], ast.Name) and HIP_VAR.match(n.targets[0].id)
               for n in ast.walk(node))


def class_locations(target: Target, names: Iterable[str]) -> dict[str, str]:
    """class name -> sglang-relative file defining it (searched under srt/layers/attention)."""
    wanted = set(names)
    out: dict[str, str] = {}
    base = target.file("srt/layers/attention")
    for path in sorted(base.rglob("*.py")) if base.is_dir() else []:
        text = path.read_text(encoding="utf-8", errors="replace")
        for name in wanted - out.keys():
            if re.search(rf"^class {name}\b", text, re.M):
                out[name] = str(path.relative_to(target.package))
    return out


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
    tree = ast.parse(Path(filename).read_text(encoding="utf-8"), filename)
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
    """One decision of the fix in this process (also emitted as a telemetry `fix` event)."""

    state: str  # captured | skipped | error
    reason: str
    backend: str | None = None
    seconds: float | None = None
    memory_gb: float | None = None


@dataclass
class _Runtime:
    facts: dict[int, _MethodFacts] = field(default_factory=dict)
    syncs: dict[tuple[str, str], list[SyncSite] | None] = field(default_factory=dict)


class DraftExtendAllowlistFix(Fix):
    id = FIX_ID
    title = "Capture the draft-extend graph on HIP for allow-listed attention backends"
    addresses = ("draft-extend-graph",)
    # Per backend and release, see `dependencies(target)`: e.g. DSV4 on 0.5.17 needs it.
    depends_on = (OUTPUT_SIZE_FIX,)
    revertible = True
    bench = "diag.fixes.bench_draft_extend:run"

    def __init__(self, extra: Iterable[str] = (), target: Target | None = None) -> None:
        self.extra = parse_extra(",".join(extra))
        self.target = target
        self.records: list[CaptureRecord] = []
        self._patch: Patch | None = None
        self._rt = _Runtime()
        self._lock = threading.Lock()

    # -- the allow-list
    def allowlist(self) -> dict[str, str | None]:
        out: dict[str, str | None] = dict(DEFAULT_ALLOWLIST)
        out.update(self.extra)
        out.update(parse_extra(os.environ.get(EXTRA_ENV)))
        return out

    # -- static applicability
    def dependencies(self, target: Target) -> dict[str, list[SyncSite]]:
        """Allow-listed classes of this release whose capture path syncs (needs OUTPUT_SIZE_FIX)."""
        out: dict[str, list[SyncSite]] = {}
        for name, rel in class_locations(target, self.allowlist()).items():
            sites = capture_sync_sites(target.source(rel) or "", name)
            if sites:
                out[name] = sites
        return out

    def applies_to(self, target: Target, platform: str) -> Applicability:
        if platform != "hip":
            return Applicability(NOT_NEEDED, "the allow-list is the HIP gate; on CUDA the "
                                 "release's own backend tuple decides")
        default = read_gate(target)
        if default.worker == "v1" and default.hip_policy == "any":
            return Applicability(NOT_NEEDED, "no HIP gate: this release runs the v1 EAGLE worker "
                                 "by default, which captures draft-extend on every non-NPU device")
        gate = read_gate(target, "v2")
        if not gate.recognised:
            return Applicability(REFUSED, f"draft worker not recognised ({gate.problem}); "
                                 "nothing patched")
        if gate.hip_policy != "allowlist":
            return Applicability(REFUSED, f"{gate.worker_class}.{gate.method} has no HIP "
                                 f"allow-list (HIP policy: {gate.hip_policy}); nothing to extend")
        admitted = {c.cls for c in gate.hip_checks if c.attr == EXTEND_ATTR}
        present = class_locations(target, self.allowlist())
        if not present:
            return Applicability(NOT_NEEDED, "the release has none of the allow-listed "
                                 f"backends ({', '.join(self.allowlist())})")
        missing = [c for c in present if c not in admitted]
        if not missing:
            return Applicability(UPSTREAM, f"{gate.worker_class}.{gate.method} already admits "
                                 f"{', '.join(present)} on HIP")
        deps = self.dependencies(target)
        reason = (f"{gate.worker_class}.{gate.method} ({gate.variable}) does not admit "
                  f"{', '.join(missing)}; the fix captures their draft-extend graph")
        need = [c for c in missing if c in deps]
        if need:
            reason += "; " + "; ".join(
                f"{c} only with fix {OUTPUT_SIZE_FIX} (sync under capture: "
                f"{deps[c][0].describe()})" for c in need)
        return Applicability(APPLICABLE, reason)

    # -- apply / revert
    def _gate_method(self) -> str:
        mod = sys.modules.get(WORKER_MODULE)
        if mod is not None:
            cls = vars(mod).get(WORKER_CLASS)
            for m in GATE_METHODS:
                if cls is not None and m in vars(cls):
                    return m
            raise FixError(f"{WORKER_MODULE}.{WORKER_CLASS} has none of {', '.join(GATE_METHODS)}: "
                           "unexpected shape, nothing patched")
        target = self.target
        if target is None:
            from diag.target import find_importable

            target = find_importable()
        if target is None:
            raise FixError("sglang is not importable here: cannot tell which graph-capture "
                           "method to wrap (pass a target)")
        gate = read_gate(target, "v2")
        if not gate.recognised or gate.hip_policy != "allowlist" or gate.method not in GATE_METHODS:
            raise FixError(f"{target.describe()}: no HIP draft-extend gate in {WORKER_CLASS}; "
                           "nothing to patch")
        return gate.method

    def apply(self) -> None:
        with self._lock:
            if self._patch is not None and self._patch.wanted:
                return
            method = self._gate_method()
            patch = Patch(FIX_ID).add(WORKER_MODULE, f"{WORKER_CLASS}.{method}",
                                      functools.partial(self._wrap, f"{WORKER_CLASS}.{method}"))
            self._patch = self.install(patch)

    def revert(self) -> None:
        with self._lock:
            if self._patch is not None:
                self._patch.revert()
                self._patch = None

    def is_applied(self) -> bool:
        return self._patch is not None and self._patch.wanted

    @property
    def errors(self) -> list[str]:
        return list(self._patch.errors) if self._patch else []

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
        telemetry.emit("fix", fix=FIX_ID, state=rec.state, reason=rec.reason,
                       backend=rec.backend, seconds=rec.seconds, memory_gb=rec.memory_gb)
        return rec

    def _match(self, backend: Any) -> type | None:
        """The allow-listed class `backend` is an instance of (isinstance; no imports)."""
        mro = type(backend).__mro__
        for name, module in self.allowlist().items():
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

    def _after_capture(self, worker: Any, original: Callable, qualname: str) -> None:
        if getattr(worker, "cuda_graph_runner_for_draft_extend", None) is not None:
            return  # the release captured it itself
        g = original.__globals__
        if not g.get("_is_hip"):
            return  # not HIP: the allow-list is the HIP gate only
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
        cls = self._match(backend)
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
        logger.info("Capture draft extend CUDA graph begin (diag %s). backend=%s, "
                    "num_tokens_per_req=%s", FIX_ID, name,
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
        self._record(CaptureRecord("captured", f"{name}: built {runner_name}", backend=name,
                                   seconds=seconds, memory_gb=used))
