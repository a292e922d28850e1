"""Syncs per step for the configuration under audit: the census's guards decided (issue 30).

The GPU lane's configuration (SGLang 0.5.23, CUDA, `--attention-backend triton`, EAGLE,
`--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3`, page
size 1, no dcp, tp 1) measured 0 syncs per step in every phase. Expected values, read from the
0.5.23 source (never from running diag), sglang/srt/layers/attention/triton_backend.py:
- 500 `int(dcp_lens.sum().item())` is in `_dcp_kv_indices` (485); its callers are all under
  `if self.dcp_size > 1:` (553 in `_update_decode_kv_buffers`, 893 on decode/idle, 1064 on
  extend), and `self.dcp_size` is `get_parallel().attn_dcp_size` (263) unless a HIP DSpark
  draft (260): with `--dcp-size 1` it never runs, with 2 it runs on draft-decode, draft-extend
  and target-extend (target-verify takes 976's `_dcp_lens`, no host read).
- 1126 `int(forward_batch.extend_seq_lens.max())` is the `else` of `if
  forward_batch.extend_seq_lens_cpu is not None:` (1123); the mirror is set on every extend batch
  (model_executor/forward_batch_info.py:1241) and on the EAGLE draft extend that hands device
  tensors in (speculative/eagle_worker_common.py:222): it never runs.
- 455 `seq_lens.repeat_interleave(num_group)`: `num_group = num_token // num_seq` (441) of
  `.shape[0]` ints (437): a Python int, no sync (not a site).
- 2877 `torch.empty(window_kv_indptr[-1], ...)` (a device scalar as a size: `window_kv_indptr`
  is the device buffer every caller hands in), 2897/2899 `window_kv_indices[:kv_last_index]`
  (`kv_last_index = window_kv_indptr[-1]`, 2896: slice bounds) are in `update_sliding_window_buffer`
  (2845), called only under `if self.sliding_window_size is not None and
  self.sliding_window_size > 0:` (572 and the other call sites), a value the model runner takes
  from the model (model_runner_components/load_model_utils.py:144-157): no window for a
  `LlamaForCausalLM` target or a `LlamaForCausalLMEagle` draft (neither class defines
  `get_attention_sliding_window_size`, their config.json has no `sliding_window` or
  `attention_chunk_size`), so the lane's models rule them out; without the models they depend.
AST only: no SGLang import.
"""

from __future__ import annotations

import ast
import json
import sys

import pytest
from report_schema import check_report
from standin_sglang_server import StandinSGLangServer, server_info

from diag.context import Context, SpecConfig
from diag.probes import get as get_probe
from diag.probes.base import run_probe
from diag.probes.metadata_syncs.census.count import census
from diag.probes.metadata_syncs.census.guards import guards_of
from diag.probes.metadata_syncs.census_config import decide_guard

pytestmark = pytest.mark.release
TRITON = "sglang/srt/layers/attention/triton_backend.py"
LANE = dict(attention_backend="triton", speculative_algorithm="EAGLE", speculative_num_steps=2,
            speculative_eagle_topk=1, speculative_num_draft_tokens=3, page_size=1, tp_size=1)


def _model(root, arch: str, **more) -> str:
    d = root / arch
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": "llama",
                                               **more}))
    return str(d)


@pytest.fixture
def lane(tmp_path):
    """The lane's configuration with its models (diag.kit.tiny_model's config.json shapes)."""
    return LANE | {"model": _model(tmp_path, "LlamaForCausalLM"),
                   "draft_model": _model(tmp_path, "LlamaForCausalLMEagle")}


def _phases(release, **cfg):
    ctx = Context(target=release("0.5.23"), platform="cuda", execute=False,
                  config=SpecConfig(**cfg))
    [f] = run_probe(get_probe("metadata-syncs"), ctx)
    return f, {e.data["phase"]: e.data for e in f.evidence
               if e.kind == "metric" and e.data and "phase" in e.data}


