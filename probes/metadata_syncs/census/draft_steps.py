"""What a multi-step draft backend sets on the batch's spec input before each per-step call.

Why: EAGLE's draft decode builds its metadata through `TritonMultiStepDraftBackend`, whose
`common_template` sets `forward_batch.spec_info.kv_indptr` (and `kv_indices`) to a slice of its
own buffers right before each per-step backend's `init_forward_metadata` (sglang 0.5.23
layers/attention/triton_backend.py:2623-2635, `call_fn` :2738-2753; 0.5.19 :2110-2122). The
per-step `TritonAttnBackend.init_forward_metadata` then never takes its decode branch `if
spec_info is None or spec_info.kv_indptr is None:` (0.5.23 :891), which holds every sync site
a decode batch could reach there. Read from the module, per release: no table by hand.

In speculative decoding a per-step backend sees a DECODE batch from its multi-step owner only:
the target verifies (TARGET_VERIFY) and extends, the draft extends (DRAFT_EXTEND) and decodes
through the multi-step backend (0.5.23 speculative/eagle_worker_v2.py:707-711); the draft
extend's idle batch is IDLE, another mode.
"""

from __future__ import annotations

import ast
import re

from diag.probes.source import unparse

_MULTI_STEP = re.compile(r"MultiStep\w*Backend$")
DRAFT_DECODE_MODE = "decode"  # the census mode of draft decode's per-step calls
SPEC = "forward_batch.spec_info"


def spec_sets(tree: ast.Module, rel: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """Per-step backend class -> ((attribute, `file:line` where it is set), ...): the
    attributes of `forward_batch.spec_info` that a multi-step class of the module sets, at the
    top of a loop body, to a value other than None, before that body calls a per-step backend
    (`call_fn(...)` or `self.attn_backends[i].init_forward_metadata(...)`); the per-step
    classes are those it appends to `self.attn_backends`. Kept on the tree."""
    memo = getattr(tree, "_diag_spec_sets", None)
    if memo is not None:
        return memo
    out: dict[str, dict[str, str]] = {}
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and _MULTI_STEP.search(cls.name)):
            continue
        steps = _per_step_classes(cls)
        if not steps:
            continue
        attrs: dict[str, str] = {}
        for loop in ast.walk(cls):
            if isinstance(loop, (ast.For, ast.While)):
                attrs |= {a: w for a, w in _set_before_call(loop.body, rel).items()
                          if a not in attrs}
        for name in steps:
            out.setdefault(name, {}).update(attrs)
    result = {k: tuple(sorted(v.items())) for k, v in out.items() if v}
    tree._diag_spec_sets = result  # type: ignore[attr-defined]
    return result


def _per_step_classes(cls: ast.ClassDef) -> set[str]:
    """The classes `self.attn_backends.append(X(...))` builds in the class."""
    out = set()
    for n in ast.walk(cls):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                n.func.attr == "append" and unparse(n.func.value) == "self.attn_backends" and \
                n.args and isinstance(n.args[0], ast.Call) and \
                isinstance(n.args[0].func, ast.Name):
            out.add(n.args[0].func.id)
    return out


def _set_before_call(body: list[ast.stmt], rel: str) -> dict[str, str]:
    """`forward_batch.spec_info.<attr> = <not None>` statements at the top of `body` that come
    before a statement calling a per-step backend: attr -> `file:line`."""
    found: dict[str, str] = {}
    for st in body:
        if _calls_step(st):
            return found
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and \
                isinstance(st.targets[0], ast.Attribute) and \
                unparse(st.targets[0].value) == SPEC and \
                not (isinstance(st.value, ast.Constant) and st.value.value is None):
            found.setdefault(st.targets[0].attr, f"{rel}:{st.lineno}")
    return {}  # no per-step call in the body: nothing is set before one


def _calls_step(st: ast.stmt) -> bool:
    for n in ast.walk(st):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Name) and f.id == "call_fn":
                return True
            if isinstance(f, ast.Attribute) and f.attr == "init_forward_metadata" and \
                    unparse(f.value).startswith("self.attn_backends["):
                return True
    return False


def rules_out(g: tuple, mode: str) -> bool:
    """A guard that the multi-step owner's setting makes false on `mode`: `spec_info is None`
    or `spec_info.<attr> is None` there, or a disjunction of such tests."""
    if g[0] == "any":
        return all(rules_out(a, mode) for a in g[2])
    return g[0].startswith("spec:") and g[1] == "is" and mode in dict(g[2] or ())
