"""The static census and the `metadata-syncs` probe against real SGLang releases."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from diag.context import Context, SpecConfig
from diag.findings import Status
from diag.probes import get as get_probe
from diag.probes.base import run_probe
from diag.probes.metadata_census import census
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
    # the DSV4 HIP builder's output_size is conditional (exact_num_tokens): not a sure sync
    assert not _sites(c, ATTACH, "syncs")
    assert [s.verdict for s in _sites(c, ATTACH)] == ["cannot-tell"]


def test_host_mirrors_and_capture_only_are_told_apart(censuses):
    c = censuses["0.5.17"]
    out_graph = "DeepseekV4HipRadixBackend.init_forward_metadata_out_graph"
    verdicts = {s.call: s.verdict for s in _sites(c, out_graph)}
    assert verdicts["seq_lens_cpu.max().item()"] == "host-mirror"
    assert verdicts["seq_lens.cpu()"] == "capture-only"  # under `if in_capture:`
    assert c.by_backend()["DeepseekV4HipRadixBackend"]["sync_count"] >= 2
    assert not c.errors


def _ctx(target, execute=False, backend=None):
    return Context(target=target, platform="hip", execute=execute,
                   config=SpecConfig(attention_backend=backend))


def test_probe_0517_fails_naming_the_builder_with_measured_counts(release):
    [f] = run_probe(get_probe("metadata-syncs"), _ctx(release("0.5.17"), execute=True))
    assert f.status == Status.FAIL
    assert "_attach_unified_kv_prefill_meta" in f.summary
    measured = [e for e in f.evidence if e.kind == "metric" and e.metric.startswith("measured")]
    assert [(m.metric.split("(")[-1], m.value) for m in measured] == [
        ("draft-extend)", 2), ("target-extend)", 2)]
    locs = [e for e in f.evidence if e.kind == "location"]
    assert locs[0].function == ATTACH and locs[0].line and locs[0].file.endswith(
        "deepseek_v4_backend_hip_radix.py")
    assert "repeat-interleave-output-size" in f.fixes


def test_probe_0523_names_still_syncing_builders(release):
    [f] = run_probe(get_probe("metadata-syncs"), _ctx(release("0.5.23")))
    assert f.status == Status.FAIL
    assert "DeepseekSparseAttnBackend.init_forward_metadata" in f.summary
    assert "QwenSparseAttnBackend._metadata_from_forward_batch" in f.summary
    funcs = {e.function for e in f.evidence if e.kind == "location"}
    assert {"MiniMaxSparseAttnBackend._build_prefill_meta",
            "DeepseekV4AttnBackend._build_late_layer_tail_metadata"} <= funcs
    assert not any(e.kind == "metric" and e.metric.startswith("measured") for e in f.evidence)


def test_probe_backend_option_narrows_the_highlight(release):
    [f] = run_probe(get_probe("metadata-syncs"), _ctx(release("0.5.23"), backend="triton"))
    assert f.status in (Status.WARN, Status.FAIL)
    assert "--attention-backend triton" in f.summary


def test_probe_skips_a_tree_without_attention_builders(tmp_path):
    (tmp_path / "sglang" / "srt").mkdir(parents=True)
    [f] = run_probe(get_probe("metadata-syncs"), _ctx(from_path(tmp_path)))
    assert f.status == Status.SKIP


def test_probe_json_through_the_cli(release):
    from diag.cli import main

    release("0.5.17")
    r = CliRunner().invoke(main, ["probe", "metadata-syncs", "--sglang", "0.5.17",
                                  "--no-execute", "--json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    [f] = doc["findings"]
    loc = next(e for e in f["evidence"] if e["kind"] == "location")
    assert {"file", "line", "function"} <= set(loc)


def test_factories_without_a_device_are_host_tensors(tmp_path):
    """`torch.arange(n)` is made on the host; `torch.zeros_like(x)` and ops follow their input."""
    from diag.probes.metadata_census import scan_file

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