def test_lane_configuration_gives_zero_in_every_phase(release, lane):
    f, phases = _phases(release, **lane, dcp_size=1)
    assert {p: d["syncs_per_step"] for p, d in phases.items()} == {
        "target-extend": 0, "draft-extend": 0, "target-verify": 0, "draft-decode": 0}
    assert all(d["exact"] and not d["depends"] for d in phases.values())
    gone = {p: {u["at"]: u["reason"] for u in d["unreachable"]} for p, d in phases.items()}
    for p in ("target-extend", "draft-extend"):
        why = gone[p][f"{TRITON}:500"]
        assert why.startswith("config: dcp_size=1") and "self.dcp_size > 1" in why
    # draft decode reaches none of them: the multi-step backend sets the spec input's
    # kv_indptr before each per-step call (triton_backend.py:2624), the decode branch needs it
    # unset (:891) and the graph path asserts no spec input (:1411)
    assert not phases["draft-decode"]["unreachable"] and not phases["draft-decode"]["at"]
    for p in ("target-extend", "draft-extend"):
        why = gone[p][f"{TRITON}:1126"]
        assert why.startswith("release: extend_seq_lens_cpu is set") and \
            "forward_batch_info.py:1241" in why
    for p in ("target-extend", "draft-extend", "target-verify"):  # the sliding-window
        for line in (2877, 2897, 2899):  # buffers: neither model has a window
            why = gone[p][f"{TRITON}:{line}"]
            assert why.startswith("model: LlamaForCausalLM") and "no sliding window" in why
    # the site itself, in the evidence: unreachable for this configuration, with the reason
    [site] = [e.data for e in f.evidence if e.kind == "location" and e.file == TRITON
              and e.line == 500]
    assert site["status"] == "unreachable" and site["reach"] == "unreachable"
    assert all(d["status"] == "unreachable" and "dcp_size=1" in d["reason"]
               for d in site["modes"].values())
    assert any("self.dcp_size > 1" == g["condition"] for g in site["guards"])
    assert site["callers"]  # the chain to an entry point is kept
    assert "0 on the --attention-backend triton path" in f.summary


def test_dcp_two_makes_the_dcp_site_live(release, lane):
    """With dcp 2 the site counts: it runs only when the caller passes no `kv_indices`
    (triton_backend.py:498 `if kv_indices is None:`). Read by hand, per mode: the extend
    branch of init_forward_metadata (1065-1069) is the only call on an extend path and passes
    none, so there the count is exact; a draft-decode batch reaches neither the eager decode
    call (896-900, under :891) nor the graph-buffer refresh (556-560, after the assert :1411)."""
    _, phases = _phases(release, **lane, dcp_size=2)
    totals = {p: d["syncs_per_step"] for p, d in phases.items()}
    assert totals == {"target-extend": 1, "draft-extend": 1, "target-verify": 0,
                      "draft-decode": 0}
    for p in ("target-extend", "draft-extend"):
        assert phases[p]["at"] == [f"{TRITON}:500"] and phases[p]["exact"], phases[p]
        assert not phases[p]["depends"]
    # a draft-decode batch has the spec input's kv_indptr set (triton_backend.py:2624): the
    # decode branch (:891) and the graph path (asserting no spec input, :1411) are closed
    assert phases["draft-decode"]["exact"] and not phases["draft-decode"]["at"]
    assert phases["target-verify"]["exact"]


def test_without_the_models_the_sliding_window_sites_are_an_upper_bound(release):
    """No model given: the three window sites (2877, 2897, 2899) stay in every phase's count,
    `depends` on the model's sliding window (a configuration fact not given: a warning, not a
    failure)."""
    f, phases = _phases(release, **LANE, dcp_size=1)
    assert {p: d["syncs_per_step"] for p, d in phases.items()} == {
        "target-extend": 3, "draft-extend": 3, "target-verify": 3, "draft-decode": 0}
    # draft decode reaches none of them, whatever the model (triton_backend.py:2624, 891,
    # 1411: test_syncs_hand_census.py's test_triton_draft_decode_reaches_no_sync_site)
    assert phases.pop("draft-decode")["exact"]
    for p, d in phases.items():
        assert not d["exact"]
        deps = {x["at"]: x["condition"] for x in d["depends"]}
        assert set(deps) == {f"{TRITON}:{n}" for n in (2877, 2897, 2899)}
        who = "draft" if p in ("draft-extend", "draft-decode") else "target"
        assert all(f"the {who} model's sliding window" in c and "self.sliding_window_size" in c
                   for c in deps.values())
    assert f.status.value == "warn"


