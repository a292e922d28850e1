"""Whether SGLang runs the speculative worker as FROZEN_KV_MTP: a Gemma4 assistant draft model.

Why: with `--speculative-algorithm EAGLE` or `NEXTN` and a draft model whose config.json names a
Gemma4 assistant architecture, SGLang promotes the algorithm to FROZEN_KV_MTP
(`_resolve_speculative_algorithm_alias`, 0.5.13 arg_groups/speculative_hook.py:26-50, 0.5.23
:81-118), whose draft reads the target's KV: it has no draft-extend forward at all ("Frozen draft
has no draft-extend forward (seed-select only)", 0.5.15 speculative/frozen_kv_mtp_worker_v2.py:162,
0.5.23 :180) and its own draft graph runner, captured when the device is "cuda" (ROCm's too;
0.5.23 :384). Read as EAGLE, the HIP allow-list would call its draft-extend eager: a FAIL for a
pass that never runs. EAGLE3 with such a draft is refused (probes.startup.model_rules).
"""

from __future__ import annotations

import ast

from diag.context import SpecConfig
from diag.probes.source import parse_file, walk_all
from diag.probes.startup.resolve import (
    SERVER_ARGS,
    SPEC_HOOK_FILE,
    Where,
    find_line,
    model_config,
)
from diag.target import Target

# where the alias lives: the hook from 0.5.13, server_args.py before (0.5.12 :319-351)
ALIAS_FILES = (SPEC_HOOK_FILE, SERVER_ARGS)
WORKER = "srt/speculative/frozen_kv_mtp_worker_v2.py"
V1_WORKER = "srt/speculative/frozen_kv_mtp_worker.py"
PROMOTES = ("EAGLE", "NEXTN")


def _alias(target: Target) -> tuple[str, list[tuple[ast.Assign, str]]] | None:
    """(the first of ALIAS_FILES that assigns `is_gemma4_draft`, each such assignment with the
    architecture names it tests): where the alias reads the draft."""
    for rel in ALIAS_FILES:
        tree = parse_file(target.file(rel))
        assigns = [n for n in walk_all(tree) if isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "is_gemma4_draft" for t in n.targets)] \
            if tree is not None else []
        if assigns:
            return rel, [(n, c.value) for n in assigns for c in walk_all(n.value)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    return None


def alias_file(target: Target) -> str | None:
    """The first of ALIAS_FILES that assigns `is_gemma4_draft` (the alias reads the draft there)."""
    a = _alias(target)
    return a[0] if a else None


def gemma4_draft(target: Target, cfg: SpecConfig) -> tuple[str, Where] | None:
    """(the draft's architecture, where the alias reads it) when `--draft-model`'s config.json
    (or the architecture name it is) names one of the architectures `is_gemma4_draft` tests,
    in a release that has the test."""
    if not cfg.draft_model:
        return None
    alias = _alias(target)
    if alias is None or not alias[1]:
        return None
    rel, found = alias
    try:  # a directory's config.json, or an architecture name (`resolve.model_config`)
        got = model_config(cfg.draft_model)
    except ValueError:
        return None
    if got is None:
        return None
    arch, params, _ = got
    drafts = params.get("architectures") or [arch]
    hits = sorted({a for _, a in found} & {a for a in drafts if isinstance(a, str)})
    if not hits:
        return None
    w = Where(target.relpath(target.file(rel)), found[0][0].lineno)
    return hits[0], w


def frozen_kv_mtp(target: Target, cfg: SpecConfig) -> tuple[bool | None, str]:
    """(True: SGLang runs FROZEN_KV_MTP; None: it would with EAGLE or NEXTN, no algorithm given;
    False: it does not, why)."""
    g = gemma4_draft(target, cfg)
    if g is None:
        return False, ""
    promote = find_line(target, alias_file(target) or SPEC_HOOK_FILE, r'return "FROZEN_KV_MTP"')
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


def v1_seed(target: Target) -> tuple[str, str, Where] | None:
    """Where the v2 worker is not the one that runs: SGLang forces overlap scheduling off for
    FROZEN_KV_MTP ("spec v2 is not supported yet": 0.5.12 server_args.py:3723, 0.5.13
    arg_groups/speculative_hook.py:259), so the v1 FrozenKVMTPWorker runs, and its draft extend
    is the assistant's seed step (`_run_assistant_seed_step`). ("eager", why, where): the seed
    step runs its own forward (0.5.12 frozen_kv_mtp_worker.py:404-406) through the draft model
    runner, which the worker builds with CUDA graphs off (:121-122; ModelRunner.init_device_graphs
    returns at model_executor/model_runner.py:2927-2928), so it never replays a graph.
    ("none", why, where): the seed step only stashes its inputs, the forward runs in the draft
    decode (0.5.13 :373-375). None when the release has no such v1 worker or it reads otherwise."""
    off = find_line(target, alias_file(target) or SPEC_HOOK_FILE,
                    r"Overlap scheduler is disabled when using Frozen-KV MTP")
    tree = parse_file(target.file(V1_WORKER))
    if off is None or tree is None:
        return None
    seed = next((n for n in walk_all(tree) if isinstance(n, ast.FunctionDef)
                 and n.name == "_run_assistant_seed_step"), None)
    if seed is None:
        return None
    rel = target.relpath(target.file(V1_WORKER))
    forward = next((c for c in walk_all(seed) if isinstance(c, ast.Call)
                    and ast.unparse(c.func) == "self.draft_model_runner.forward"), None)
    deferred = find_line(target, V1_WORKER, r"^\s*server_args\.disable_cuda_graph = True")
    if forward is not None and deferred is not None:
        w = Where(rel, forward.lineno)
        return "eager", (f"overlap scheduling is forced off for it ({off}), so the v1 frozen "
                         f"worker runs: its draft extend is the seed step's own forward ({w}) "
                         f"on the draft model runner it builds with CUDA graphs off ({deferred})"
                         ), w
    doc = " ".join((ast.get_docstring(seed) or "").split())
    if forward is None and "inside the captured draft graph" in doc:
        w = Where(rel, seed.body[0].lineno)
        return "none", (f"overlap scheduling is forced off for it ({off}), so the v1 frozen "
                        f"worker runs: its seed step only stashes its inputs, the forward runs "
                        f"in the draft decode ({w})"), w
    return None
