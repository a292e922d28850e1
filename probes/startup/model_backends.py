"""The model hook's per-architecture backend asserts: a model that refuses the attention backend
at start.

Why: SGLang's model hook walks an `if model_arch ... elif model_arch ...` chain, and some
branches assert the attention backend: Llama4 takes fa3/aiter/triton/ascend/trtllm_mha/intel_xpu
(0.5.23 arg_groups/model_hook.py:622, 0.5.9 server_args.py:1230), Gemma4 its own list (0.5.23
:655, 0.5.17 server_args.py:5460), Exaone4 with a sliding window fa3/triton/trtllm_mha (0.5.23
:679), Olmo2 not flashinfer (:690), Lfm2 not triton (:719). A server with another backend never
starts; diag read the draft-extend gate for it. The chain is `handle_model_specific_adjustments`
(0.5.19+ model_hook.py) or `ServerArgs._handle_model_specific_adjustments` (server_args.py
before), found by name; each branch's architectures and each assert are read by shape: the
backend is a name bound from `.attention_backend` or from `attention_backends_of(...)` (prefill,
decode: diag's one backend is both), or `X.attention_backend` itself, tested with `in` / `not in`
a literal set (or a name bound to one in the branch), `==` or `!=`. A condition around the
assert that is not about the device or the backend is named (`depends`).
"""

from __future__ import annotations

import ast

from diag.probes.source import parse_file, unparse
from diag.probes.startup.resolve import Model, Where
from diag.target import Target

FILES = (("srt/arg_groups/model_hook.py", "handle_model_specific_adjustments"),
         ("srt/server_args.py", "_handle_model_specific_adjustments"))
REFUSED, DEPENDS = "refused", "depends"
Refusal = tuple[str, str, "Where | None"]


def _function(target: Target) -> tuple[str, ast.FunctionDef, dict[str, list[str]]] | None:
    """(file, the chain's function, the module's string-tuple constants)."""
    for rel, name in FILES:
        tree = parse_file(target.file(rel)) if target.file(rel).is_file() else None
        for n in ast.walk(tree) if tree is not None else ():
            if isinstance(n, ast.FunctionDef) and n.name == name:
                consts = {t.id: v for st in tree.body if isinstance(st, ast.Assign)  # type: ignore[union-attr]
                          for t in st.targets if isinstance(t, ast.Name)
                          and (v := _strings(st.value)) is not None}
                return f"sglang/{rel}", n, consts
    return None


def _strings(e: ast.AST) -> list[str] | None:
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)) and all(
            isinstance(x, ast.Constant) and isinstance(x.value, str) for x in e.elts):
        return [x.value for x in e.elts]  # type: ignore[attr-defined]
    return None


def _on_gpu(e: ast.AST) -> bool:
    """`self.device != "cpu"` / `cfg.device != "cpu"`: true where diag audits (HIP, CUDA)."""
    return isinstance(e, ast.Compare) and len(e.ops) == 1 and isinstance(e.ops[0], ast.NotEq) \
        and isinstance(e.left, ast.Attribute) and e.left.attr == "device" \
        and isinstance(e.comparators[0], ast.Constant) and e.comparators[0].value == "cpu"


def _arch_test(e: ast.AST, arch: str, consts: dict[str, list[str]]
               ) -> tuple[bool, list[str]] | None:
    """(whether the branch is the model's, the other conditions of its test) for a branch
    on `model_arch`; None for a test that is not one."""
    parts = e.values if isinstance(e, ast.BoolOp) and isinstance(e.op, ast.And) else [e]
    hit, other = None, []
    for p in parts:
        if isinstance(p, ast.Compare) and len(p.ops) == 1:
            left, op, right = p.left, p.ops[0], p.comparators[0]
            if isinstance(left, ast.Name) and left.id == "model_arch":
                names = (consts.get(right.id) if isinstance(right, ast.Name) else
                         _strings(right)) if isinstance(op, ast.In) else (
                    [right.value] if isinstance(op, ast.Eq) and isinstance(right, ast.Constant)
                    else None)
                if names is not None:
                    hit = arch in names
                    continue
            if isinstance(right, ast.Name) and right.id == "model_arch" and \
                    isinstance(op, ast.In) and isinstance(left, ast.Constant):
                hit = str(left.value) in arch  # `"Llama4" in model_arch`
                continue
        if _on_gpu(p):
            continue
        other.append(unparse(p))
    return None if hit is None else (hit, other)


def _backend_names(body: list[ast.stmt], upto: int) -> set[str]:
    """Names bound to the attention backend in the branch before line `upto`."""
    out: set[str] = set()
    for st in body:
        for n in ast.walk(st):
            if isinstance(n, ast.Assign) and n.lineno < upto:
                v = unparse(n.value)
                for t in n.targets:
                    if isinstance(t, ast.Name) and v.endswith(".attention_backend"):
                        out.add(t.id)
                    elif isinstance(t, ast.Tuple) and "attention_backends" in v:
                        out |= {x.id for x in t.elts if isinstance(x, ast.Name)}
    return out


