"""A configuration without `--speculative-num-steps` is a server started without it
(probes.startup.auto_steps), every surface reading the same steps.

Read by hand from the releases' sources:
- 0.5.23 arg_groups/speculative_hook.py:1159-1172: `if not cfg.speculative_adaptive and
  cfg.speculative_num_steps is None: assert (cfg.speculative_eagle_topk is None and
  cfg.speculative_num_draft_tokens is None)` (:1160-1163), then `_auto_choose_speculative_params`
  (:1430-1461): `return (5, 4, 8)` for LlamaForCausalLM (:1440), `(3, 1, 4)` for the DeepSeek
  list (:1457). 0.5.19 :722-726 (the assert's last operand at :725); 0.5.18 :612; 0.5.9
  server_args.py:2422-2431 (:2425), Llama's return at :5754.
- an IQuest Q1 target takes its steps from its draft checkpoint first (0.5.23
  `_handle_iquest_q1_mtp_draft`, :1014, steps = `draft.num_draft_slots` at :1036-1037);
  0.5.19 has no such handler.
- the draft-decode runner is built for `self.speculative_num_steps > 1` (0.5.23
  speculative/eagle_worker_v2.py:507).
"""

from __future__ import annotations

import pytest

from diag.context import Context, SpecConfig
from diag.probes import get as get_probe
from diag.probes.base import run_probe
from diag.probes.draft_extend_graph import phases
from diag.probes.startup.auto_steps import auto_steps
from diag.probes.startup.resolve import read_model


def _verdicts(t, platform, **cfg) -> dict:
    c = SpecConfig(**cfg)
    return {v.phase: v for v in phases.phase_verdicts(t, platform, c, c.attention_backend)}


@pytest.mark.parametrize("version,model,chosen,at", [
    ("0.5.23", "llama", (5, 4, 8), "sglang/srt/arg_groups/speculative_hook.py:1440"),
    ("0.5.23", "deepseek-v3", (3, 1, 4), "sglang/srt/arg_groups/speculative_hook.py:1457"),
    ("0.5.9", "llama", (5, 4, 8), "sglang/srt/server_args.py:5754"),
])
def test_none_given_is_sglang_s_own_choice(release, version, model, chosen, at):
    t = release(version)
    got = auto_steps(t, SpecConfig(attention_backend="triton", model=model),
                     read_model(t, model))
    assert got is not None and got.chosen == chosen and str(got.where) == at
    v = _verdicts(t, "cuda", attention_backend="triton", model=model)
    dd = v["draft-decode"]
    assert dd.mode == phases.GRAPH and f"--speculative-num-steps {chosen[0]} > 1" in dd.reason
    assert "SGLang's own choice for" in dd.reason and at in dd.reason


@pytest.mark.parametrize("version,at", [
    ("0.5.19", "sglang/srt/arg_groups/speculative_hook.py:725"),
    ("0.5.18", "sglang/srt/arg_groups/speculative_hook.py:612"),
])
def test_topk_without_steps_is_refused_at_start(release, version, at):
    """Every steps value left out fails the assert (SGLang's own argument handling raises
    AssertionError for it: tests/test_startup_against_sglang.py's grid, shape `steps None
    topk 1`): no server starts."""
    t = release(version)
    for v in _verdicts(t, "hip", attention_backend="aiter",
                       speculative_eagle_topk=1).values():
        assert v.mode == phases.REFUSED and str(v.where) == at, (v.phase, v.reason)
        assert v.reason.startswith("--speculative-eagle-topk without --speculative-num-steps: "
                                   "SGLang refuses to start"), v.reason
    # the implied DeepSeek-V4 passes its own hook with topk 1, then meets the same assert
    if version == "0.5.18":
        de = _verdicts(t, "hip", attention_backend="compressed",
                       speculative_eagle_topk=1)["draft-extend"]
        assert de.mode == phases.REFUSED and str(de.where) == at


def test_what_the_release_leaves_open_stays_open(release):
    t = release("0.5.23")
    none = read_model(t, None)
    # no model on a release with the IQuest handler: the steps may be the draft checkpoint's
    assert auto_steps(t, SpecConfig(attention_backend="aiter", speculative_eagle_topk=1),
                      none) is None
    iq = read_model(t, "IQuestQ1ForCausalLM")
    assert auto_steps(t, SpecConfig(attention_backend="aiter"), iq) is None
    llama = read_model(t, "llama")
    for cfg in (SpecConfig(speculative_adaptive=True), SpecConfig(speculative_algorithm="NGRAM"),
                SpecConfig(speculative_num_steps=1)):
        assert auto_steps(t, cfg, llama) is None
    # no model and none given: steps 3 or 5, topk 1 or 4: draft decode still depends
    v = _verdicts(t, "hip", attention_backend="aiter")
    assert v["draft-decode"].mode == phases.DEPENDS


def test_the_census_runs_draft_decode_the_chosen_steps(release):
    """The census's per-phase counts read the same steps: draft decode runs steps - 1 = 4
    times a step for Llama's own choice (steps 5), the reason saying where they come from."""
    ctx = Context(target=release("0.5.23"), platform="hip", execute=False,
                  config=SpecConfig(attention_backend="aiter", model="llama"))
    [f] = run_probe(get_probe("metadata-syncs"), ctx)
    [dd] = [e.data for e in f.evidence if e.kind == "metric" and e.data
            and e.data.get("phase") == "draft-decode"]
    assert dd["runs_per_step"] == 4


@pytest.mark.parametrize("version,at", [
    ("0.5.9", "sglang/srt/server_args.py:2453"),
    ("0.5.13", "sglang/srt/arg_groups/speculative_hook.py:378"),
    ("0.5.19", "sglang/srt/arg_groups/speculative_hook.py:810"),
    ("0.5.23", "sglang/srt/arg_groups/speculative_hook.py:1274"),
])
def test_steps_without_topk_is_said_next_to_the_verdicts(release, version, at):
    """Steps given, topk not: the page-tree rule's `speculative_eagle_topk > 1` (read by hand
    at `at`, reached by every EAGLE-family start; SGLang's own argument handling raises the
    TypeError there for 0.5.19 and 0.5.23, tests/test_startup_against_sglang.py's grid) fails
    the start. A server that runs was given topk: the modes stay, the reasons say it."""
    t = release(version)
    vs = _verdicts(t, "hip", attention_backend="aiter", speculative_num_steps=3)
    assert vs["draft-decode"].mode == phases.GRAPH
    for v in vs.values():
        assert f"compares the missing topk (`speculative_eagle_topk > 1`, {at}) and fails at " \
               f"start with a TypeError" in v.reason, (v.phase, v.reason)
    # with topk, or a DeepSeek-V4 (its own hook asserts topk first), nothing is said
    given = _verdicts(t, "hip", attention_backend="aiter", speculative_num_steps=3,
                      speculative_eagle_topk=1)
    assert not any("missing topk" in v.reason for v in given.values())
