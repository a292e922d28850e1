"""Fields of the speculative input that every writer sets together with another one.

Why: fa3's draft-extend replay (0.5.23 flashattention_backend.py:3294-3303, 0.5.19 :3071-3080)
reads `getattr(spec_info, "extend_seq_lens_tensor", None)` first and copies
`extend_seq_lens_cpu` up (`torch.as_tensor(..., device=device)`, a blocking copy) only in an
`elif` where the tensor is None. Neither is a declared field of a speculative input class, and
the one function that sets `extend_seq_lens_cpu` sets the tensor beside it (0.5.23
speculative/eagle_draft_extend_cuda_graph_runner.py:625-628, 0.5.19 :563-566; the multi-layer
runner sets the tensor only, :915 / :793): the `elif` cannot run. Read from the release's
writers, not assumed: a writer that sets one without the other, a declared field (a
constructor may set it) or no writer at all leaves the test a data test.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

_INPUT_CLASS = re.compile(r"^class \w+Input\b", re.M)
_DIRS = ("sglang/srt/speculative", "sglang/srt/model_executor", "sglang/srt/managers")


@functools.lru_cache(maxsize=8)
def _sources(root: str) -> tuple[tuple[str, str], ...]:
    """(relative path, text) of the modules that may write a speculative input's fields."""
    out = []
    for d in _DIRS:
        base = Path(root, d)
        if base.is_dir():
            for p in sorted(base.rglob("*.py")):
                try:
                    out.append((str(p.relative_to(root)), p.read_text(errors="replace")))
                except OSError:
                    continue
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _tree(root: str, rel: str) -> ast.Module | None:
    text = dict(_sources(root)).get(rel, "")
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _input_class(c: ast.ClassDef) -> bool:
    """A speculative input class (`EagleDraftExtendInput(SpecInput)`), not its graph buffers."""
    return c.name.endswith("Input")


def _spec_object(e: ast.AST, in_input: bool) -> str | None:
    """The text of an object that is the speculative input: `...spec_info`, or `self` in a
    method of an input class."""
    text = ast.unparse(e)
    if text == "spec_info" or text.endswith(".spec_info") or (in_input and text == "self"):
        return text
    return None


def _writes(fn: ast.AST, in_input: bool) -> list[tuple[str, str, int, bool]]:
    """(object, field, line, is_none) of each `obj.field = value` on a speculative input in
    `fn` (nested defs aside); is_none: the value is the constant None."""
    out = []
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and (obj := _spec_object(t.value, in_input)):
                    none = isinstance(n.value, ast.Constant) and n.value.value is None
                    out.append((obj, t.attr, n.lineno, none))
        todo.extend(ast.iter_child_nodes(n))
    return out


def co_set(root: Path, field: str, partner: str) -> str | None:
    """`file:line`s of every writer of the speculative input's `field`, where each also sets
    `partner` (not to None) on the same object in the same function; None where one does not,
    where an input class declares `field` (its constructor may set it), or where no writer
    sets it."""
    at: list[str] = []
    f = re.escape(field)
    write = re.compile(rf"spec_info\.{f}\s*(:[^=]*)?=[^=]")
    own = re.compile(rf"self\.{f}\s*(:[^=]*)?=[^=]|^\s+{f}\s*:", re.M)
    for rel, text in _sources(str(root)):
        if field not in text or not (write.search(text) or (
                _INPUT_CLASS.search(text) and own.search(text))):
            continue  # no write to it here, nor an input class's own: nothing to parse
        tree = _tree(str(root), rel)
        if tree is None:
            return None
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _input_class(node) and any(
                    isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                    and s.target.id == field for s in node.body):
                return None  # a declared field
        lines = text.splitlines()
        for fn, in_input in _functions(tree):
            if field not in "\n".join(lines[fn.lineno - 1:fn.end_lineno]):
                continue  # a function that never names it writes nothing to it
            writes = _writes(fn, in_input)
            for obj, attr, line, none in writes:
                if attr != field or none:
                    continue
                if not any(o == obj and a == partner and not nn for o, a, _, nn in writes):
                    return None
                at.append(f"{rel}:{line}")
    return ", ".join(at) or None


def _functions(tree: ast.Module) -> list[tuple[ast.AST, bool]]:
    """Every function of the module, with whether it is a method of an input class."""
    out: list[tuple[ast.AST, bool]] = []

    def visit(node: ast.AST, in_input: bool) -> None:
        for c in ast.iter_child_nodes(node):
            if isinstance(c, ast.ClassDef):
                visit(c, _input_class(c))
            elif isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((c, in_input))
                visit(c, False)

    visit(tree, False)
    return out
