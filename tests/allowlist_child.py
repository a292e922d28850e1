"""Child process for tests/test_allowlist_real_classes.py: runs the draft-extend allow-list fix
against the REAL `EagleDraftWorker` of one SGLang release and prints the observations as JSON.

Run with `.venv-sglang/bin/python tests/allowlist_child.py VERSION ORDER` with the release tree
and `tests/standins` (the torchvision STAND-IN) on PYTHONPATH. ORDER is `import-first` (import
the worker module, then apply) or `apply-first` (apply while the module is not imported yet; the
patcher's post-import hook patches it on import).

What is not real here, and why: the draft-extend runner is `StandinDraftExtendRunner` (a real
runner captures a graph on a GPU), and the worker is built with `object.__new__` with the
attributes `_capture_cuda_graphs` reads set by hand (its `__init__` loads a model). The worker
module's own functions that need a live engine (`get_model`, `get_exec`,
`get_batch_sizes_to_capture`, `get_available_gpu_memory`) are replaced on the module.
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

VERSION, ORDER = (sys.argv[1:3] + ["", ""])[:2]  # imported by allowlist_cuda_child
WORKER = "sglang.srt.speculative.eagle_worker_v2"


class StandinDraftExtendRunner:
    """STAND-IN for EAGLEDraftExtendCudaGraphRunner: records that it was built, captures nothing."""

    built: list = []

    def __init__(self, worker) -> None:
        type(self).built.append(worker)
        self.worker = worker


def ns(**kw):
    return types.SimpleNamespace(**kw)


def setup_module(m) -> None:
    """Make the real module HIP and give it the engine-only functions it calls."""
    m._is_hip = True
    m.EAGLEDraftExtendCudaGraphRunner = StandinDraftExtendRunner
    mem = iter([80.0 - 0.25 * i for i in range(1000)])  # each capture "uses" 0.25 GB
    m.get_available_gpu_memory = lambda device, gpu_id, *a, **k: next(mem)
    m.get_batch_sizes_to_capture = lambda *a, **k: ([1, 2, 4, 8], None)
    if hasattr(m, "get_model"):
        m.get_model = lambda: ns(model_impl="auto")
    if hasattr(m, "get_exec"):
        m.get_exec = lambda: ns(graph=ns(cuda_graph_config=ns(decode=ns(backend="full")),
                                         cuda_graph_bs_decode=[1, 2, 4, 8],
                                         disable_cuda_graph=False))


def make_worker(m, backend, graphs: bool = True):
    w = object.__new__(m.EagleDraftWorker)
    w.speculative_num_steps = 1  # no multi-step draft-decode capture
    w.topk = 1
    w.speculative_num_draft_tokens = 2
    w.device = "cuda"
    w.gpu_id = 0
    w.target_worker = ns(device="cuda")  # ROCm torch reports "cuda"
    w.draft_runner = ns()
    w._specialized_graph_memory_usage = {}
    w._specialized_graph_time_usage = {}
    w.draft_attn_backend = None
    w.draft_extend_attn_backend = backend
    w.speculative_algorithm = ns(name="EAGLE")
    w.server_args = ns(disable_cuda_graph=not graphs, model_impl="auto")
    return w


def capture(m, backend, graphs: bool = True):
    method = "_capture_cuda_graphs" if "_capture_cuda_graphs" in vars(m.EagleDraftWorker) \
        else "init_cuda_graphs"
    saved = m.__dict__.get("check_cuda_graph_backend")
    if not graphs and saved is not None:
        m.check_cuda_graph_backend = lambda phase, backend: True  # published config: DISABLED
    try:
        w = make_worker(m, backend, graphs)
        getattr(w, method)()
    finally:
        if saved is not None:
            m.check_cuda_graph_backend = saved
    r = w.cuda_graph_runner_for_draft_extend
    return {"runner": type(r).__name__ if r is not None else None,
            "time": w._specialized_graph_time_usage.get("draft_extend"),
            "mem": w._specialized_graph_memory_usage.get("draft_extend")}


def backends():
    from sglang.srt.layers.attention import triton_backend

    out = {"triton": object.__new__(triton_backend.TritonAttnBackend)}
    for key, mod, cls in (
            ("dsa", "sglang.srt.layers.attention.dsa_backend", "DeepseekSparseAttnBackend"),
            ("dsv4", "sglang.srt.layers.attention.deepseek_v4_backend_hip_radix",
             "DeepseekV4HipRadixBackend"),
            ("qsa", "sglang.srt.layers.attention.qwen_sparse_attn_backend",
             "QwenSparseAttnBackend")):
        try:
            module = __import__(mod, fromlist=[cls])
        except ModuleNotFoundError as e:
            if e.name == mod:  # the release has no such backend
                continue
            raise
        out[key] = object.__new__(getattr(module, cls))
    return out


def dependency_case(m, backend, fix) -> dict:
    """DSV4 with this fix alone, then with the real fix repeat-interleave-output-size applied
    (it rewrites `_attach_unified_kv_prefill_meta` and marks it), then with that one reverted."""
    from diag import fixes

    out = {"before": capture(m, backend), "record": fix.records[-1].__dict__}
    out["sites"] = [s.function for s in fix._unfixed_syncs(type(backend))]
    if out["sites"]:
        other = fixes.get("repeat-interleave-output-size")
        other.apply(None, "hip")
        out["other_applied"] = other.is_applied()
        out["after_output_size"] = capture(m, backend)
        other.revert()
        out["after_output_size_reverted"] = capture(m, backend)
    return out


def runtime_hooks(version: str) -> dict:
    """The run-time counters' hooks patch the real loaded classes and revert exactly."""
    import importlib

    from diag.probes.draft_extend_graph.runtime import hook_patch, hook_targets

    targets = hook_targets(version)
    originals = []
    for mod, qual in targets:
        owner = importlib.import_module(mod)
        *path, name = qual.split(".")
        for part in path:
            owner = vars(owner)[part]
        originals.append((owner, name, vars(owner)[name]))
    patch = hook_patch(version)
    patch.apply()
    changed = all(vars(o)[n] is not f for o, n, f in originals)
    patch.revert()
    return {"targets": targets, "patched": changed,
            "reverted": all(vars(o)[n] is f for o, n, f in originals)}