def test_a_model_with_its_own_window_leaves_the_sites_depending(release, tmp_path):
    """Gemma2ForCausalLM defines get_attention_sliding_window_size (0.5.23 models/gemma2.py:457)
    and an EAGLE3 draft does too (models/llama_eagle3.py:383): the sites depend on them, named;
    a model with attention_chunk_size has a window of that size: the model's tests hold, and
    the sites depend only on their own data tests (2875 `window_kv_indices is None`, 2895 the
    pool's kind)."""
    cfg = LANE | {"model": _model(tmp_path, "Gemma2ForCausalLM", sliding_window=4096),
                  "draft_model": _model(tmp_path, "LlamaForCausalLMEagle3")}
    _, phases = _phases(release, **cfg, dcp_size=1)
    tv = {x["at"]: x["condition"] for x in phases["target-verify"]["depends"]}
    assert "Gemma2ForCausalLM sets its own sliding window (sglang/srt/models/gemma2.py:457)" \
        in tv[f"{TRITON}:2877"]
    de = {x["at"]: x["condition"] for x in phases["draft-extend"]["depends"]}
    assert "LlamaForCausalLMEagle3 sets its own sliding window " \
        "(sglang/srt/models/llama_eagle3.py:383)" in de[f"{TRITON}:2877"]
    chunked = LANE | {"model": _model(tmp_path / "c", "LlamaForCausalLM",
                                      attention_chunk_size=8192)}
    _, phases = _phases(release, **chunked, dcp_size=1)
    tv = {x["at"]: x["condition"] for x in phases["target-verify"]["depends"]}
    assert phases["target-verify"]["syncs_per_step"] == 3
    assert set(tv) == {f"{TRITON}:{n}" for n in (2877, 2897, 2899)}
    assert all("sliding_window_size" not in c for c in tv.values())
    assert "window_kv_indices is None" in tv[f"{TRITON}:2877"]
    assert "BaseSWAKVPool" in tv[f"{TRITON}:2897"]


def test_census_keeps_guards_and_finds_no_lookalike(release):
    c = census(release("0.5.23"))
    [s500] = [s for s in c.sites if s.file == TRITON and s.line == 500]
    assert ("dcp_size", ">", 1) in [g[:3] for g in s500.guards]
    [s1126] = [s for s in c.sites if s.file == TRITON and s.line == 1126]
    assert [g[:3] for g in s1126.guards] == [("mirror:extend_seq_lens_cpu", "is", None)]
    assert not [s for s in c.sites if s.file == TRITON and s.line == 455]


