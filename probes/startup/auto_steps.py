"""The steps, topk and draft tokens of a server started without `--speculative-num-steps`.

Why: SGLang's EAGLE family (EAGLE, EAGLE3, NEXTN, STANDALONE) picks all three itself when the
steps are not given and adaptive speculation is off (0.5.23 arg_groups/speculative_hook.py:
1159-1172, `_auto_choose_speculative_params` :1430-1461; 0.5.9 server_args.py:2422-2431), after
asserting that topk and the draft-token count were not given either (0.5.23 :1160-1163): a
server given topk without the steps does not start, whatever the steps left out (`refused`),
and one given none of them runs steps 3 or 5, never 1 (where that choice itself is refused,
trtllm_mha's topk 4 for Llama, a server that runs was given them: the topk rules say
`depends`, probes.startup.refusals). Reading that as `depends` ("pass
--speculative-num-steps") left draft decode and draft extend undecided for a command line
SGLang decides. An IQuest Q1 target takes its steps from its MTP draft checkpoint first
(0.5.21+ `_handle_iquest_q1_mtp_draft`, 0.5.23 :1014-1059), so where the model is unknown on
those releases, nothing is decided here. The steps given without topk fail too, later (a
TypeError comparing the missing topk): `missing_topk` says so beside the verdicts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from diag.context import SpecConfig
from diag.probes.startup.resolve import (
    SERVER_ARGS,
    SPEC_HOOK_FILE,
    Model,
    Where,
    auto_params,
    find_first,
    find_line,
)
from diag.target import Target

EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
IQUEST = "IQuestQ1ForCausalLM"
# the assert before the automatic choice, its last operand (one per release: 0.5.23
# speculative_hook.py:1162, 0.5.14 :322, 0.5.12 server_args.py:3810)
ASSERTED = r"and \w+\.speculative_num_draft_tokens is None\s*$"
# the page-tree rule's test, reached by every EAGLE-family start whatever the backend:
# `<args>.speculative_eagle_topk > 1` then `and ... page_size > 1` (0.5.23
# speculative_hook.py:1274-1275, 0.5.19 :810, 0.5.13 :378, 0.5.9 server_args.py:2453)
COMPARED = re.compile(r"\.speculative_eagle_topk > 1\s*$")


@dataclass(frozen=True)
class AutoSteps:
    words: str
    # topk or draft tokens given without the steps: the assert (every steps value left out
    # fails it: no server starts)
    refused: Where | None = None
    chosen: tuple[int, int, int] | None = None  # (steps, topk, draft tokens) SGLang picks
    where: Where | None = None


def auto_steps(target: Target, cfg: SpecConfig, model: Model) -> AutoSteps | None:
    """What SGLang does with the steps not given (module docstring), or None where they are
    given, adaptive speculation is on, the algorithm is not of the EAGLE family, the model may
    bring its own steps, or the release's shape is not the one read."""
    if cfg.speculative_num_steps is not None or cfg.speculative_adaptive:
        return None
    if (cfg.speculative_algorithm or "EAGLE").upper() not in EAGLE_FAMILY:
        return None
    if model.arch == IQUEST or (model.arch is None and find_line(
            target, SPEC_HOOK_FILE, r"def _handle_iquest_q1_mtp_draft\b") is not None):
        return None
    w = find_first(target, (SPEC_HOOK_FILE, SERVER_ARGS), ASSERTED)
    if w is None:
        return None
    given = [f for f, v in (("--speculative-eagle-topk", cfg.speculative_eagle_topk),
                            ("--speculative-num-draft-tokens",
                             cfg.speculative_num_draft_tokens)) if v is not None]
    if given:
        return AutoSteps(f"{' and '.join(given)} without --speculative-num-steps: SGLang "
                         f"refuses to start (it picks the steps only where neither topk nor "
                         f"the draft-token count is given, and asserts so, {w}); pass the "
                         f"server's --speculative-num-steps", refused=w)
    if model.arch is None or model.dsv4:  # no model: steps 3 or 5, topk 1 or 4
        return None
    auto = auto_params(target, model.arch, cfg.speculative_algorithm)
    if auto is None:
        return None
    (steps, topk, tokens), at = auto
    return AutoSteps(f"--speculative-num-steps not given: SGLang's own choice for {model.arch} "
                     f"is steps {steps}, topk {topk}, {tokens} draft tokens ({at})",
                     chosen=(steps, topk, tokens), where=at)


def _topk_compared(target: Target) -> Where | None:
    for rel in (SPEC_HOOK_FILE, SERVER_ARGS):
        try:
            lines = target.file(rel).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for i, text in enumerate(lines[:-1]):
            if COMPARED.search(text) and "page_size > 1" in lines[i + 1]:
                return Where(target.relpath(target.file(rel)), i + 1)
    return None


def missing_topk(target: Target, cfg: SpecConfig, model: Model) -> str | None:
    """Words for the verdicts when the steps are given and topk is not: the EAGLE family's
    argument handling compares the missing topk (`None > 1`) and fails at start with a
    TypeError in every release read (0.5.9 - 0.5.23; SGLang's own argument handling raises it
    at 0.5.23 speculative_hook.py:1274 and 0.5.19 :810, trtllm_mha's check first, :1177 / :740).
    A server that runs was given topk, so this is said next to the verdicts, not in place of
    them (as a missing draft-token count is, probes.startup.draft_tokens). None where the
    release, the algorithm or the model sets topk first: adaptive speculation, an IQuest Q1
    target (0.5.21+), DeepSeek-V4 (its hook's own assert)."""
    if cfg.speculative_num_steps is None or cfg.speculative_eagle_topk is not None \
            or cfg.speculative_adaptive or model.arch == IQUEST or model.dsv4:
        return None
    if (cfg.speculative_algorithm or "EAGLE").upper() not in EAGLE_FAMILY:
        return None
    w = _topk_compared(target)
    if w is None:
        return None
    iq = " (an IQuest Q1 target sets topk 1 itself)" if model.arch is None and find_line(
        target, SPEC_HOOK_FILE, r"def _handle_iquest_q1_mtp_draft\b") is not None else ""
    return (f"--speculative-num-steps without --speculative-eagle-topk: SGLang's argument "
            f"handling compares the missing topk (`speculative_eagle_topk > 1`, {w}) and fails "
            f"at start with a TypeError{iq}; a server that runs was given topk: pass it")