def _literals(body: list[ast.stmt], upto: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for st in body:
        for n in ast.walk(st):
            if isinstance(n, ast.Assign) and n.lineno < upto and len(n.targets) == 1 and \
                    isinstance(n.targets[0], ast.Name) and _strings(n.value) is not None:
                out[n.targets[0].id] = _strings(n.value)  # type: ignore[assignment]
    return out


def _holds(e: ast.AST, backend: str, names: set[str], lits: dict[str, list[str]]
           ) -> bool | None:
    """The assert's test for `backend`; None where it is not read."""
    if isinstance(e, ast.BoolOp):
        vals = [_holds(v, backend, names, lits) for v in e.values]
        if None in vals:
            return None
        return all(vals) if isinstance(e.op, ast.And) else any(vals)
    if not (isinstance(e, ast.Compare) and len(e.ops) == 1):
        return None
    left, op, right = e.left, e.ops[0], e.comparators[0]
    if not ((isinstance(left, ast.Name) and left.id in names) or
            (isinstance(left, ast.Attribute) and left.attr == "attention_backend")):
        return None
    if isinstance(op, (ast.In, ast.NotIn)):
        allowed = _strings(right) if not isinstance(right, ast.Name) else lits.get(right.id)
        if allowed is None:
            return None
        return (backend in allowed) == isinstance(op, ast.In)
    if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant):
        return (backend == right.value) == isinstance(op, ast.Eq)
    return None


def _config_test(e: ast.AST, model: Model) -> bool | None:
    """`hf_config.<key> is (not) None`, decided where `--model`'s config.json gives the key (an
    absent key is the config class's default, not read here)."""
    if not (isinstance(e, ast.Compare) and len(e.ops) == 1 and
            isinstance(e.ops[0], (ast.Is, ast.IsNot)) and isinstance(e.left, ast.Attribute) and
            unparse(e.left.value) == "hf_config" and isinstance(e.comparators[0], ast.Constant)
            and e.comparators[0].value is None):
        return None
    if not model.source.endswith("config.json") or e.left.attr not in model.params:
        return None
    return (model.params[e.left.attr] is None) == isinstance(e.ops[0], ast.Is)


def _asserts(stmts: list[ast.stmt], conds: tuple[str, ...], arch: str,
             consts: dict[str, list[str]], model: Model | None = None
             ) -> list[tuple[ast.Assert, tuple[str, ...]]]:
    """Each assert of the branch with the conditions of the `if`s around it: a nested test of
    the architecture is decided, a test of the backend being None is the auto-select (false for
    a backend that is set), a test of the model's config that its config.json answers is
    decided, any other is a condition."""
    out = []
    for st in stmts:
        if isinstance(st, ast.Assert):
            out.append((st, conds))
        elif isinstance(st, ast.If):
            text = unparse(st.test)
            if text.endswith("attention_backend is None"):
                out += _asserts(st.orelse, conds, arch, consts, model)
                continue
            on = _arch_test(st.test, arch, consts)
            if on is not None:
                if not on[0]:  # not the model's: its `else` runs
                    out += _asserts(st.orelse, conds, arch, consts, model)
                    continue
                out += _asserts(st.body, conds + tuple(on[1]), arch, consts, model)
                if on[1]:  # the model's, under other conditions: the `else` where they fail
                    out += _asserts(st.orelse, conds + (f"not ({' and '.join(on[1])})",),
                                    arch, consts, model)
                continue
            known = _config_test(st.test, model) if model is not None else None
            if known is not None:  # the model's config.json decides it
                out += _asserts(st.body if known else st.orelse, conds, arch, consts, model)
                continue
            out += _asserts(st.body, conds + (text,), arch, consts, model)
            out += _asserts(st.orelse, conds + (f"not ({text})",), arch, consts, model)
    return out


def model_backend_assert(target: Target, backend: str, model: Model) -> Refusal | None:
    """The model hook's assert on the attention backend for `model.arch`: refused when it fails
    for `backend`, `depends` when a condition around it is not read."""
    if not model.arch or not backend:
        return None
    found = _function(target)
    if found is None:
        return None
    rel, fn, consts = found
    ifs = [s for s in ast.walk(fn) if isinstance(s, ast.If)]
    elif_of = {id(s.orelse[0]): s for s in ifs if len(s.orelse) == 1
               and isinstance(s.orelse[0], ast.If)}

    def matches(s: ast.If) -> bool:
        t = _arch_test(s.test, model.arch or "", consts)
        return bool(t and t[0])

    def taken(s: ast.If) -> bool:
        """The model's branch, and no earlier branch of its chain is."""
        prev = elif_of.get(id(s))
        while prev is not None:
            if matches(prev):
                return False
            prev = elif_of.get(id(prev))
        return matches(s)

    node = next((s for s in sorted(ifs, key=lambda s: s.lineno) if taken(s)), None)
    if node is None:
        return None
    others = _arch_test(node.test, model.arch, consts)[1]  # type: ignore[index]
    for a, conds in _asserts(node.body, tuple(others), model.arch, consts, model):
        names = _backend_names(node.body, a.lineno)
        ok = _holds(a.test, backend, names, _literals(node.body, a.lineno))
        if ok is not False:
            continue
        w = Where(rel, a.lineno)
        rule = f"{model.arch}'s model hook asserts `{unparse(a.test)[:160]}` ({w})"
        if conds:
            return (DEPENDS, f"refused at start if {' and '.join(conds)}: {rule}; "
                             f"{backend} fails it", w)
        return (REFUSED, f"{rule}: {backend} fails it", w)
    return None
