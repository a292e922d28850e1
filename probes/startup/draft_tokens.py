"""`--speculative-eagle-topk` > 1 without `--speculative-num-draft-tokens`: SGLang fails at start.

Why: SGLang derives the draft-token count only for topk 1 (steps + 1, 0.5.23
arg_groups/speculative_hook.py:1255-1266) or when the steps are absent too (the automatic choice,
which asserts that topk is absent as well, :1159). Otherwise the count stays None, and the
TokenizerManager's `compute_num_reserved_tokens` (0.5.23 managers/utils.py:484, called from
tokenizer_manager.py:605) returns `max(topk * steps, max_speculative_num_draft_tokens())` at :497,
whose second operand is None then (runtime_context.py:1982-2000, `default=None`): a TypeError in
the main process before any graph is captured (0.5.19 managers/utils.py:406; from 0.5.17,
where the bound is a ServerArgs property, server_args.py:8649-8652). A
server that runs was given the count, so this is said next to the verdicts, not in place of
them.
"""

from __future__ import annotations

import ast

from diag.context import SpecConfig
from diag.probes.source import parse_file, walk_all
from diag.probes.startup.resolve import Where
from diag.target import Target

UTILS = "srt/managers/utils.py"
# where `max_speculative_num_draft_tokens` is defined: a function (0.5.18+), else a property
BOUND_FILES = ("srt/runtime_context.py", "srt/server_args.py")
BOUND = "max_speculative_num_draft_tokens"


def _named(node: ast.AST) -> bool:
    f = node.func if isinstance(node, ast.Call) else node
    return (isinstance(f, ast.Name) and f.id == BOUND) or (
        isinstance(f, ast.Attribute) and f.attr == BOUND)


def _none_without_count(target: Target) -> bool:
    """The bound is None when no draft-token count is given: `max(..., default=None)` over the
    counts that are not None, or `if ...speculative_num_draft_tokens is None: return None`."""
    for rel in BOUND_FILES:
        tree = parse_file(target.file(rel))
        for fn in (n for n in walk_all(tree) if isinstance(n, ast.FunctionDef)
                   and n.name == BOUND) if tree is not None else ():
            for node in walk_all(fn):
                if isinstance(node, ast.Call) and any(
                        k.arg == "default" and isinstance(k.value, ast.Constant)
                        and k.value.value is None for k in node.keywords):
                    return True
                if isinstance(node, ast.If) and "speculative_num_draft_tokens is None" in \
                        ast.unparse(node.test) and any(
                        isinstance(b, ast.Return) and (b.value is None or (
                            isinstance(b.value, ast.Constant) and b.value.value is None))
                        for b in node.body):
                    return True
    return False


def reserved_tokens_max(target: Target) -> Where | None:
    """The `return max(topk * steps, <bound>)` line of `compute_num_reserved_tokens`, where the
    bound is None without a draft-token count; None where the release has no such shape."""
    tree = parse_file(target.file(UTILS))
    fn = next((n for n in walk_all(tree) if isinstance(n, ast.FunctionDef)
               and n.name == "compute_num_reserved_tokens"), None) if tree is not None else None
    for node in walk_all(fn) if fn is not None else ():
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "max" \
                and len(node.value.args) == 2 and _named(node.value.args[1]) \
                and _none_without_count(target):
            return Where(target.relpath(target.file(UTILS)), node.lineno)
    return None


def missing_draft_tokens(target: Target, cfg: SpecConfig) -> str | None:
    """Words for the verdicts when topk > 1 is given with the steps and no draft-token count."""
    topk = cfg.speculative_eagle_topk
    if topk is None or topk <= 1 or cfg.speculative_num_steps is None \
            or cfg.speculative_num_draft_tokens is not None:
        return None
    w = reserved_tokens_max(target)
    if w is None:
        return None
    return (f"with --speculative-eagle-topk {topk} SGLang needs --speculative-num-draft-tokens: "
            f"without it the start fails ({w}: max(topk * steps, None) raises TypeError)")
