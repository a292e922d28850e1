"""Backends only a wrapper runs: the modes their entry point never sees.

Why: the census takes every backend's `init_forward_metadata` as an entry point of every mode
the name allows. The linear-attention backends (mamba, GDN, KDA, short-conv, lightning) are
never built alone: `HybridLinearAttnBackend` holds one (`__init__(self, full_attn_backend,
linear_attn_backend: MambaAttnBackendBase)`, 0.5.23 hybrid_linear_attn_backend.py:1187-1198) and
its `init_forward_metadata` returns early on a mode where only the full-attention backend runs
(0.5.23 :1340-1345: `if forward_batch.forward_mode.is_draft_extend_v2(): self.full_attn_backend.
init_forward_metadata(forward_batch); return`). A site in the linear backend's metadata then
cannot run on that mode. Read from the wrapper of each release (its text, not a line kept
here); a release whose wrapper has no such early return keeps every mode.

Nor does a DECODE batch reach the wrapper or what it holds: under speculative decoding every
DECODE batch is the draft's, run through the multi-step backend the draft worker builds in
speculative/draft_utils.py, which never builds the wrapper (0.5.19 draft_utils.py:234-239: for
`hybrid_linear_attn` the draft decodes with fa3's, triton's or the AMX backend's multi-step
backend). Read from draft_utils.py: where it names the wrapper or the held type, decode stays.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace

from diag.probes.metadata_syncs.census.paths import MODES, cond
from diag.probes.source import parse_file, unparse

WRAPPER_MODULE = "sglang.srt.layers.attention.hybrid_linear_attn_backend"
DRAFT_UTILS = "sglang.srt.speculative.draft_utils"
DRAFT_UTILS_REL = "srt/speculative/draft_utils.py"  # (the census's cache key)
ENTRY = "init_forward_metadata"


@dataclass(frozen=True)
class Wrapped:
    """The held backend's type, the entry the wrapper withholds on `modes`, and where."""

    child_type: str  # the annotated type of the held backend (its subclasses are held too)
    entry: str
    modes: frozenset[str]
    where: str  # file:line of the early return's test
    wrapper: str = ""  # the wrapper's class
    # the modes no batch of the wrapper's own entry has (decode: draft_utils never builds it)
    wrapper_modes: frozenset[str] = frozenset()


def wrapped(modules) -> Wrapped | None:
    """The wrapper's early return, read once per target (None: no wrapper or no such return)."""
    if modules is None:
        return None
    if hasattr(modules, "_diag_wrapped"):
        return modules._diag_wrapped
    got = None
    tree = parse_file(modules.path(WRAPPER_MODULE))
    if tree is not None:
        got = _read(tree, WRAPPER_MODULE.replace(".", "/") + ".py")
    if got is not None and _draft_never_builds(modules, (got.wrapper, got.child_type)):
        got = replace(got, modes=got.modes | {"decode"}, wrapper_modes=frozenset({"decode"}))
    modules._diag_wrapped = got  # type: ignore[attr-defined]
    return got


def _draft_never_builds(modules, names: tuple[str, ...]) -> bool:
    """Whether the draft worker's backend factory (speculative/draft_utils.py) exists and
    names none of `names`."""
    try:
        text = modules.path(DRAFT_UTILS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "def create_decode_backend" in text and not any(n and n in text for n in names)


def _read(tree: ast.Module, rel: str) -> Wrapped | None:
    for cls in (c for c in tree.body if isinstance(c, ast.ClassDef)):
        methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
        init, entry = methods.get("__init__"), methods.get(ENTRY)
        if init is None or entry is None:
            continue
        held = _held(init)  # attr -> annotated type
        if not held:
            continue
        for st in entry.body:
            if not (isinstance(st, ast.If) and st.body and isinstance(st.body[-1], ast.Return)):
                continue
            c = cond(st.test, {})  # the modes the early return takes (paths.cond)
            withheld = frozenset(m for m, _ in c.true)
            called = {unparse(n.func.value) for n in ast.walk(st)
                      if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                      and n.func.attr == ENTRY}
            skipped = [t for a, t in held.items() if f"self.{a}" not in called]
            if not c.unknown and withheld and withheld != set(MODES) and called and \
                    len(skipped) == 1:
                return Wrapped(skipped[0], ENTRY, withheld, f"{rel}:{st.lineno}", cls.name)
    return None


def _held(init: ast.FunctionDef) -> dict[str, str]:
    """`self.<attr> = <param>` for each parameter annotated with a class name."""
    typed = {a.arg: a.annotation.id for a in init.args.args
             if isinstance(a.annotation, ast.Name)}
    out = {}
    for st in init.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and \
                isinstance(st.targets[0], ast.Attribute) and \
                isinstance(st.targets[0].value, ast.Name) and st.targets[0].value.id == "self" \
                and isinstance(st.value, ast.Name) and st.value.id in typed:
            out[st.targets[0].attr] = typed[st.value.id]
    return out


def is_held(classes: dict[str, ast.ClassDef], name: str, child_type: str) -> bool:
    """Whether class `name` of this module is `child_type` or derives from it (by base name;
    a base in another module is known by its name only)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        n = todo.pop()
        if n == child_type:
            return True
        if n in seen or n not in classes:
            continue
        seen.add(n)
        todo += [b.id for b in classes[n].bases if isinstance(b, ast.Name)]
    return False