def install(fix, target):
    """`fix.apply()` (the contract). Where the release already admits every allow-listed class
    (0.5.23: `upstream`), apply patches nothing; the wrapper is then installed from the fix's own
    `build_patch` to exercise it on that release (the returned Patch; None otherwise)."""
    st = fix.apply(target, "hip")
    if st.active:
        return None, st.state
    patch = fix.build_patch(target)
    patch.apply()
    return patch, st.state


def main() -> None:
    from diag.fixes.draft_extend_allowlist import DraftExtendAllowlistFix
    from diag.target import from_path

    root = Path(os.environ["DIAG_RELEASE_ROOT"])
    fix = DraftExtendAllowlistFix()
    target = from_path(root)
    res: dict = {"version": VERSION, "order": ORDER}

    direct = None
    if ORDER == "apply-first":
        direct, res["apply_state"] = install(fix, target)
        res["module_loaded_at_apply"] = WORKER in sys.modules
        res["pending_at_apply"] = fix._patch.pending
    import importlib

    m = importlib.import_module(WORKER)
    cls = m.EagleDraftWorker
    method = "_capture_cuda_graphs" if "_capture_cuda_graphs" in vars(cls) else "init_cuda_graphs"
    res["method"] = method
    setup_module(m)
    b = backends()
    res["backends"] = sorted(b)

    if ORDER == "import-first":
        original = vars(cls)[method]
        res["without"] = {k: capture(m, v) for k, v in b.items()}
        direct, res["apply_state"] = install(fix, target)
    else:
        res["patch_errors"] = fix.errors
        original = getattr(vars(cls)[method], "__wrapped__", None)

    wrapped = vars(cls)[method]
    res["wrapped"] = wrapped is not original and getattr(wrapped, "__wrapped__", None) is original
    if direct is None:
        fix.apply(target, "hip")  # twice: a no-op
    else:
        direct.apply()
    res["twice_same_object"] = vars(cls)[method] is wrapped
    res["with"] = {k: capture(m, v) for k, v in b.items()}
    res["records"] = [r.__dict__ for r in fix.records]
    res["graphs_disabled"] = capture(m, b["dsa"], graphs=False)
    os.environ["SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"] = "1"
    res["kill_switch"] = capture(m, b["dsa"])
    del os.environ["SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"]
    os.environ["DIAG_ALLOWLIST_EXTRA"] = "TritonAttnBackend"
    res["extra_triton"] = capture(m, b["triton"])
    del os.environ["DIAG_ALLOWLIST_EXTRA"]

    if "dsv4" in b:  # the output_size dependency (0.5.17: _attach_unified_kv_prefill_meta)
        res["dsv4_dependency"] = dependency_case(m, b["dsv4"], fix)

    if direct is None:
        fix.revert()
    else:
        direct.revert()
    res["revert_identical"] = vars(cls)[method] is original
    res["after_revert"] = {k: capture(m, v) for k, v in b.items()}
    res["applied_after_revert"] = fix.is_applied()
    res["standin_built"] = len(StandinDraftExtendRunner.built)
    res["runtime_hooks"] = runtime_hooks(VERSION)
    print("RESULT " + json.dumps(res))


if __name__ == "__main__":
    main()
