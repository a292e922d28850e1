"""The sync census on a configuration SGLang refuses at start for any reason, not only its steps.

Expected lines read by hand from the release sources (pip download sglang==X --no-deps):
- DeepSeek-V4 with EAGLE asserts topk 1: 0.5.19 `srt/arg_groups/deepseek_v4_hook.py:152-155`
  (`assert (cfg.speculative_eagle_topk == 1), f"Only EAGLE speculative algorithm with topk == 1
  ..."`, the message at :155), 0.5.23 :155-157 (the message at :157), under
  `if cfg.speculative_algorithm == "EAGLE":`.
- topk > 1 with page_size > 1 outside `_PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa3",
  "triton")`: `raise ValueError(` at 0.5.19 `srt/arg_groups/speculative_hook.py:814` (the tuple
  at :807, the test at :810-813) and 0.5.23 :1278 (:1271, :1274-1277); the DSA model's override
  sets a page size > 1 on CUDA (0.5.19 `model_overrides/deepseek_v2.py:101`, `= 64`; 0.5.23
  :171-172, `64 * index_kpool`), and dsa is not in the tuple.
The same configurations with topk 1 start, and the census FAILs them for the syncs it finds on
the audited path (the counterpart: the refusal, not the sites, turns FAIL into WARN).
"""

from __future__ import annotations

import itertools

import pytest

from diag.context import Context, SpecConfig
from diag.findings import Status
from diag.probes import get as get_probe
from diag.probes.base import run_probe
from diag.probes.draft_extend_graph.phases import start_refused_verdict
from diag.probes.startup.default_backend import audited_backend
from diag.probes.startup.refused_start import refused_start

pytestmark = pytest.mark.release

DSV4_ASSERT = {"0.5.19": "deepseek_v4_hook.py:155", "0.5.23": "deepseek_v4_hook.py:157"}
PAGE_TREE_RAISE = {"0.5.19": "speculative_hook.py:814", "0.5.23": "speculative_hook.py:1278"}

CASES = {  # name: (platform, backend, model, the hand-read line by release)
    "dsv4-topk": ("hip", "dsv4", "deepseek-v4", DSV4_ASSERT),
    "dsa-page-tree": ("cuda", "dsa", "deepseek-v32", PAGE_TREE_RAISE),
}


def _finding(target, platform, **kw):
    ctx = Context(target=target, platform=platform, execute=False,
                  config=SpecConfig(speculative_algorithm="EAGLE", speculative_num_steps=3,
                                    **kw))
    [f] = run_probe(get_probe("metadata-syncs"), ctx)
    return f


def _refusal_notes(f):
    return [e.detail for e in f.evidence if "no server starts" in (e.detail or "")]


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_configuration_refused_at_start_warns_with_sglangs_line(release, version, case):
    platform, backend, model, lines = CASES[case]
    t = release(version)
    starts = _finding(t, platform, attention_backend=backend, model=model,
                      speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    assert starts.status == Status.FAIL, starts.summary
    assert not _refusal_notes(starts)
    refused = _finding(t, platform, attention_backend=backend, model=model,
                       speculative_eagle_topk=4, speculative_num_draft_tokens=8)
    assert refused.status == Status.WARN, refused.summary
    [n] = _refusal_notes(refused)
    assert lines[version] in n
    assert "refuses this configuration at start" in refused.summary


def test_a_live_servers_configuration_is_never_refused(release):
    """A server answered, so it started: whatever its arguments, the census judges its syncs."""
    t = release("0.5.23")
    cfg = SpecConfig(attention_backend="dsv4", model="deepseek-v4", speculative_algorithm="EAGLE",
                     speculative_num_steps=3, speculative_eagle_topk=4,
                     speculative_num_draft_tokens=8)
    assert refused_start(t, "hip", cfg, "dsv4") is not None
    assert refused_start(t, "hip", SpecConfig(**{**cfg.__dict__, "source": "server"}),
                         "dsv4") is None


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_the_census_and_the_per_phase_verdicts_agree_on_refusals(release, version):
    """One truth: the census reads the start refusal the per-phase verdicts give (every phase
    `refused`) for the backend it audits. 0.5.9 has the rules in server_args.py, 0.5.23 in
    arg_groups/; the grid holds refusals of each kind (the gate's, an unknown backend, a backend
    without a draft factory entry, topk and page rules, the steps) and configurations that start."""
    t = release(version)
    refused = starts = 0
    for platform, backend, model, steps, topk, ps in itertools.product(
            ["hip", "cuda"], ["aiter", "fa3", "dsa", "dsv4", "qsa", "wave", "trtllm_mha"],
            [None, "llama", "deepseek-v32"], [None, 3], [None, 1, 4], [None, 64]):
        cfg = SpecConfig(attention_backend=backend, model=model, speculative_num_steps=steps,
                         speculative_eagle_topk=topk, page_size=ps)
        name, _ = audited_backend(t, platform, cfg)
        verdict = start_refused_verdict(t, platform, cfg)
        census = refused_start(t, platform, cfg, name)
        assert (verdict is None) == (census is None), (platform, backend, model, steps, topk, ps,
                                                        verdict and verdict.reason, census)
        if census is not None:
            assert str(verdict.where) in census[0] or census[1] == verdict.where
            refused += 1
        else:
            starts += 1
    assert refused > 50 and starts > 50, (refused, starts)
