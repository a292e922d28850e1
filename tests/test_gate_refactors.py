"""Edits of a real release's gate that keep its meaning: the verdict stays the same, or is an
honest "not recognised" (unknown), never a different graph/eager answer.

Each edit rewrites `EagleDraftWorker._capture_cuda_graphs` of the real eagle_worker_v2.py with
`ast` into a temp tree whose other files link to the real release, so the rest of the analysis
(factory, registry, backend modules) reads the real source.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from pathlib import Path

import pytest

from diag.probes.gate import UNKNOWN, backend_map, read_gate, verdict
from diag.target import Target

pytestmark = pytest.mark.release

WORKER = "srt/speculative/eagle_worker_v2.py"
NAMES = ("aiter", "dsv4", "dsa", "nsa", "qsa", "triton", "compressed", "flashinfer")


def _tree_with(release: Target, source: str, tmp: Path) -> Target:
    """A tree like `release` whose eagle_worker_v2.py is `source` (everything else linked)."""
    src_pkg = release.package
    pkg = tmp / "sglang"
    for rel in ("", "srt", "srt/speculative"):
        d = pkg / rel
        d.mkdir(parents=True, exist_ok=True)
        nxt = {"": "srt", "srt": "speculative", "srt/speculative": None}[rel]
        for child in (src_pkg / rel).iterdir():
            if child.name in (nxt, "eagle_worker_v2.py" if nxt is None else None):
                continue
            (d / child.name).symlink_to(child)
    (pkg / WORKER).write_text(source)
    for meta in release.root.glob("sglang-*.dist-info"):
        (tmp / meta.name).symlink_to(meta)
    return Target(tmp, release.version, "path")


def _gate_parts(tree: ast.Module):
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EagleDraftWorker")
    method = next(n for n in cls.body if isinstance(n, ast.FunctionDef)
                  and n.name == "_capture_cuda_graphs")
    hip_if = next(n for n in method.body if isinstance(n, ast.If)
                  and ast.unparse(n.test) == "_is_hip")
    assign = next(n for n in hip_if.body if isinstance(n, ast.Assign)
                  and n.targets[0].id.startswith("supports_hip"))
    return cls, method, hip_if, assign


def _ext_classes(expr: ast.AST) -> list[str]:
    return [ast.unparse(n.args[1]) for n in ast.walk(expr)
            if isinstance(n, ast.Call) and ast.unparse(n.func) == "isinstance"
            and ast.unparse(n.args[0]) == "self.draft_extend_attn_backend"]


def _decode_part(expr: ast.AST) -> str:
    return next(ast.unparse(n) for n in ast.walk(expr)
                if isinstance(n, ast.Call) and ast.unparse(n.func) == "isinstance"
                and ast.unparse(n.args[0]) == "self.draft_attn_backend")


def _imports_of(hip_if: ast.If) -> list[ast.stmt]:
    return [n for n in hip_if.body if isinstance(n, ast.ImportFrom)]


def _rule(classes: list[str], decode: str, ext_expr: str) -> ast.expr:
    if not classes:
        return ast.parse(decode, mode="eval").body
    return ast.parse(f"{decode} or {ext_expr}", mode="eval").body


# ----------------------------------------------------------------------------- the edits


def helper_method(tree: ast.Module) -> None:
    """The rule moved into a method of the worker: `supports_hip... = self._hip_graph_ok()`."""
    cls, _m, hip_if, assign = _gate_parts(tree)
    helper = ast.parse("def _hip_graph_ok(self):\n    return None").body[0]
    helper.body = [*copy.deepcopy(_imports_of(hip_if)), ast.Return(assign.value)]
    cls.body.append(helper)
    assign.value = ast.parse("self._hip_graph_ok()", mode="eval").body


def helper_function_with_params(tree: ast.Module) -> None:
    """The rule in a module function taking both backends as parameters."""
    _cls, _m, hip_if, assign = _gate_parts(tree)
    rule = ast.unparse(assign.value).replace("self.draft_extend_attn_backend", "ext") \
        .replace("self.draft_attn_backend", "dec")
    fn = ast.parse(f"def _hip_admits(dec, ext):\n    return {rule}").body[0]
    fn.body = [*copy.deepcopy(_imports_of(hip_if)), *fn.body]
    tree.body.append(fn)
    assign.value = ast.parse("_hip_admits(self.draft_attn_backend, self.draft_extend_attn_backend)",
                             mode="eval").body


def renamed_variables(tree: ast.Module) -> None:
    """The gate variable and the backend read through other names."""
    _cls, method, hip_if, assign = _gate_parts(tree)
    old = assign.targets[0].id
    for n in ast.walk(method):
        if isinstance(n, ast.Name) and n.id == old:
            n.id = "hip_capture_ok"
    hip_if.body.insert(len(hip_if.body) - 1,
                       ast.parse("ext_backend = self.draft_extend_attn_backend").body[0])
    src = ast.unparse(assign.value).replace("self.draft_extend_attn_backend", "ext_backend")
    assign.value = ast.parse(src, mode="eval").body


def tuple_isinstance(tree: ast.Module) -> None:
    """One isinstance with a tuple of the draft-extend classes."""
    _cls, _m, _hip_if, assign = _gate_parts(tree)
    classes = _ext_classes(assign.value)
    if not classes:  # 0.5.17: the one class, tested on the decode backend
        assign.value = ast.parse("isinstance(self.draft_attn_backend, "
                                 "(AiterMultiStepDraftBackend,))", mode="eval").body
        return
    assign.value = _rule(classes, _decode_part(assign.value),
                         f"isinstance(self.draft_extend_attn_backend, ({', '.join(classes)},))")


def module_constant(tree: ast.Module) -> None:
    """The classes in a module-level tuple constant (imported at module level), through a
    second module-level name."""
    _cls, _m, hip_if, assign = _gate_parts(tree)
    classes = _ext_classes(assign.value)
    at = next(i for i, n in enumerate(tree.body) if isinstance(n, ast.ClassDef))
    if classes:
        const, attr = f"({', '.join(classes)},)", "draft_extend_attn_backend"
        rule = _rule(classes, _decode_part(assign.value),
                     "isinstance(self.draft_extend_attn_backend, _HIP_ALLOWED)")
    else:  # 0.5.17: the one class is tested on the decode backend
        const, attr = "(AiterMultiStepDraftBackend,)", "draft_attn_backend"
        rule = ast.parse(f"isinstance(self.{attr}, _HIP_ALLOWED)", mode="eval").body
    tree.body[at:at] = [*copy.deepcopy(_imports_of(hip_if)),
                        ast.parse(f"_HIP_GRAPH_TYPES = {const}").body[0],
                        ast.parse("_HIP_ALLOWED = _HIP_GRAPH_TYPES").body[0]]
    assign.value = rule


def type_set_membership(tree: ast.Module) -> None:
    """`type(backend) in {A, B}` (the classes the factory builds are exactly these)."""
    _cls, _m, _hip_if, assign = _gate_parts(tree)
    classes = _ext_classes(assign.value)
    if not classes:  # 0.5.17: the factory builds exactly AiterMultiStepDraftBackend
        assign.value = ast.parse("type(self.draft_attn_backend) in {AiterMultiStepDraftBackend}",
                                 mode="eval").body
        return
    assign.value = _rule(classes, _decode_part(assign.value),
                         f"type(self.draft_extend_attn_backend) in {{{', '.join(classes)}}}")


def alias_import(tree: ast.Module) -> None:
    """`from ... import Class as _Alias` and the alias in the isinstance."""
    _cls, _m, hip_if, assign = _gate_parts(tree)
    for imp in _imports_of(hip_if):
        for a in imp.names:
            a.asname = f"_{a.name}Alias"
    for n in ast.walk(assign.value):
        if isinstance(n, ast.Name) and n.id.endswith("Backend"):
            n.id = f"_{n.id}Alias"
    # module-level names the gate uses (0.5.23's QwenSparseAttnBackend) keep their import;
    # they get a module-level alias instead
    at = next(i for i, n in enumerate(tree.body) if isinstance(n, ast.ClassDef))
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.col_offset == 0 and any(
                a.name == "QwenSparseAttnBackend" for a in n.names):
            tree.body.insert(at, ast.parse(
                "_QwenSparseAttnBackendAlias = QwenSparseAttnBackend").body[0])
            break


def unresolvable_call(tree: ast.Module) -> None:
    """The classes come from a call the analysis cannot evaluate: honest "not recognised"."""
    _cls, _m, _hip_if, assign = _gate_parts(tree)
    classes = _ext_classes(assign.value)
    tree.body.append(ast.parse(f"def _allowed():\n    return ({', '.join(classes) or 'int'},)")
                     .body[0])
    assign.value = _rule(["x"], _decode_part(assign.value),
                         "isinstance(self.draft_extend_attn_backend, _allowed())")


SAME = [helper_method, helper_function_with_params, renamed_variables, tuple_isinstance,
        module_constant, type_set_membership, alias_import]
HONEST = [unresolvable_call]


def _verdicts(t: Target) -> dict[tuple[str, int], tuple[str, str]]:
    gate = read_gate(t)
    bm = backend_map(t, "hip")
    return {(n, s): (v.mode, v.reason) for n in NAMES for s in (1, 3)
            for v in [verdict(gate, bm.get(n), "hip", s)]}


@pytest.mark.parametrize("version", ["0.5.23", "0.5.17"])
@pytest.mark.parametrize("edit", SAME + HONEST, ids=lambda e: e.__name__)
def test_meaning_preserving_edit(release, tmp_path, version, edit: Callable[[ast.Module], None]):
    real = release(version)
    tree = ast.parse(real.file(WORKER).read_text())
    edit(tree)
    edited = _tree_with(real, ast.unparse(tree), tmp_path)
    before, after = _verdicts(real), _verdicts(edited)
    assert {m for m, _ in before.values()} >= {"graph", "eager"}  # the check can tell them apart
    wrong = {k: (before[k][0], after[k]) for k in before
             if after[k][0] not in (before[k][0], UNKNOWN)}
    assert not wrong, f"{edit.__name__} changed verdicts: {wrong}"
    if edit in SAME:  # the analysis follows these: the very same answer
        changed = {k: after[k] for k in before if after[k][0] != before[k][0]}
        assert not changed, f"{edit.__name__} not followed: {changed}"
    else:  # and says it cannot tell, with the file:line
        g = read_gate(edited)
        assert not g.recognised and "eagle_worker_v2.py:" in (g.problem or ""), g.problem
        assert all(m == UNKNOWN for m, _ in after.values()), after
