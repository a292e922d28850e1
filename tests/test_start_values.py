"""What a server starts with for the facts a configuration under audit leaves out
(probes.startup.start_values), and the census's per-phase counts decided by it.

Expected values are read by hand from the releases' sources, cited by `file:line`:
- `dcp_size` defaults to 1: 0.5.23 arg_groups/fields/parallel.py:52-58 (`dcp_size: A[int,
  Arg(help="The decode context parallelism size.", ...)] = 1`), 0.5.19 server_args.py:945-952,
  0.5.15 server_args.py:823-829 (declared twice there, :877 too, both 1); 0.5.14 has no such
  argument. No argument hook of 0.5.15 - 0.5.23 assigns it (it is read: 0.5.23
  arg_groups/parallel_hook.py:243-266, kv_cache_hook.py:457; deepseek_v2.py:69's
  `dcp_size = getattr(cfg, "dcp_size", 1)` is a local).
- the page size: 0.5.23 arg_groups/overrides.py:1341-1363 `_page_size_default`: 1 unless HIP
  with SGLANG_AITER_KV_CACHE_LAYOUT=vectorized_5d (64, :1352-1360); a DSA model on CUDA gets
  `64 * index_kpool` (arg_groups/model_overrides/deepseek_v2.py:171-173).
"""

from __future__ import annotations

import json

import pytest

from diag.context import Context, SpecConfig
from diag.probes import get as get_probe
from diag.probes.base import run_probe
from diag.probes.startup.start_values import start_values

TRITON = "sglang/srt/layers/attention/triton_backend.py"
LANE = dict(attention_backend="triton", speculative_algorithm="EAGLE", speculative_num_steps=2,
            speculative_eagle_topk=1, speculative_num_draft_tokens=3, page_size=1, tp_size=1)


def _model(root, arch: str) -> str:
    d = root / arch
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": "llama"}))
    return str(d)


@pytest.fixture
def lane(tmp_path):
    return LANE | {"model": _model(tmp_path, "LlamaForCausalLM"),
                   "draft_model": _model(tmp_path, "LlamaForCausalLMEagle")}


def _phases(release, version="0.5.23", platform="cuda", **cfg):
    ctx = Context(target=release(version), platform=platform, execute=False,
                  config=SpecConfig(**cfg))
    [f] = run_probe(get_probe("metadata-syncs"), ctx)
    return f, {e.data["phase"]: e.data for e in f.evidence
               if e.kind == "metric" and e.data and "phase" in e.data}


@pytest.mark.parametrize("version,at", [
    ("0.5.23", "sglang/srt/arg_groups/fields/parallel.py:52"),
    ("0.5.19", "sglang/srt/server_args.py:945"),
    ("0.5.15", "sglang/srt/server_args.py:823"),
])
def test_dcp_not_given_is_the_default_one(release, version, at):
    cfg = start_values(release(version), "cuda", SpecConfig(attention_backend="triton"),
                       "triton")
    assert cfg.dcp_size == 1
    assert dict(cfg.start_values)["dcp_size"] == f"not given: SGLang's default 1 ({at})"


def test_no_dcp_argument_and_no_configuration_fill_nothing(release):
    assert start_values(release("0.5.14"), "cuda", SpecConfig(attention_backend="triton"),
                        "triton").dcp_size is None  # no decode-context parallelism there
    bare = SpecConfig()  # nothing under audit: the census stays the release's upper bound
    assert start_values(release("0.5.23"), "cuda", bare, None) is bare
    given = SpecConfig(attention_backend="triton", dcp_size=2)
    assert start_values(release("0.5.23"), "cuda", given, "triton").dcp_size == 2
    # a live server's arguments are what it resolved at start: taken as they are
    served = SpecConfig(attention_backend="triton", source="server")
    assert start_values(release("0.5.23"), "cuda", served, "triton") is served


