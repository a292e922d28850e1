"""The static census and the `metadata-syncs` probe against real SGLang releases."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from diag.context import Context, SpecConfig
from diag.findings import Status
from diag.probes import get as get_probe
from diag.probes.base import run_probe
from diag.probes.metadata_syncs.census.count import census
from diag.target import from_path

pytestmark = pytest.mark.release
ATTACH = "DeepseekV4HipRadixBackend._attach_unified_kv_prefill_meta"


@pytest.fixture(scope="module")
def censuses(release):
    return {v: census(release(v)) for v in ("0.5.17", "0.5.18", "0.5.23")}


def _sites(c, function, verdict=None):
    return [s for s in c.sites if s.function == function and (verdict is None or
                                                               s.verdict == verdict)]


def test_0517_attach_unified_kv_prefill_meta_syncs(censuses):
    c = censuses["0.5.17"]
    sites = _sites(c, ATTACH, "syncs")
    assert len(sites) == 1
    s = sites[0]
    assert s.kind == "repeat_interleave" and s.syncs == 2
    assert s.file == "sglang/srt/layers/attention/deepseek_v4_backend_hip_radix.py"
    text = (c.root + "/" + s.file)
    assert "repeat_interleave" in open(text).read().splitlines()[s.line - 1]


def test_0518_only_the_target_extend_call_syncs(censuses):
    c = censuses["0.5.18"]
    assert len(_sites(c, ATTACH, "syncs")) == 1
    assert [s.function for s in c.with_output_size if s.function == ATTACH] == [ATTACH]


def test_0523_names_the_builders_that_still_sync(censuses):
    c = censuses["0.5.23"]
    ri = {s.function for s in c.syncing() if s.kind == "repeat_interleave"}
    assert "DeepseekSparseAttnBackend.init_forward_metadata" in ri
    assert "QwenSparseAttnBackend._metadata_from_forward_batch" in ri
    assert "MiniMaxSparseAttnBackend._build_prefill_meta" in ri
    assert "DeepseekV4AttnBackend._build_late_layer_tail_metadata" in ri
    # the DSV4 HIP builder's output_size is conditional (`num_tokens if exact_num_tokens else
    # None`, deepseek_v4_backend_hip_radix.py:2726), read as a branch: draft-extend always passes
    # it exact (2218-2220, 2233; 1652 leaves the default), EAGLE target-verify never (1410,
    # attach_decode_streams=True at 1425 so the host proof of 1221 does not hold): 2 syncs there
    [s] = _sites(c, ATTACH)
    assert (s.verdict, s.syncs) == ("syncs", 2)
    assert "target-verify" in s.paths and "draft-extend" not in s.paths
    assert any(g[0] == "data:exact_num_tokens" and g[1] == "false" for g in s.guards)


def test_host_mirrors_and_capture_only_are_told_apart(censuses):
    c = censuses["0.5.17"]
    out_graph = "DeepseekV4HipRadixBackend.init_forward_metadata_out_graph"
    verdicts = {s.call: s.verdict for s in _sites(c, out_graph)}
    assert verdicts["seq_lens_cpu.max().item()"] == "host-mirror"
    assert verdicts["seq_lens.cpu()"] == "capture-only"  # under `if in_capture:`
    assert c.by_backend()["DeepseekV4HipRadixBackend"]["sync_count"] >= 2
    assert not c.errors


def _ctx(target, execute=False, backend=None, steps=None, **more):
    return Context(target=target, platform="hip", execute=execute,
                   config=SpecConfig(attention_backend=backend, speculative_num_steps=steps,
                                     **more))


SITE_KEYS = {"builder", "backend", "call", "syncs", "paths", "call_paths", "reach", "source",
             "status",
             "syncs_per_execution", "why", "callers", "guards", "modes"}
MEASURED_KEYS = {"builder", "file", "line", "syncs", "path", "source", "release"}


def test_probe_0517_fails_on_the_configured_dsv4_path_with_measured_counts(release):
    [f] = run_probe(get_probe("metadata-syncs"), _ctx(release("0.5.17"), execute=True,
                                                      backend="dsv4"))
    assert f.status == Status.FAIL
    assert "_attach_unified_kv_prefill_meta" in f.summary
    measured = [e for e in f.evidence if e.kind == "metric" and e.metric.startswith("measured")]
    assert [(m.data["path"], m.data["syncs"]) for m in measured] == [
        ("draft-extend", 2), ("target-extend", 2)]
    for m in measured:
        assert set(m.data) == MEASURED_KEYS and m.data["builder"] == ATTACH
        assert m.data["source"] == "cpu-counter" and m.data["release"] == "0.5.17"
        # the counter's site is the repeat_interleave line the census names
        assert m.data["file"].endswith("deepseek_v4_backend_hip_radix.py")
    locs = [e for e in f.evidence if e.kind == "location"]
    assert locs[0].function == ATTACH and locs[0].line and locs[0].file.endswith(
        "deepseek_v4_backend_hip_radix.py")
    assert locs[0].data["reach"] == "reaches" and locs[0].data["call"] == "repeat_interleave"
    assert measured[0].data["line"] == locs[0].line
    assert "repeat-interleave-output-size" in f.fixes


def test_probe_without_a_configuration_is_at_most_warn(release):
    """issue 13: with no backend and no server nothing is proven on a configured path."""
    for v in ("0.5.17", "0.5.23"):
        [f] = run_probe(get_probe("metadata-syncs"), _ctx(release(v)))
        assert f.status == Status.WARN, (v, f.summary)
        assert "would sync with --attention-backend" in f.summary and "dsa" in f.summary
        assert not any(e.kind == "metric" and e.metric.startswith("measured")
                       for e in f.evidence)


def test_probe_0523_fails_on_the_configured_dsa_path(release):
    [f] = run_probe(get_probe("metadata-syncs"), _ctx(release("0.5.23"), backend="dsa"))
    assert f.status == Status.FAIL
    assert "DeepseekSparseAttnBackend.init_forward_metadata" in f.summary
    hot = [e for e in f.evidence if e.kind == "location" and e.data["reach"] == "reaches"]
    assert hot and {e.data["backend"] for e in hot} == {"dsa"}
    # dsa_backend.py:1233 sits in an else that contradicts its branch: listed, never counted
    [dead] = [e for e in f.evidence if e.kind == "location" and e.line == 1233
              and e.file.endswith("/dsa_backend.py")]
    assert dead.data["reach"] == "unreachable" and dead.data["paths"] == []
    # dsa_backend.py:1082 runs only under `... if in_capture else ...`: capture-only
    [cap] = [e for e in f.evidence if e.kind == "location" and e.line == 1082
             and e.file.endswith("/dsa_backend.py")]
    assert cap.data["reach"] == "capture-only"
    for e in f.evidence:
        if e.kind == "location":
            assert set(e.data) == SITE_KEYS and e.data["source"] == "static"


def test_probe_0518_dsv4_one_step_draft_extend_does_not_reach_the_fixed_call(release):
    """0.5.18 gave draft-extend its output_size (the `need_compress` branch): the census sees
    the remaining repeat_interleave on target-extend/verify only, not on draft-extend."""
    [f] = run_probe(get_probe("metadata-syncs"), _ctx(release("0.5.18"), backend="dsv4"))
    [site] = [e for e in f.evidence if e.kind == "location" and e.function == ATTACH]
    assert site.data["paths"] == ["target-extend", "target-verify", "other"]
    assert site.data["reach"] == "reaches"  # target-verify is on the audited path


def test_probe_backend_option_narrows_the_highlight(release):
    [f] = run_probe(get_probe("metadata-syncs"), _ctx(release("0.5.23"), backend="triton"))
    assert f.status in (Status.WARN, Status.FAIL)
    assert "--attention-backend triton" in f.summary
    # triton_backend.py:500 (`_dcp_kv_indices`, reached under `if self.dcp_size > 1:` at
    # 553/893/1064) lies on draft-extend, which is audited; no dcp size given: the server's
    # default 1 (arg_groups/fields/parallel.py:52-58) leaves it out; with 2 it is live
    [s] = [e for e in f.evidence if e.kind == "location" and e.line == 500
           and e.file.endswith("/triton_backend.py")]
    assert s.data["reach"] == "unreachable" and "draft-extend" in s.data["paths"]
    assert s.data["modes"]["draft-extend"]["status"] == "unreachable"
    assert "dcp_size=1, not given: SGLang's default 1" in \
        s.data["modes"]["draft-extend"]["reason"]
    [two] = run_probe(get_probe("metadata-syncs"), _ctx(release("0.5.23"), backend="triton",
                                                        dcp_size=2))
    [s2] = [e for e in two.evidence if e.kind == "location" and e.line == 500
            and e.file.endswith("/triton_backend.py")]
    assert s2.data["reach"] == "reaches"
    assert s2.data["modes"]["draft-extend"]["status"] == "live"
    assert two.status == Status.FAIL  # a sync the configuration proves on its path
    # 1126 is the `else` of `extend_seq_lens_cpu is not None` (1123), a mirror 0.5.23 sets on
    # every extend batch (forward_batch_info.py:1241): listed, not on the path
    [m] = [e for e in f.evidence if e.kind == "location" and e.line == 1126
           and e.file.endswith("/triton_backend.py")]
    assert m.data["reach"] == "unreachable" and "draft-extend" in m.data["call_paths"]
    assert m.data["paths"] == []  # the release rules out each path the call graph gives it
    # no sync is proven on the path (the rest depend on the model): a warning, not a failure
    assert f.status == Status.WARN


def test_probe_skips_a_tree_without_attention_builders(tmp_path):
    (tmp_path / "sglang" / "srt").mkdir(parents=True)
    [f] = run_probe(get_probe("metadata-syncs"), _ctx(from_path(tmp_path)))
    assert f.status == Status.SKIP


def test_probe_json_through_the_cli(release):
    from diag.cli import main

    release("0.5.17")
    r = CliRunner().invoke(main, ["probe", "metadata-syncs", "--sglang", "0.5.17",
                                  "--no-execute", "--json", "--attention-backend", "dsv4"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    [f] = doc["findings"]
    assert f["status"] == "fail"
    loc = next(e for e in f["evidence"] if e["kind"] == "location")
    assert {"file", "line", "function", "data"} <= set(loc)
    assert set(loc["data"]) == SITE_KEYS
    # the per-phase totals are evidence `data`, and the report (with them) is schema-valid
    phases = [e["data"]["phase"] for e in f["evidence"] if "phase" in e.get("data", {})]
    assert phases == ["target-extend", "draft-extend", "target-verify", "draft-decode"]
    # and the attention forward's per-layer totals, apart (scope forward, no syncs_per_step)
    fwd = [e["data"]["forward_phase"] for e in f["evidence"]
           if e.get("data", {}).get("scope") == "forward"]
    assert fwd == phases
    from report_schema import check_report

    check_report(doc)


def test_factories_without_a_device_are_host_tensors(tmp_path):
    """`torch.arange(n)` is made on the host; `torch.zeros_like(x)` and ops follow their input."""
    from diag.probes.metadata_syncs.census.count import scan_file

    src = tmp_path / "standin_backend.py"
    src.write_text(
        "import torch\n\n\nclass StandInBackend:\n"
        "    def init_forward_metadata(self, forward_batch):\n"
        "        a = torch.arange(forward_batch.batch_size).tolist()\n"
        "        b = torch.zeros_like(forward_batch.seq_lens).tolist()\n"
        "        c = torch.arange(4, device=forward_batch.seq_lens.device).tolist()\n"
        "        d = torch.cumsum(forward_batch.seq_lens, 0).item()\n"
        "        return a, b, c, d\n")
    _, sites, _ = scan_file(src, "sglang/srt/layers/attention/standin_backend.py")
    verdicts = {s.line: s.verdict for s in sites}
    assert verdicts == {6: "host-mirror", 7: "syncs", 8: "syncs", 9: "syncs"}


def test_torch_equal_and_a_helpers_tuple_item_through_a_local(tmp_path):
    """`torch.equal` of device tensors returns a Python bool (one read back); `ref = helper()`
    then `ref[0]` is the helper's returned tuple's item, a `return None` aside (the shape of
    0.5.23 aiter_backend.py:1350-1359); a metadata field named for one of the class's device
    buffers (`self.forward_metadata.qo_indptr`, `self.qo_indptr` made on the device) is one.
    The forward scope reads `forward_extend`; the builders' scope does not."""
    from diag.probes.metadata_syncs.census.count import scan_file, scan_source
    from diag.probes.metadata_syncs.census.scopes import FORWARD

    src = tmp_path / "standin_backend.py"
    src.write_text(
        "import torch\n\n\ndef gather(seq_lens, flag):\n"
        "    if flag:\n        return None\n"
        "    return torch.cumsum(seq_lens, 0), seq_lens\n\n\n"
        "class StandInBackend:\n"
        "    def __init__(self, device):\n"
        "        self.qo_indptr = torch.zeros(9, device=device)\n\n"
        "    def init_forward_metadata(self, forward_batch):\n"
        "        ref = gather(forward_batch.seq_lens, False)\n"
        "        ok = torch.equal(ref[0], ref[1])\n"
        "        return ok\n\n"
        "    def forward_extend(self, q, k, v, layer, forward_batch):\n"
        "        return int(self.forward_metadata.qo_indptr[-1].item())\n")
    rel = "sglang/srt/layers/attention/standin_backend.py"
    _, sites, _ = scan_file(src, rel)
    assert [(s.line, s.kind, s.verdict, s.syncs) for s in sites] == [(16, "equal", "syncs", 1)]
    _, fwd, _ = scan_source(src.read_text(), src, rel, scope=FORWARD)
    assert [(s.line, s.kind, s.verdict) for s in fwd] == [(20, "item", "syncs")]
    assert set(fwd[0].paths) == {"target-extend", "draft-extend", "target-verify", "other"}


