"""topk > 1 with no draft-token count: SGLang's start fails (probes.startup.draft_tokens).

Read by hand (and by two independent readers of the 0.5.19 and 0.5.23 grids, 2026-12-06):
`compute_num_reserved_tokens` returns `max(topk * steps, max_speculative_num_draft_tokens())`
at 0.5.23 managers/utils.py:497 (0.5.19 :406, 0.5.17 :392 with `server_args.
max_speculative_num_draft_tokens`); the bound is None without a count (0.5.23
runtime_context.py:1990-2000 `default=None`; 0.5.17 server_args.py:8651-8652 `if
self.speculative_num_draft_tokens is None: return None`); SGLang sets the count only for topk 1
(0.5.23 speculative_hook.py:1255-1266) or by its automatic choice when the steps are absent
(:1159). Before 0.5.17 the TokenizerManager has no such function (0.5.16 managers/utils.py).
"""

from __future__ import annotations

import pytest

from diag.context import SpecConfig
from diag.probes.draft_extend_graph import phases
from diag.probes.startup.draft_tokens import missing_draft_tokens, reserved_tokens_max
from tests.conftest import release_target

pytestmark = pytest.mark.release


@pytest.mark.parametrize("version,line", [("0.5.17", 392), ("0.5.19", 406), ("0.5.23", 497),
                                          ("0.5.16", None)])
def test_the_reserved_tokens_max_is_found(version, line):
    w = reserved_tokens_max(release_target(version))
    assert (w.line if w else None) == line
    if w:
        assert w.file == "sglang/srt/managers/utils.py"


@pytest.mark.parametrize("kw,said", [
    (dict(speculative_eagle_topk=4, speculative_num_steps=3), True),
    (dict(speculative_eagle_topk=4, speculative_num_steps=3, speculative_num_draft_tokens=8),
     False),
    (dict(speculative_eagle_topk=1, speculative_num_steps=3), False),
    (dict(speculative_eagle_topk=4), False),  # no steps: another rule (the automatic choice)
])
def test_said_only_for_topk_above_one_with_steps_and_no_count(kw, said):
    assert (missing_draft_tokens(release_target("0.5.23"), SpecConfig(**kw)) is not None) is said


def test_every_phase_says_it_and_keeps_its_mode():
    cfg = SpecConfig(attention_backend="triton", speculative_eagle_topk=4,
                     speculative_num_steps=3, model="llama")
    got = phases.phase_verdicts(release_target("0.5.23"), "cuda", cfg, "triton")
    assert [v.mode for v in got] == ["graph", "graph", "graph"]
    for v in got:
        assert "needs --speculative-num-draft-tokens" in v.reason
        assert "sglang/srt/managers/utils.py:497" in v.reason
