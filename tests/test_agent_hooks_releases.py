"""The places the agent hooks in SGLang exist in the real releases (checked by AST, no import):
the scheduler's per-batch methods (control requests are applied there), the plugin loader
(`SGLANG_PLUGINS` filter, called in every scheduler process) and the metadata builders the sync
counter wraps."""

from __future__ import annotations

import ast

import pytest

from diag.engine.agent import DEFAULT_BATCH_HOOK
from diag.patcher import PatchError, find_def
from diag.probes.metadata_syncs.sync_counter import BUILDERS as SYNC_BUILDERS
from diag.probes.metadata_syncs.sync_counter import runtime_patch

# 0.5.11 is the first release with the plugin entry point; 0.5.23 the newest.
PLUGIN_RELEASES = ("0.5.11", "0.5.12.post1", "0.5.13.post1", "0.5.15.post1", "0.5.17", "0.5.18",
                   "0.5.19", "0.5.23")

pytestmark = pytest.mark.release


@pytest.mark.parametrize("version", PLUGIN_RELEASES)
def test_batch_hook_methods_exist(release, version):
    t = release(version)
    for item in DEFAULT_BATCH_HOOK.split(","):
        module, qualname = item.split(":")
        rel = module.split(".", 1)[1].replace(".", "/") + ".py"
        fn = find_def(ast.parse(t.source(rel)), qualname)
        assert fn.args.args[0].arg == "self"
    # and the event loops call them once per iteration
    tree = ast.parse(t.source("srt/managers/scheduler.py"))
    loop = find_def(tree, "Scheduler.event_loop_normal")
    called = {n.func.attr for n in ast.walk(loop) if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Attribute)}
    assert "run_batch" in called
    # process_input_requests runs every iteration, directly or through ingest_requests
    if "process_input_requests" not in called:
        assert "ingest_requests" in called
        ingest = find_def(tree, "Scheduler.ingest_requests")
        assert "process_input_requests" in {n.func.attr for n in ast.walk(ingest) if
                                            isinstance(n, ast.Call) and
                                            isinstance(n.func, ast.Attribute)}


@pytest.mark.parametrize("version", PLUGIN_RELEASES)
def test_plugin_loader_filters_by_sglang_plugins(release, version):
    """What diag/plugin.py documents: entry points of group sglang.srt.plugins are loaded unless
    SGLANG_PLUGINS is set and does not name them; the scheduler process calls load_plugins()."""
    t = release(version)
    src = t.source("srt/plugins/__init__.py")
    assert src is not None
    tree = ast.parse(src)
    consts = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    assert "sglang.srt.plugins" in consts
    by_group = find_def(tree, "load_plugins_by_group")
    text = ast.unparse(by_group)
    assert "SGLANG_PLUGINS" in text and "ep.name not in allowed_set" in text
    sched = ast.parse(t.source("srt/managers/scheduler.py"))
    run_proc = find_def(sched, "run_scheduler_process")
    assert "load_plugins" in {n.func.id for n in ast.walk(run_proc)
                              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


@pytest.mark.parametrize("version", ("0.5.17", "0.5.18", "0.5.23"))
def test_sync_builders_present(release, version):
    """At least the builders `sync_counter.BUILDERS` names (with their 0.5.23 lines) are found;
    the agent skips any that are absent."""
    t = release(version)
    found = []
    for module, qualname in SYNC_BUILDERS:
        rel = module.split(".", 1)[1].replace(".", "/") + ".py"
        src = t.source(rel)
        if src is None:
            continue
        try:
            find_def(ast.parse(src), qualname)
            found.append(qualname)
        except PatchError:
            pass
    assert "DeepseekV4HipRadixBackend._attach_unified_kv_prefill_meta" in found
    # the metadata-syncs counter wraps exactly those (what the agent switches on)
    patch = runtime_patch(t)
    assert [e.qualname for e in patch.entries] == found
    if version == "0.5.23":
        assert "DeepseekSparseAttnBackend.init_forward_metadata" in found
        assert "QwenSparseAttnBackend._metadata_from_forward_batch" in found
        # fa3's entry points (0.5.23 flashattention_backend.py:132 FlashAttentionBackend,
        # :563 init_forward_metadata_out_graph, :890 init_forward_metadata; :3477
        # FlashAttentionMultiStepBackend, :3507, :3515)
        assert {"FlashAttentionBackend.init_forward_metadata",
                "FlashAttentionBackend.init_forward_metadata_out_graph",
                "FlashAttentionMultiStepBackend.init_forward_metadata",
                "FlashAttentionMultiStepBackend.init_forward_metadata_out_graph"} <= set(found)
