"""Static check: does capturing a backend's draft-extend graph run a host sync under capture?

A device->host sync inside a CUDA/HIP graph capture is illegal (the capture fails, or on ROCm
the server faults). `torch.repeat_interleave` with tensor `repeats` and no `output_size` syncs
twice: PyTorch's `repeat_interleave_common` (aten/src/ATen/native/Repeat.h) reads
`cumsum[-1].item()` and checks `(repeats >= 0).all().item()` when no `output_size` is given
(diag's sync counter counts the two; the GPU tests check it against torch's sync debug mode).
This walks, in a backend's source file, the methods reachable through
`self.<method>(...)` calls from the entry points a graph runner calls while capturing
(`init_forward_metadata_capture_cuda_graph`, `init_forward_metadata_out_graph`) and lists the
`repeat_interleave` calls that would sync there.

What it cannot tell, and how it decides:
- `repeats` that is an int literal, a `self.<attr>` (a Python int in every case read), a
  parameter annotated `int`, or a local assigned from `//`, `len()` or `int()` is taken as host
  data: no sync. Anything else (a local tensor) counts.
- A function that has one `repeat_interleave` WITH `output_size=` and another without is the
  PR #29202 shape: the draft-extend branch (`need_compress=False` / `exact_num_tokens`) takes
  the former, the target-extend branch the latter. Such a function counts as safe for
  draft-extend. Branches taken only outside capture are not told apart otherwise.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from diag.probes.source import parse_text

CAPTURE_ENTRIES = ("init_forward_metadata_capture_cuda_graph", "init_forward_metadata_out_graph")


@dataclass(frozen=True)
class SyncSite:
    function: str  # method name in the backend class (or a base in the same file)
    line: int
    repeats: str  # the `repeats` expression as written

    def describe(self) -> str:
        return f"{self.function}:{self.line} repeat_interleave(repeats={self.repeats}) without output_size"


def _class_methods(tree: ast.Module, name: str) -> dict[str, ast.FunctionDef] | None:
    """Methods of class `name` and of its bases defined in the same file (subclass wins)."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    if name not in classes:
        return None
    out: dict[str, ast.FunctionDef] = {}
    todo, seen = [name], set()
    while todo:
        cname = todo.pop(0)
        if cname in seen or cname not in classes:
            continue
        seen.add(cname)
        for m in classes[cname].body:
            if isinstance(m, ast.FunctionDef):
                out.setdefault(m.name, m)
        todo.extend(b.id for b in classes[cname].bases if isinstance(b, ast.Name))
    return out


def _repeats_arg(call: ast.Call) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == "repeats":
            return k.value
    f = call.func
    assert isinstance(f, ast.Attribute)
    if isinstance(f.value, ast.Name) and f.value.id == "torch":  # torch.repeat_interleave(x, r)
        return call.args[1] if len(call.args) > 1 else (call.args[0] if call.args else None)
    return call.args[0] if call.args else None  # x.repeat_interleave(r)


def _host_names(fn: ast.FunctionDef) -> set[str]:
    """Names that hold Python ints in `fn`: parameters annotated `int`, and locals assigned
    from `a // b`, `len(...)` or `int(...)`."""
    args = fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs
    out = {a.arg for a in args if isinstance(a.annotation, ast.Name) and a.annotation.id == "int"}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            v = n.value
            if (isinstance(v, ast.BinOp) and isinstance(v.op, ast.FloorDiv)) or \
                    (isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and
                     v.func.id in ("len", "int")):
                out.add(n.targets[0].id)
    return out


def _host_int(expr: ast.expr | None, host_names: set[str]) -> bool:
    if expr is None or isinstance(expr, ast.Constant):
        return True
    if isinstance(expr, ast.Name):
        return expr.id in host_names
    return isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and \
        expr.value.id == "self"


def capture_sync_sites(source: str, class_name: str) -> list[SyncSite] | None:
    """Sync sites reachable under draft-extend capture; None when the class is not in `source`."""
    tree = parse_text(source)
    methods = _class_methods(tree, class_name)
    if methods is None:
        return None
    seen: set[str] = set()
    todo = [e for e in CAPTURE_ENTRIES if e in methods]
    sites: list[SyncSite] = []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        calls = [n for n in ast.walk(methods[name])
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
        todo.extend(c.func.attr for c in calls
                    if isinstance(c.func.value, ast.Name) and c.func.value.id == "self"
                    and c.func.attr in methods)
        ri = [c for c in calls if c.func.attr == "repeat_interleave"]
        if any(k.arg == "output_size" for c in ri for k in c.keywords):
            continue  # the #29202 split: the draft-extend branch passes output_size
        host = _host_names(methods[name])
        for c in ri:
            rep = _repeats_arg(c)
            if not _host_int(rep, host):
                sites.append(SyncSite(name, c.lineno, ast.unparse(rep) if rep else "?"))
    return sorted(sites, key=lambda s: s.line)
