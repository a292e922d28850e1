"""A configuration SGLang refuses at start: the fixes judged for it are refused, with SGLang's
line, on every surface (`fix list` text and JSON, the advice the TUI and the report read); one
that starts, or a live server's, is judged as before. And the steps SGLang picks itself reach
the allow-list fix's reason. Expected lines are read from the release sources by hand:

- 0.5.19 sglang/srt/arg_groups/speculative_hook.py:722-726: with the steps not given (and
  adaptive off), `assert (cfg.speculative_eagle_topk is None and
  cfg.speculative_num_draft_tokens is None)`: topk alone does not start;
- 0.5.23 the same assert at :1159-1163;
- 0.5.9 (the v1 worker by default, whose gate captures every class) server_args.py:2422-2426,
  `if self.speculative_num_steps is None: assert (self.speculative_eagle_topk is None and
  ...)`;
- 0.5.23 `_auto_choose_speculative_params` :1439-1440: `LlamaForCausalLM` -> (5, 4, 8);
  eagle_worker_v2.py:561 admits AiterMultiStepDraftBackend on HIP, with steps > 1.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from diag.cli import main as cli
from diag.context import Context, SpecConfig
from diag.fixes import advice
from diag.fixes.base import REFUSED
from diag.fixes.draft_extend_allowlist import DraftExtendAllowlistFix
from diag.fixes.repeat_interleave_output_size import RepeatInterleaveOutputSizeFix

pytestmark = pytest.mark.release

ASSERT_LINE = {"0.5.9": "server_args.py:2425", "0.5.19": "speculative_hook.py:725",
               "0.5.23": "speculative_hook.py:1162"}


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_topk_without_steps_refuses_both_configuration_fixes(release, version):
    t = release(version)
    cfg = SpecConfig(attention_backend="dsv4", speculative_eagle_topk=1)
    for fix in (DraftExtendAllowlistFix(), RepeatInterleaveOutputSizeFix()):
        a = fix.applies_to(t, "hip", cfg)
        assert a.status == REFUSED, (type(fix).__name__, a.reason)
        assert "refuses this configuration at start" in a.reason
        assert ASSERT_LINE[version] in a.reason
        assert a.instead


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_the_same_configuration_with_steps_is_judged_on_its_merits(release, version):
    t = release(version)
    cfg = SpecConfig(attention_backend="dsv4", speculative_eagle_topk=1,
                     speculative_num_steps=3)
    for fix in (DraftExtendAllowlistFix(), RepeatInterleaveOutputSizeFix()):
        a = fix.applies_to(t, "hip", cfg)
        assert "refuses this configuration" not in a.reason, a.reason


def test_a_live_servers_configuration_is_never_refused_at_start(release):
    """A server that answers started: its arguments are not judged against the start rules."""
    t = release("0.5.19")
    cfg = SpecConfig(attention_backend="fa3", speculative_eagle_topk=1, source="server")
    a = DraftExtendAllowlistFix().applies_to(t, "cuda", cfg)
    assert "refuses this configuration" not in a.reason
    opts = replace(cfg, source="options")
    assert DraftExtendAllowlistFix().applies_to(t, "cuda", opts).status == REFUSED


def test_surfaces_agree_on_the_refusal(release):
    t = release("0.5.19")
    args = ["--sglang", "0.5.19", "--platform", "cuda", "--attention-backend", "fa3",
            "--speculative-eagle-topk", "1"]
    got = CliRunner().invoke(cli, ["fix", "list", *args, "--json"])
    assert got.exit_code == 0, got.output
    by_id = {r["id"]: r for r in json.loads(got.stdout)["fixes"]}
    assert by_id["draft-extend-allowlist"]["status"] == REFUSED
    text = CliRunner().invoke(cli, ["fix", "list", *args])
    assert text.exit_code == 0, text.output
    line = next(ln for ln in text.output.splitlines() if ln.startswith("draft-extend-allowlist"))
    assert line.split()[1] == REFUSED and ASSERT_LINE["0.5.19"] in text.output
    ctx = Context(target=t, platform="cuda",
                  config=SpecConfig(attention_backend="fa3", speculative_eagle_topk=1))
    resolved = advice.resolve(ctx)
    assert resolved["draft-extend-allowlist"].status == REFUSED
    assert resolved["draft-extend-allowlist"].reason == by_id["draft-extend-allowlist"]["reason"]


def test_sglangs_own_steps_reach_the_allowlist_reason(release):
    """aiter, Llama, no steps: SGLang runs steps 5, which the HIP list's `> 1` needs; the reason
    says so and no longer asks for the steps."""
    a = DraftExtendAllowlistFix().applies_to(
        release("0.5.23"), "hip", SpecConfig(attention_backend="aiter", model="llama"))
    assert "needs --speculative-num-steps" not in a.reason, a.reason
    assert "steps 5, topk 4, 8 draft tokens" in a.reason
    assert "speculative_hook.py:1440" in a.reason


def test_a_refused_start_comes_before_the_v1_workers_any_class_gate(release):
    """0.5.9 runs the v1 worker, whose gate captures draft-extend for every class (the fix is
    otherwise `not-needed` there): a configuration that does not start is refused first."""
    t = release("0.5.9")
    a = DraftExtendAllowlistFix().applies_to(
        t, "hip", SpecConfig(attention_backend="fa3", speculative_eagle_topk=1))
    assert a.status == REFUSED and ASSERT_LINE["0.5.9"] in a.reason, a.reason
    ok = DraftExtendAllowlistFix().applies_to(
        t, "hip", SpecConfig(attention_backend="fa3", speculative_eagle_topk=1,
                             speculative_num_steps=3))
    assert ok.status != REFUSED and "v1 EAGLE worker" in ok.reason, ok.reason


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_the_sync_census_does_not_fail_a_configuration_that_does_not_start(release, version):
    """dsv4 on HIP with topk 1: with the steps the census finds syncs on the audited path no
    configuration fact rules out (FAIL); without them SGLang refuses to start (the assert,
    ASSERT_LINE), so no server syncs: the finding says so, with SGLang's line, and warns."""
    from diag.findings import Status
    from diag.probes import get as get_probe
    from diag.probes.base import run_probe

    def finding(**kw):
        ctx = Context(target=release(version), platform="hip", execute=False,
                      config=SpecConfig(attention_backend="dsv4", speculative_eagle_topk=1, **kw))
        [f] = run_probe(get_probe("metadata-syncs"), ctx)
        return f

    given = finding(speculative_num_steps=3)
    assert given.status == Status.FAIL
    assert not any("no server starts" in (e.detail or "") for e in given.evidence)
    refused = finding()
    assert refused.status == Status.WARN
    [n] = [e for e in refused.evidence if "no server starts" in (e.detail or "")]
    assert ASSERT_LINE[version] in n.detail
    assert "refuses this configuration at start" in refused.summary