@pytest.mark.parametrize(("src", "holds", "want"), [
    ("self.dcp_size > 1", True, [("dcp_size", ">", 1)]),
    ("self.dcp_size > 1", False, [("dcp_size", "<=", 1)]),
    ("not self.topk > 1", True, [("speculative_eagle_topk", "<=", 1)]),
    ("1 < self.page_size and x", True, [("page_size", ">", 1), ("data:x", "true", None)]),
    ("self.dcp_size > 1 or x", True, []),  # a disjunction decides nothing on its body
    ("self.dcp_size > 1 or x", False, [("dcp_size", "<=", 1), ("data:x", "false", None)]),
    ("fb.seq_lens_cpu is None", False, [("mirror:seq_lens_cpu", "is not", None)]),
    # not a configuration fact: a data condition, kept so that no count over it is exact
    ("self.num_heads > 1", True, [("data:self.num_heads > 1", "true", None)]),
    ("forward_batch.forward_mode.is_decode()", True, []),  # shapes the paths instead
    # the model's window (probes.metadata_syncs.model_facts): a fact the model decides
    ("self.sliding_window_size is not None and self.sliding_window_size > 0", True,
     [("model:sliding_window_size", "is not", None), ("model:sliding_window_size", ">", 0)]),
    ("in_capture", True, []),
    # flashinfer's wrapper dispatch, as the backend sets it from the model (0.5.23
    # flashinfer_backend.py:411-419)
    ("self.attn_backend.dispatch_reason == WrapperDispatch.SLIDING_WINDOW", True,
     [("model:sliding_window_size", "is not", None)]),
    ("self.attn_backend.dispatch_reason == WrapperDispatch.SLIDING_WINDOW", False,
     [("model:sliding_window_size", "is", None)]),
    ("self.dispatch_reason == WrapperDispatch.CROSS_ATTENTION", False,
     [("model:encoder_decoder", "!=", True)]),
])
def test_guards_of_a_test(src, holds, want):
    got = guards_of(ast.parse(src, mode="eval").body, "f.py:1", holds)
    assert [g[:3] for g in got] == want


def test_decide_guard_values():
    g = ("dcp_size", ">", 1, "f.py:1", "self.dcp_size > 1")
    assert decide_guard(g, SpecConfig(dcp_size=1), "decode", "0.5.23")[0] is False
    assert decide_guard(g, SpecConfig(dcp_size=4), "decode", "0.5.23")[0] is True
    assert decide_guard(g, SpecConfig(), "decode", "0.5.23")[0] is None
    m = ("mirror:extend_seq_lens_cpu", "is", None, "f.py:2", "x.extend_seq_lens_cpu is None")
    assert decide_guard(m, SpecConfig(), "draft-extend", "0.5.23")[0] is False
    # read in 0.5.17 too (eagle_worker_common.py:193 sets it on the gpu-only draft extend),
    # and 0.5.15 (base_spec_worker.py:158), not in 0.5.12 (a v1 worker builds it too) nor in a
    # release not named
    assert decide_guard(m, SpecConfig(), "draft-extend", "0.5.17")[0] is False
    held, why = decide_guard(m, SpecConfig(), "draft-extend", "0.5.15")
    assert held is False and "base_spec_worker.py:158" in why
    assert decide_guard(m, SpecConfig(), "draft-extend", "0.5.12")[0] is None  # not read
    assert decide_guard(m, SpecConfig(), "draft-extend", "0.5.24")[0] is None
    s = ("mirror:seq_lens_cpu", "is", None, "f.py:5", "x.seq_lens_cpu is None")
    # target-extend: 0.5.19+ rebuild it on a mixed chunk after merge_batch; 0.5.16 - 0.5.18
    # refuse a mixed chunk under speculative decoding (0.5.18 server_args.py:9193-9196;
    # prepare_for_extend sets the copy at schedule_batch.py:2410); 0.5.15 too (server_args.py:
    # 6602-6605; schedule_batch.py:2052), `seq_lens_cpu_cache` never set (forward_batch_info.py:
    # 662-673 then takes the batch's copy); a release not named is not read
    assert decide_guard(s, SpecConfig(), "target-extend", "0.5.21")[0] is False
    held, why = decide_guard(s, SpecConfig(), "target-extend", "0.5.18")
    assert held is False and "schedule_batch.py:2410" in why
    assert decide_guard(s, SpecConfig(), "target-extend", "0.5.16")[0] is False
    held, why = decide_guard(s, SpecConfig(), "target-extend", "0.5.15")
    assert held is False and "schedule_batch.py:2052" in why
    assert decide_guard(s, SpecConfig(), "target-extend", "0.5.24")[0] is None
    assert decide_guard(m, SpecConfig(), "decode", "0.5.23")[0] is None
    from diag.probes.metadata_syncs.model_facts import Window

    w = ("model:sliding_window_size", "is not", None, "f.py:4", "self.sliding_window_size ...")
    none, some = Window(True, None, "no window"), Window(True, 4096, "a window")
    assert decide_guard(w, SpecConfig(), "target-verify", "0.5.23",
                        models={"target": none})[0] is False
    assert decide_guard(w, SpecConfig(), "target-verify", "0.5.23",
                        models={"target": some})[0] is True
    # the draft's decode and extend run on the draft model's backend
    assert decide_guard(w, SpecConfig(), "decode", "0.5.23", models={"target": none})[0] is None
    assert decide_guard(w, SpecConfig(), "decode", "0.5.23",
                        models={"target": some, "draft": none})[0] is False
    d = ("data:x", "true", None, "f.py:3", "x")
    assert decide_guard(d, SpecConfig(dcp_size=1), "decode", "0.5.23")[0] is None


