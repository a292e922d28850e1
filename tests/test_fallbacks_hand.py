"""Runtime fallbacks against two hand-read tables (tests/groundtruth/fallbacks_hand.json: 0.5.19
and 0.5.23, six configurations each on HIP and CUDA), read from the wheels by readers who never
saw diag's code or output.

The bar, both ways: every hand-read fallback of a captured phase is named at its statement's
line or its conjunct's (`line` / `cond_line`), and diag names none the readers left out; a
phase the readers found not captured is not `graph` in diag.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.context import SpecConfig
from diag.probes.draft_extend_graph import phases
from tests.conftest import release_target

pytestmark = pytest.mark.release
TRUTH = json.loads((Path(__file__).parent / "groundtruth" / "fallbacks_hand.json").read_text())
MODELS = {"LlamaForCausalLM": "llama", "DeepseekV3ForCausalLM": "deepseek-v3",
          "DeepseekV32ForCausalLM": "deepseek-v32", "DeepseekV4ForCausalLM": "deepseek-v4"}
CASES = [(v, c) for v, cs in sorted(TRUTH["releases"].items()) for c in cs]


def _each_named(phase: str, hand: list[dict], named: set) -> set:
    """Asserts each hand-read fallback is named at its statement's or its conjunct's line;
    returns the (file, line)s that matched."""
    used = set()
    for fb in hand:
        hits = {(fb["file"], n) for n in (fb["line"], fb.get("cond_line") or fb["line"])}
        assert hits & named, (phase, fb["file"], fb["line"], fb["condition"])
        used |= hits & named
    return used


@pytest.mark.parametrize("version,case", CASES,
                         ids=[f"{v}-{c['platform']}-{c['backend']}-{MODELS[c['model']]}"
                              for v, c in CASES])
def test_fallbacks_match_the_hand_read_table(version, case):
    cfg = SpecConfig(attention_backend=case["backend"], model=MODELS[case["model"]],
                     speculative_eagle_topk=1, speculative_num_steps=3, environ={},
                     enable_dp_attention=False)
    got = {v.phase: v for v in phases.phase_verdicts(release_target(version), case["platform"],
                                                     cfg, case["backend"])}
    for phase, hand in case["phases"].items():
        v = got[phase]
        if not hand["captured"]:
            assert v.mode != phases.GRAPH, (phase, v.reason)
            continue
        assert v.mode == phases.GRAPH, (phase, v.mode, v.reason)
        named = {(f.file, f.line) for f in v.runtime_fallbacks}
        used = _each_named(phase, hand["fallbacks"], named)
        assert named == used, (phase, sorted(named - used))


VARIANTS = TRUTH["variants"]["configs"]
# the runners' width checks (`spec_info.num_tokens_per_req != captured width`): the third
# reader leaves them out as unable to fire, both earlier readers list them; diag names them
WIDTH = "num_tokens_per_req"


@pytest.mark.parametrize("case", VARIANTS, ids=[
    f"{c['release']}-{c['platform']}-{c['backend']}-s{c['steps']}-k{c['topk']}" for c in VARIANTS])
def test_step_and_topk_variants_match_the_third_reader(case):
    cfg = SpecConfig(attention_backend=case["backend"], model="llama",
                     speculative_eagle_topk=case["topk"], speculative_num_steps=case["steps"],
                     speculative_num_draft_tokens=case.get("num_draft_tokens"), environ={},
                     enable_dp_attention=False)
    got = {v.phase: v for v in phases.phase_verdicts(release_target(case["release"]),
                                                     case["platform"], cfg, case["backend"])}
    for phase, hand in case["phases"].items():
        v = got[phase]
        assert (v.mode == phases.GRAPH) is hand["captured"], (phase, v.mode, v.reason)
        if not hand["captured"]:
            continue
        used = _each_named(phase, hand["fallbacks"], {(f.file, f.line)
                                                     for f in v.runtime_fallbacks})
        extra = [f for f in v.runtime_fallbacks if (f.file, f.line) not in used]
        assert all(WIDTH in f.condition for f in extra), (phase, [(f.line, f.condition)
                                                                 for f in extra])
