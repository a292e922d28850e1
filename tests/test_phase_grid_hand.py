"""Per-phase modes against two further hand-read grids (tests/groundtruth/phase_grid.json: 0.5.19
and 0.5.23, HIP and CUDA, 16-17 backends, steps 1/3 x topk 1/4), read from the wheels by readers
who never saw diag's code or output.

Where a reader has topk 4 with no draft-token count refused at `managers/utils.py` (SGLang's
`compute_num_reserved_tokens`: max(topk * steps, None)), diag keeps the phase's mode and names
that line in every phase's reason (probes.startup.draft_tokens): asserted as such. Lines are
compared by file, within 3 lines (the readers cite an `assert` or `if` where diag cites the
message or `raise` line); a mode agreeing is the bar.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.context import SpecConfig
from diag.probes.draft_extend_graph import phases
from tests.conftest import release_target

pytestmark = pytest.mark.release
GRID = json.loads((Path(__file__).parent / "groundtruth" / "phase_grid.json").read_text())
# HIP dsa with SGLANG_USE_AITER=1, topk 4, no count: the reader's `refused` joins two ways to
# fail (the page-tree check if the page size becomes 64, else the missing count); diag says
# `depends` on the preshuffle path, plus the note on the count
BOTH_WAYS = {("hip", "dsa", 4)}


def _id(c: dict) -> str:
    return (f"{c['release']}-{c['platform']}-{c['backend']}-{c['model']}-k{c['topk']}"
            f"-s{c['steps']}" + (f"-t{c['num_draft_tokens_given']}"
                                 if c.get("num_draft_tokens_given") else "")
            + ("-aiter" if (c.get("env") or {}).get("SGLANG_USE_AITER") else ""))


@pytest.mark.parametrize("case", GRID["cases"], ids=[_id(c) for c in GRID["cases"]])
def test_modes_match_the_hand_read_grid(case, monkeypatch):
    for var in ("SGLANG_USE_AITER", "AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS"):
        monkeypatch.delenv(var, raising=False)
    cfg = SpecConfig(attention_backend=case["backend"], model=case["model"],
                     speculative_eagle_topk=case["topk"], speculative_num_steps=case["steps"],
                     speculative_num_draft_tokens=case.get("num_draft_tokens_given"),
                     environ=case.get("env") or {})
    got = {v.phase: v for v in phases.phase_verdicts(
        release_target(case["release"]), case["platform"], cfg, case["backend"])}
    for phase, (mode, where) in case["expect"].items():
        v = got[phase]
        if where and where.startswith("managers/utils.py"):
            assert f"sglang/srt/{where}" in v.reason, (phase, v.reason)
            continue
        if (case["platform"], case["backend"], case["topk"]) in BOTH_WAYS \
                and not case.get("num_draft_tokens_given") and mode == phases.REFUSED:
            assert v.mode == phases.DEPENDS and "needs --speculative-num-draft-tokens" in v.reason
            continue
        assert v.mode == mode, (phase, v.mode, v.reason)
        # qsa with no model: the reader takes Qwen4-Exp's page size 64 (0.5.23
        # model_overrides/qwen4_exp.py:92), so the page-tree check refuses first; diag, given no
        # model, cites the backend's own topk refusal (qwen_sparse_attn_backend.py:288): both refuse
        if mode == phases.REFUSED and where and v.where is not None \
                and case["backend"] != "qsa":
            f, line = where.rsplit(":", 1)
            assert v.where.file == f"sglang/srt/{f}" and abs(v.where.line - int(line)) <= 3, \
                (phase, str(v.where), where)
