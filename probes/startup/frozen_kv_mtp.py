"""Whether SGLang runs the speculative worker as FROZEN_KV_MTP: a Gemma4 assistant draft model.

Why: with `--speculative-algorithm EAGLE` or `NEXTN` and a draft model whose config.json names a
Gemma4 assistant architecture, SGLang promotes the algorithm to FROZEN_KV_MTP
(`_resolve_speculative_algorithm_alias`, 0.5.13 arg_groups/speculative_hook.py:26-50, 0.5.23
:81-118), whose draft reads the target's KV: it has no draft-extend forward at all ("Frozen draft
has no draft-extend forward (seed-select only)", 0.5.15 speculative/frozen_kv_mtp_worker_v2.py:162,
0.5.23 :180) and its own draft graph runner, captured when the device is "cuda" (ROCm's too;
0.5.23 :384). Read as EAGLE, the HIP allow-list would call its draft-extend eager: a FAIL for a
pass that never runs. EAGLE3 with such a draft is refused (probes.draft_extend_graph.model_rules).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from diag.context import SpecConfig
from diag.probes.source import parse_file, walk_all
from diag.probes.startup.resolve import Where, find_line
from diag.target import Target

SPEC_HOOK_FILE = "srt/arg_groups/speculative_hook.py"
WORKER = "srt/speculative/frozen_kv_mtp_worker_v2.py"
PROMOTES = ("EAGLE", "NEXTN")


def gemma4_draft(target: Target, cfg: SpecConfig) -> tuple[str, Where] | None:
    """(the draft's architecture, where the alias reads it) when `--draft-model`'s config.json
    names one of the architectures `is_gemma4_draft` tests, in a release that has the test."""
    if not cfg.draft_model:
        return None
    tree = parse_file(target.file(SPEC_HOOK_FILE))
    if tree is None:
        return None
    found = [(n, c.value) for n in walk_all(tree) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "is_gemma4_draft" for t in n.targets)
        for c in walk_all(n.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    if not found:
        return None
    try:
        params = json.loads((Path(cfg.draft_model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    drafts = params.get("architectures") if isinstance(params, dict) else None
    hits = sorted({a for _, a in found} & {a for a in drafts or [] if isinstance(a, str)})
    if not hits:
        return None
    w = Where(target.relpath(target.file(SPEC_HOOK_FILE)), found[0][0].lineno)
    return hits[0], w


def frozen_kv_mtp(target: Target, cfg: SpecConfig) -> tuple[bool | None, str]:
    """(True: SGLang runs FROZEN_KV_MTP; None: it would with EAGLE or NEXTN, no algorithm given;
    False: it does not, why)."""
    g = gemma4_draft(target, cfg)
    if g is None:
        return False, ""
    promote = find_line(target, SPEC_HOOK_FILE, r'return "FROZEN_KV_MTP"')
    if promote is None:
        return False, ""
    why = (f"the draft model is {g[0]} ({g[1]}): SGLang runs EAGLE and NEXTN as FROZEN_KV_MTP "
           f"({promote})")
    algo = (cfg.speculative_algorithm or "").upper()
    if not algo:
        return None, why
    return algo in PROMOTES, why


def worker_facts(target: Target) -> tuple[Where | None, Where | None]:
    """(where the frozen worker says it has no draft-extend forward, where its draft graph is
    captured only on a "cuda" device); None where the release's worker does not say it."""
    return (find_line(target, WORKER, r"has no draft-extend forward"),
            find_line(target, WORKER, r'self\.target_worker\.device != "cuda"'))