def test_every_call_on_a_line_getattr_fields_and_int_of_an_indexed_tensor(tmp_path):
    """issue 12 under-counts, on a stand-in builder (AST only): the inner `.cpu()` under an
    outer host read, `getattr(forward_batch, "seq_lens", None)` and `int(t[0])` of a device
    tensor are sites; `int(n)` of a Python value is not."""
    from diag.probes.metadata_syncs.census.count import scan_file

    src = tmp_path / "standin_backend.py"
    src.write_text(
        "class StandInBackend:\n"
        "    def init_forward_metadata(self, forward_batch):\n"
        "        a = forward_batch.extend_prefix_lens.cpu().tolist()\n"
        "        b = getattr(forward_batch, 'seq_lens', None).tolist()\n"
        "        c = int(forward_batch.extend_seq_lens[0])\n"
        "        n = len(a)\n"
        "        d = int(n)\n"
        "        return a, b, c, d\n")
    _, sites, _ = scan_file(src, "sglang/srt/layers/attention/standin_backend.py")
    got = sorted((s.line, s.kind, s.verdict) for s in sites)
    assert got == [(3, "cpu", "syncs"), (3, "tolist", "host-mirror"), (4, "tolist", "syncs"),
                   (5, "int()", "syncs")]


def test_paths_from_branches_capture_flags_and_callers(tmp_path):
    """Stand-in builder (AST only): a contradicting else is unreachable, a capture flag makes
    capture-only, a parameter every caller passes as None decides its `is None` test, and a
    helper gets the modes of its call sites."""
    from diag.probes.metadata_syncs.census.count import scan_file

    src = tmp_path / "standin_backend.py"
    src.write_text(
        "class StandInBackend:\n"
        "    def init_forward_metadata(self, forward_batch, in_capture=False):\n"
        "        if forward_batch.forward_mode.is_draft_extend_v2():\n"
        "            if forward_batch.forward_mode.is_draft_extend_v2():\n"
        "                self._helper(forward_batch.seq_lens)\n"
        "            else:\n"
        "                forward_batch.seq_lens.tolist()\n"
        "        if in_capture:\n"
        "            forward_batch.seq_lens.cpu()\n"
        "        if forward_batch.forward_mode.is_decode():\n"
        "            return\n"
        "        forward_batch.seq_lens.max().item()\n"
        "\n"
        "    def _helper(self, lens, extra=None):\n"
        "        lens.sum().item()\n"
        "        if extra is not None:\n"
        "            extra.tolist()\n")
    _, sites, _ = scan_file(src, "sglang/srt/layers/attention/standin_backend.py")
    got = {s.line: (s.verdict, s.paths, s.path_class) for s in sites}
    assert got[7] == ("unreachable", (), "unreachable")
    assert got[9] == ("capture-only", (), "capture-only")
    assert got[12][0] == "syncs" and "decode" not in got[12][1]
    # `lens`: no annotation, but its one caller (242) hands in forward_batch.seq_lens, a device
    # tensor: the callee's `.item()` reads it back
    assert got[15] == ("syncs", ("draft-extend",), "per-step")
    assert got[17] == ("unreachable", (), "unreachable")