def _lane_checks():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_engine" / "checks.py"
    spec = importlib.util.spec_from_file_location("lane_checks", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_server_fills_the_configuration_and_the_lane_reads_exact_totals(release, lane):
    """What the lane runs: `diag probe metadata-syncs --server URL --no-execute --json`."""
    from click.testing import CliRunner

    from diag.cli import main

    checks = _lane_checks()
    release("0.5.23")
    with StandinSGLangServer() as s:
        s.json("/server_info", server_info(
            attention_backend="triton", steps=2, speculative_eagle_topk=1,
            speculative_num_draft_tokens=3, page_size=1, dcp_size=1, tp_size=1,
            model_path=lane["model"], speculative_draft_model_path=lane["draft_model"]))
        r = CliRunner().invoke(main, ["probe", "metadata-syncs", "--sglang", "0.5.23",
                                      "--platform", "cuda", "--server", s.url, "--no-execute",
                                      "--json"])
    doc = json.loads(r.stdout)
    check_report(doc)
    assert doc["config"]["dcp_size"] == 1 and doc["config"]["source"] == "server"
    assert checks.census_per_phase(doc) == {"target-extend": 0, "draft-extend": 0,
                                            "target-verify": 0, "draft-decode": 0}
    assert checks.census_exact(doc) == {"target-extend": True, "draft-extend": True,
                                        "target-verify": True, "draft-decode": True}


def test_npu_only_builder_is_unreachable_on_hip_and_cuda(release):
    """minimax_sparse_backend.py 0.5.23: `_build_prefill_meta` (1102) syncs at 1121-1135, but
    its only caller is `_forward_npu_triton_prefill` (1221), called only under `if
    self.is_npu:` (1553) in forward_extend: the guard on its call sites is kept, and on HIP
    (and CUDA) the probe lists the sites as unreachable, with the platform as the reason."""
    minimax = "sglang/srt/layers/attention/minimax_sparse_backend.py"
    c = census(release("0.5.23"))
    sites = [s for s in c.sites if s.file == minimax and 1121 <= s.line <= 1135]
    assert sorted({s.line for s in sites}) == [1121, 1126, 1129, 1135]
    assert all(("platform", "==", "npu") in [g[:3] for g in s.guards] for s in sites)
    for platform in ("hip", "cuda"):
        ctx = Context(target=release("0.5.23"), platform=platform, execute=False)
        [f] = run_probe(get_probe("metadata-syncs"), ctx)
        rows = [e.data for e in f.evidence if e.kind == "location" and e.file == minimax
                and 1121 <= e.line <= 1135]
        assert len(rows) == 4 and all(r["status"] == "unreachable" for r in rows)
        assert all(d["reason"].startswith(f"platform: {platform}")
                   for r in rows for d in r["modes"].values())


def test_draft_model_option_decides_the_draft_window_and_refuses_a_bad_path(release, lane):
    """`--model` and `--draft-model` on the command line give what a server gives: every phase
    of the lane's configuration exact, 0; a --draft-model without config.json is exit 2."""
    from click.testing import CliRunner

    from diag.cli import main

    release("0.5.23")
    args = ["probe", "metadata-syncs", "--sglang", "0.5.23", "--platform", "cuda",
            "--attention-backend", "triton", "--speculative-num-steps", "2",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3",
            "--page-size", "1", "--dcp", "1", "--no-execute", "--json"]
    r = CliRunner().invoke(main, [*args, "--model", lane["model"],
                                  "--draft-model", lane["draft_model"]])
    doc = json.loads(r.stdout)
    checks = _lane_checks()
    assert checks.census_per_phase(doc) == {"target-extend": 0, "draft-extend": 0,
                                            "target-verify": 0, "draft-decode": 0}
    assert all(checks.census_exact(doc).values())
    bad = CliRunner().invoke(main, [*args, "--draft-model", lane["model"] + "-missing"])
    assert bad.exit_code == 2 and "--draft-model" in bad.output and "config.json" in bad.output


@pytest.mark.parametrize(("version", "line"), [("0.5.23", 1115), ("0.5.19", 797)])
def test_the_dsa_eager_length_read_never_runs_on_a_prefill(release, version, line):
    """Read by hand: DeepseekSparseAttnBackend.init_forward_metadata reads
    `forward_batch.seq_lens.max().item()` (0.5.23 layers/attention/dsa_backend.py:1115, 0.5.19
    :797) only in the `else` of `if forward_batch.seq_lens_cpu is not None:` (1107 / 789).
    A prefill batch always carries the host lengths: ScheduleBatch.prepare_for_extend sets them
    (0.5.23 managers/schedule_batch.py:2888, 0.5.19 :2545) and a mixed chunk under speculative
    decoding rebuilds them (0.5.23 :3303-3311, 0.5.19 :2921-2941). So on target-extend the read
    is unreachable; on the decode-side phases the spec-v2 relay nulls the mirror under the
    overlap scheduler (0.5.23 managers/overlap_utils.py:615-619; tests/test_host_lengths.py):
    without the server's overlap setting it stays an upper bound with that condition."""
    ctx = Context(target=release(version), platform="hip", execute=False,
                  config=SpecConfig(attention_backend="dsa", speculative_algorithm="EAGLE",
                                    speculative_num_steps=3, speculative_eagle_topk=1))
    [f] = run_probe(get_probe("metadata-syncs"), ctx)
    phases = {e.data["phase"]: e.data for e in f.evidence
              if e.kind == "metric" and e.data and "phase" in e.data}
    at = f"sglang/srt/layers/attention/dsa_backend.py:{line}"
    assert at not in {x["at"] for x in phases["target-extend"]["depends"]}
    for phase in ("target-verify", "draft-decode"):
        dep = {x["at"]: x["condition"] for x in phases[phase]["depends"]}
        assert "under the overlap scheduler None" in dep[at] and "--overlap-schedule" in dep[at]
    [gone] = [u for u in phases["target-extend"]["unreachable"] if u["at"] == at]
    assert gone["syncs"] == 1 and "seq_lens_cpu is set on every target-extend batch" in gone["reason"]
    assert at not in phases["target-extend"]["at"]


FLASHINFER = "sglang/srt/layers/attention/flashinfer_backend.py"


def test_flashinfer_updaters_follow_the_models_wrapper_dispatch(release, tmp_path):
    """flashinfer's updaters bind `self.update` by the backend's wrapper dispatch (0.5.23
    flashinfer_backend.py:1615-1621 and 1906-1912), which the model decides (411-419): a
    sliding window -> update_sliding_window, an encoder-decoder model (configs/model_config.py:
    871, the list at 2540-2546) -> update_cross_attention, else update_single_wrapper. Read from
    the source: for Llama target and EAGLE draft (no window, not encoder-decoder) the
    sliding-window sums (2038, 2057), host copies (2118-2120) and the SWA pool's slice bounds
    (2309/2311: only update_sliding_window passes use_sliding_window_kv_pool, 2081-2094; the
    single wrapper leaves it False, 1967-1985) cannot run, nor the cross-attention sum (2177);
    the single wrapper's ragged prefix sum (1962) runs on the draft extend when use_ragged and
    no host copy of the prefix lengths is handed in (1955-1962; the gpu-only draft extend sets
    none, speculative/eagle_worker_common.py:182-186, 222), which no configuration input
    decides. (On target-extend the census keeps it too, an upper bound: the hand census's
    known miss.)
    A Whisper target runs the cross-attention updater on the target's phases (2177, inside the
    loop over its two wrappers) while the EAGLE draft keeps the single wrapper."""
    llama = LANE | {"attention_backend": "flashinfer", "dcp_size": 1,
                    "model": _model(tmp_path, "LlamaForCausalLM"),
                    "draft_model": _model(tmp_path, "LlamaForCausalLMEagle")}
    _, phases = _phases(release, **llama)
    swa = {f"{FLASHINFER}:{n}" for n in (2038, 2057, 2118, 2119, 2120, 2136, 2177, 2309, 2311)}
    for p in ("target-extend", "draft-extend", "target-verify"):
        at = set(phases[p]["at"])
        assert not at & swa, (p, at & swa)
    deps = {x["at"]: x["condition"] for x in phases["draft-extend"]["depends"]}
    assert "`use_ragged`" in deps[f"{FLASHINFER}:1962"]
    assert "extend_prefix_lens_cpu is not None" in deps[f"{FLASHINFER}:1962"]
    gone = {x["at"]: x["reason"] for x in phases["target-verify"]["unreachable"]}
    assert "LlamaForCausalLM: no sliding window" in gone[f"{FLASHINFER}:2057"]
    assert f"{FLASHINFER}:1962" not in phases["target-verify"]["at"]  # use_ragged=False, 1033
    whisper = llama | {"model": _model(tmp_path, "WhisperForConditionalGeneration")}
    _, phases = _phases(release, **whisper)
    tv = {x["at"]: x["condition"] for x in phases["target-verify"]["depends"]}
    assert f"{FLASHINFER}:2177" in tv and "in a loop" in tv[f"{FLASHINFER}:2177"]
    assert f"{FLASHINFER}:2177" not in phases["draft-extend"]["at"]
    assert f"{FLASHINFER}:1962" in phases["draft-extend"]["at"]
    # no model: which updater runs is not decided, and the condition says what would decide it
    _, phases = _phases(release, **(LANE | {"attention_backend": "flashinfer", "dcp_size": 1}))
    cond = {x["at"]: x["condition"] for x in phases["draft-extend"]["depends"]}
    assert "the draft model's sliding window" in cond[f"{FLASHINFER}:1962"]
    assert "whether the draft model is an encoder-decoder model" in cond[f"{FLASHINFER}:1962"]
    assert "WrapperDispatch.CROSS_ATTENTION" in cond[f"{FLASHINFER}:1962"]


@pytest.mark.parametrize("version,line", [("0.5.15", 736), ("0.5.15.post1", 746),
                                          ("0.5.16", 781), ("0.5.17", 794), ("0.5.18", 796)])
def test_dsa_device_max_is_off_target_extend_before_the_rebuild(release, version, line):
    """DSA's `int(forward_batch.seq_lens.max().item())` runs only in the `else` of `if
    forward_batch.seq_lens_cpu is not None:` (0.5.18 dsa_backend.py:788-796). A target-extend
    batch has the copy in 0.5.16 - 0.5.18 too: prepare_for_extend sets it (0.5.18
    schedule_batch.py:2410, no return before it), a mixed chunk, the one merge that could null
    it (merge_batch :3241-3242, `mix_with_running` makes MIXED :2750), is refused under
    speculative decoding (server_args.py:9193-9196), and a DLLM_EXTEND or PREBUILT batch is
    never merged. So the site lies on the draft and decode-side paths only.
    0.5.15 / 0.5.15.post1 (the read at dsa_backend.py:736 / :746, in the `else` of :728 /
    :738): prepare_for_extend sets the copy (0.5.15 schedule_batch.py:2052, no return since
    :2011), a mixed chunk is refused (server_args.py:6602-6605), and init_new takes
    `batch.seq_lens_cpu` (forward_batch_info.py:673) since `seq_lens_cpu_cache` is never set
    (declared at schedule_batch.py:1841, assigned nowhere else)."""
    from diag.probes.metadata_syncs.census.count import census
    from diag.probes.metadata_syncs.census_config import release_paths

    t = release(version)
    [s] = [s for s in census(t).sites if s.file.endswith("/dsa_backend.py") and s.line == line]
    assert "seq_lens.max()" in s.call
    assert {"target-extend", "other"} <= set(s.paths)  # the call graph's, before the facts
    assert release_paths(s, version) == ("draft-extend", "target-verify", "decode")


@pytest.mark.parametrize("version", ["0.5.15", "0.5.15.post1"])
def test_fa3_local_host_copy_is_off_target_extend_in_the_older_releases(release, version):
    """FlashAttentionBackend.init_forward_metadata copies the device lengths to the host only
    where the batch has no host copy (`forward_batch.seq_lens_cpu if forward_batch.seq_lens_cpu
    is not None else seqlens_in_batch.cpu()`, 0.5.15 and 0.5.15.post1
    flashattention_backend.py:581-585). A target-extend batch has it (prepare_for_extend,
    schedule_batch.py:2052 / :2053, handed on by init_new, forward_batch_info.py:673): the copy
    lies on the decode-side and draft paths only."""
    from diag.probes.metadata_syncs.census.count import census
    from diag.probes.metadata_syncs.census_config import release_paths

    t = release(version)
    [s] = [s for s in census(t).sites if s.file.endswith("/flashattention_backend.py")
           and s.line == 584]
    assert s.call == "seqlens_in_batch.cpu()"
    assert "target-extend" in s.paths  # the call graph's, before the facts
    assert "target-extend" not in release_paths(s, version)
    assert {"draft-extend", "target-verify", "decode"} <= set(release_paths(s, version))


@pytest.mark.parametrize("version,line", [("0.5.13", 768), ("0.5.14", 761), ("0.5.15", 883)])
def test_triton_device_max_is_off_target_extend_in_the_older_releases(release, version, line):
    """TritonAttnBackend's extend metadata reads `int(forward_batch.extend_seq_lens.max())`
    only in the `else` of `if forward_batch.extend_seq_lens_cpu is not None:` (0.5.13
    triton_backend.py:765-768, 0.5.15 :880-883). A target-extend batch has the host copy:
    init_new sets it from the batch's list (0.5.13 forward_batch_info.py:769, 0.5.15 :825,
    under `isinstance(extend_seq_lens, list)`; `batch.extend_lens`, :592 / :647, is the list
    prepare_for_extend builds, schedule_batch.py:1910 / :2025). A draft-extend batch has it
    too: its one maker, `prepare_for_draft_extend` (0.5.15 speculative/base_spec_worker.py:
    92-158, 0.5.14 the same lines, 0.5.13 eagle_info_v2.py:330-362), hands init_new lists
    (:133-134) or, gpu-only, sets `forward_batch.extend_seq_lens_cpu = [num_draft_tokens] * bs`
    (:158; 0.5.13 :362). A DLLM extend is prepare_for_extend's batch too (its arm before the
    lists, 0.5.15 schedule_batch.py:2016) and a PREBUILT one runs no forward (scheduler.py:
    3210): no mode of the release reaches the read."""
    from diag.probes.metadata_syncs.census.count import census
    from diag.probes.metadata_syncs.census_config import release_paths

    [s] = [s for s in census(release(version)).sites
           if s.file.endswith("/triton_backend.py") and s.line == line]
    assert s.call == "int(forward_batch.extend_seq_lens.max())"
    assert "target-extend" in s.paths
    assert release_paths(s, version) == ()