def test_a_hook_that_sets_dcp_leaves_it_undecided(release, tmp_path):
    """A release whose argument handling assigns `dcp_size` after parsing: its default is not
    what the server runs with, so the fact stays not given (a copy of 0.5.23 with one hook
    line added; the cached release is never written)."""
    from tests.damaged_tree import copy_with as _copy_with

    real = release("0.5.23").root
    rel = "sglang/srt/arg_groups/parallel_hook.py"
    text = (real / rel).read_text() + "\n\ndef _widen(cfg):\n    cfg.dcp_size = 2\n"
    from diag.target import from_path

    tree = from_path(_copy_with(real, tmp_path / "tree", rel, text))
    cfg = start_values(tree, "cuda", SpecConfig(attention_backend="triton"), "triton")
    assert cfg.dcp_size is None and "dcp_size" not in dict(cfg.start_values)


def test_lane_without_dcp_is_exact_with_the_default_named(release, lane):
    """The triton lane configuration without `--dcp`: `_dcp_kv_indices`'s read back
    (triton_backend.py:500, behind `if self.dcp_size > 1:`, :553, and the extend branch's own
    DCP test) cannot run at dcp 1: every phase exact, 0, the default cited."""
    f, phases = _phases(release, **lane)
    assert {p: d["syncs_per_step"] for p, d in phases.items()} == {
        "target-extend": 0, "draft-extend": 0, "target-verify": 0, "draft-decode": 0}
    assert all(d["exact"] and not d["depends"] for d in phases.values())
    for p in ("target-extend", "draft-extend"):
        why = {u["at"]: u["reason"] for u in phases[p]["unreachable"]}[f"{TRITON}:500"]
        assert why.startswith("config: dcp_size=1, not given: SGLang's default 1 "
                              "(sglang/srt/arg_groups/fields/parallel.py:52)"), why
    _, two = _phases(release, **lane, dcp_size=2)
    assert {p: d["syncs_per_step"] for p, d in two.items()} == {
        "target-extend": 1, "draft-extend": 1, "target-verify": 0, "draft-decode": 0}


def test_page_size_is_the_one_sglang_resolves(release, tmp_path):
    t = release("0.5.23")
    llama = _model(tmp_path, "LlamaForCausalLM")
    # HIP, the server's environment given without the layout switch: the default 1
    cfg = start_values(t, "hip", SpecConfig(attention_backend="aiter", model=llama,
                                            environ={}), "aiter")
    assert cfg.page_size == 1
    assert "default page_size 1 (sglang/srt/arg_groups/overrides.py:1341)" in \
        dict(cfg.start_values)["page_size"]
    # with it: 64
    cfg = start_values(t, "hip", SpecConfig(attention_backend="aiter", model=llama, environ={
        "SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d"}), "aiter")
    assert cfg.page_size == 64
    # no model: an override it may bring is unknown, the page size stays not given
    cfg = start_values(t, "cuda", SpecConfig(attention_backend="triton"), "triton")
    assert cfg.page_size is None and "page_size" not in dict(cfg.start_values)
    # the DSA backend serves DeepSeek-V3.2-style models only: their override, over the flag
    cfg = start_values(t, "cuda", SpecConfig(attention_backend="dsa", page_size=1), "dsa")
    assert cfg.page_size == 64 and "DSA" in dict(cfg.start_values)["page_size"]


def test_aiter_asm_prefill_sites_follow_the_resolved_page_size(release, tmp_path):
    """0.5.23 aiter's paged ASM prefill view is built only `and self.page_size == 64`
    (aiter_backend.py:2591-2595): with a Llama model and the server's environment given
    without the layout switch (page size 1), its reads (:246, :248) cannot run on
    target-extend; the reason says where the page size comes from."""
    llama = _model(tmp_path, "LlamaForCausalLM")
    _, phases = _phases(release, platform="hip", attention_backend="aiter",
                        speculative_num_steps=3, model=llama,
                        environ={"SGLANG_AITER_PAGED_PREFILL_ASM": "1"})
    te = phases["target-extend"]
    gone = {u["at"].rsplit("/", 1)[-1]: u["reason"] for u in te["unreachable"]}
    for line in (246, 248):
        assert gone[f"aiter_backend.py:{line}"].startswith(
            "config: page_size=1, as SGLang resolves it: default page_size 1"), gone
    assert te["exact"]