def test_tui_sync_rows_read_data_not_prose(release):
    """The TUI's Syncs rows come from evidence data: blanking every detail changes nothing."""
    import dataclasses

    from diag.tui.data import finding_sync_rows

    [f] = run_probe(get_probe("metadata-syncs"), _ctx(release("0.5.17"), execute=True,
                                                      backend="dsv4"))
    rows = finding_sync_rows([f])
    blank = dataclasses.replace(f, evidence=[dataclasses.replace(e, detail=None)
                                             for e in f.evidence])
    assert finding_sync_rows([blank]) == rows
    assert rows[0].builder == "_attach_unified_kv_prefill_meta (draft-extend)"
    assert rows[0].before == 2 and rows[0].source == "measured (cpu)"
    static = [r for r in rows if r.source.startswith("static")]
    assert static[0].builder == ATTACH and static[0].source == "static, DE path"


def test_a_zero_dim_device_integer_index_is_read_back(tmp_path):
    """`req_to_token[req_pool_idx, a:b]` with `req_pool_idx = req_pool_indices[i]` (sglang 0.5.23
    torch_native_backend.py:138-139): PyTorch reads a 0-dim integer index back before the
    select (`aten._local_scalar_dense`, as the live counter sees it), one sync beside the slice
    bound's; `x[i]` alone is an `index` site; a 1-D device index tensor is advanced indexing
    (no read back), and a `range` loop variable is a Python int."""
    from diag.probes.metadata_syncs.census.count import scan_file

    src = tmp_path / "standin_backend.py"
    src.write_text(
        "class StandInBackend:\n"
        "    def init_forward_metadata(self, forward_batch):\n"
        "        out = []\n"
        "        for i in range(forward_batch.batch_size):\n"
        "            idx = forward_batch.req_pool_indices[i]\n"
        "            end = forward_batch.seq_lens[i]\n"
        "            out.append(self.req_to_token[idx, :end])\n"
        "            out.append(self.req_to_token[idx])\n"
        "            out.append(self.req_to_token[forward_batch.req_pool_indices, :4])\n"
        "            out.append(self.req_to_token[i, :4])\n"
        "        return out\n")
    _, sites, _ = scan_file(src, "sglang/srt/layers/attention/standin_backend.py")
    assert sorted((s.line, s.kind, s.verdict, s.syncs) for s in sites) == [
        (7, "slice-bound", "syncs", 2), (8, "index", "syncs", 1)]


def test_the_counter_sees_the_zero_dim_index_read():
    """The live side of the rule above, on CPU with device-tagged tensors."""
    import torch

    from diag.probes.metadata_syncs.sync_counter import DeviceTags, count_syncs

    table, idx = torch.arange(20).view(4, 5), torch.tensor([2, 0, 1])
    with count_syncs("cpu", DeviceTags(device=(idx,))) as rep:
        table[idx[0], 1:3]  # 1: the 0-dim device index
        table[idx, 1:3]  # 0: advanced indexing
    assert rep.count == 1
