"""Static census of sync-prone calls in SGLang's attention metadata builders (AST only).

Builders: the methods named `init_forward_metadata*` (and `_build_*meta*`, `_make_*meta*`,
`_prepare_*meta*`, `_attach_*meta*`, `_compute_*meta*`) of every class under
`sglang/srt/layers/attention/**`, plus the helpers they call, transitively (`self.m(...)` on the
same class or a base class in the same module, and module-level functions of the same module).

Each sync-prone call in a builder gets one verdict:
- `syncs`: a device tensor is read from the host (2 syncs for `repeat_interleave` without
  `output_size`, 1 otherwise);
- `host-mirror`: the value read is a host mirror (`*_cpu` names) - no sync;
- `capture-only`: under an `if ...capture...` branch or in a `*capture*` function: runs while a
  graph is captured, not per step;
- `cannot-tell`: the census cannot say whether the tensor lives on the device.

What it cannot tell (by construction): types are guessed from names, annotations, assignments in
the same function and well-known ForwardBatch fields; bool-mask indexing and `if tensor:` are not
detected; calls through other modules are not followed; a branch that never runs on the platform
is still counted. The executed harness (probes.builder_harness) measures what it can run.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diag.target import Target

ATTENTION_DIR = "srt/layers/attention"

# ForwardBatch / metadata fields that hold device tensors (their host mirrors end in `_cpu`).
_DEVICE_FIELDS = {"extend_seq_lens", "seq_lens", "req_pool_indices", "extend_prefix_lens",
                  "positions", "out_cache_loc", "extend_start_loc", "accept_length",
                  "cu_seqlens_q", "cu_seqlens_k", "cache_seqlens_int32", "page_table"}
_HOST_READ_METHODS = {"item": 1, "tolist": 1, "cpu": 1, "numpy": 1}
_DYNAMIC = {"nonzero", "unique", "masked_select", "unique_consecutive", "argwhere"}
_REDUCTIONS = {"sum", "max", "min", "any", "all", "prod", "amax", "amin"}
_SCALAR_CALLS = {"int", "len", "sum", "float", "bool", "round", "math.ceil", "cdiv"}
_FACTORIES = {"tensor", "as_tensor", "arange", "zeros", "ones", "empty", "full", "rand",
              "randn", "randint", "linspace", "from_numpy"}
_SAME_KIND = {"to", "long", "int", "clamp", "clamp_min", "clamp_max", "cumsum", "contiguous",
              "flatten", "view", "reshape", "squeeze", "unsqueeze", "clone", "sum", "max", "min",
              "type", "detach", "narrow", "expand", "repeat"}

# Backends on each platform's draft-extend path (SGLANG.md: the HIP gate's allow-list over the
# releases, plus the backends it tests; CUDA's graph_supported_backend_types).
DRAFT_EXTEND_BACKENDS = {
    "hip": {"DeepseekV4HipRadixBackend", "DeepseekSparseAttnBackend", "QwenSparseAttnBackend",
            "AiterAttnBackend", "AiterMultiStepDraftBackend", "NativeSparseAttnBackend",
            "TritonAttnBackend"},
    "cuda": {"DeepseekV4AttnBackend", "DeepseekSparseAttnBackend", "NativeSparseAttnBackend",
             "QwenSparseAttnBackend", "FlashAttentionBackend", "FlashInferAttnBackend",
             "TritonAttnBackend", "TRTLLMHAAttnBackend", "TRTLLMMLABackend",
             "FlashMLABackend", "FlashInferMLAAttnBackend"},
}
# config.attention_backend name -> backend classes (attention_registry.py)
BACKEND_NAMES = {
    "aiter": {"AiterAttnBackend", "AiterMultiStepDraftBackend"},
    "dsv4": {"DeepseekV4HipRadixBackend", "DeepseekV4AttnBackend"},
    "dsa": {"DeepseekSparseAttnBackend"}, "nsa": {"NativeSparseAttnBackend",
                                                  "DeepseekSparseAttnBackend"},
    "qsa": {"QwenSparseAttnBackend"}, "triton": {"TritonAttnBackend"},
    "fa3": {"FlashAttentionBackend"}, "flashinfer": {"FlashInferAttnBackend"},
}

# Helpers that build metadata but are called from forward(), not from init_forward_metadata*.
_NAMED_BUILDER = re.compile(r"^_?(build|make|prepare|attach|compute)_\w*meta")

VERDICTS = ("syncs", "host-mirror", "capture-only", "cannot-tell")


@dataclass(frozen=True)
class Site:
    file: str  # relative to the target root (sglang/...)
    line: int
    function: str  # Class.method or function
    backend: str  # the class (or module stem) the builder belongs to
    call: str  # source text of the call, shortened
    kind: str  # repeat_interleave | item | tolist | cpu | numpy | nonzero | ... | int()
    verdict: str  # one of VERDICTS
    why: str
    syncs: int  # syncs per execution when verdict == "syncs" (else 0)

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class Census:
    root: str
    files: int = 0
    builders: dict[str, list[str]] = field(default_factory=dict)  # file -> builder qualnames
    sites: list[Site] = field(default_factory=list)
    with_output_size: list[Site] = field(default_factory=list)  # repeat_interleave with it
    errors: list[str] = field(default_factory=list)  # files that did not parse

    def by_backend(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for s in self.sites:
            row = out.setdefault(s.backend, dict.fromkeys(VERDICTS, 0) | {"sync_count": 0})
            row[s.verdict] += 1
            row["sync_count"] += s.syncs
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "files": self.files, "builders": self.builders,
                "sites": [s.to_dict() for s in self.sites],
                "with_output_size": [s.to_dict() for s in self.with_output_size],
                "errors": self.errors}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Census:
        return cls(d["root"], d["files"], {k: list(v) for k, v in d["builders"].items()},
                   [Site(**s) for s in d["sites"]],
                   [Site(**s) for s in d["with_output_size"]], list(d["errors"]))

    def syncing(self, backends: set[str] | None = None) -> list[Site]:
        return [s for s in self.sites if s.verdict == "syncs"
                and (backends is None or s.backend in backends)]


def _src(node: ast.AST, limit: int = 90) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _root_name(e: ast.AST) -> str | None:
    while isinstance(e, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(e, ast.Attribute) and e.attr.endswith("_cpu"):
            return e.attr
        e = e.func if isinstance(e, ast.Call) else e.value
    return e.id if isinstance(e, ast.Name) else None


class _Kinds:
    """Guesses whether an expression is a device tensor, a host value, a scalar, or unknown."""

    def __init__(self, fn: ast.FunctionDef) -> None:
        self.params: dict[str, str] = {}
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        for a in args:
            ann = ast.unparse(a.annotation) if a.annotation is not None else ""
            if a.arg.endswith("_cpu") or "List" in ann or "list" in ann:
                self.params[a.arg] = "host"
            elif "Tensor" in ann:
                self.params[a.arg] = "tensor"
            elif ann in ("int", "bool", "float"):
                self.params[a.arg] = "scalar"
        self.assigned: dict[str, list[tuple[int, ast.AST]]] = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and \
                    isinstance(n.targets[0], ast.Name):
                self.assigned.setdefault(n.targets[0].id, []).append((n.lineno, n.value))
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value:
                self.assigned.setdefault(n.target.id, []).append((n.lineno, n.value))

    def of(self, e: ast.AST, line: int, depth: int = 0) -> str:
        if depth > 8:
            return "unknown"
        if isinstance(e, ast.Constant):
            return "scalar"
        if isinstance(e, ast.Name):
            if e.id.endswith("_cpu"):
                return "host"
            prior = [(ln, v) for ln, v in self.assigned.get(e.id, []) if ln <= line]
            if prior:
                ln, value = prior[-1]
                return self.of(value, ln - 1, depth + 1)
            if e.id in self.params:
                return self.params[e.id]
            return "tensor" if e.id in _DEVICE_FIELDS else "unknown"  # a well-known name
        if isinstance(e, ast.Attribute):
            if e.attr.endswith("_cpu"):
                return "host"
            if e.attr in _DEVICE_FIELDS:
                return "tensor"
            return "unknown"
        if isinstance(e, ast.Subscript):
            return self.of(e.value, line, depth + 1)
        if isinstance(e, ast.BinOp):
            kinds = {self.of(e.left, line, depth + 1), self.of(e.right, line, depth + 1)}
            for k in ("tensor", "host", "unknown"):
                if k in kinds:
                    return k
            return "scalar"
        if isinstance(e, ast.Call):
            f = e.func
            fname = ast.unparse(f)
            if fname in _SCALAR_CALLS:
                return "scalar"
            dev = [k.value for k in e.keywords if k.arg == "device"]
            if dev and not (isinstance(dev[0], ast.Constant) and dev[0].value == "cpu"):
                return "tensor"  # made on (or copied to) the device
            if isinstance(f, ast.Attribute):
                if f.attr == "to" and any(isinstance(a, ast.Constant) and a.value == "cpu"
                                          for a in [*e.args, *(k.value for k in e.keywords)]):
                    return "host"
                if f.attr in ("tolist", "item"):
                    return "host"
                if f.attr == "cpu":
                    return "host"
                if isinstance(f.value, ast.Name) and f.value.id == "torch":
                    dev = [k for k in e.keywords if k.arg == "device"]
                    if dev and isinstance(dev[0].value, ast.Constant) and dev[0].value.value == "cpu":
                        return "host"
                    if dev:
                        return "tensor"
                    if f.attr.endswith("_like") and e.args:
                        return self.of(e.args[0], line, depth + 1)
                    # a factory without device= makes a host tensor; an op follows its inputs
                    return "host" if f.attr in _FACTORIES else "tensor"
                if f.attr in _SAME_KIND:
                    return self.of(f.value, line, depth + 1)
            return "unknown"
        return "unknown"


def _capture_only(chain: list[ast.AST], fn_name: str) -> bool:
    if "capture" in fn_name:
        return True
    for parent, child in zip(chain, chain[1:]):
        if isinstance(parent, ast.If):
            test = ast.unparse(parent.test)
            if "capture" not in test:
                continue
            negated = test.startswith("not ")
            in_body = any(child is s for s in parent.body)
            if in_body != negated:
                return True
    return False


def _classify(kind: str, what: str) -> tuple[str, str]:
    if kind == "host":
        return "host-mirror", f"{what} is a host value (a *_cpu mirror or a host copy)"
    if kind == "tensor":
        return "syncs", f"{what} is a device tensor"
    if kind == "scalar":
        return "", ""
    return "cannot-tell", f"cannot tell whether {what} lives on the device"


def _scan_function(fn: ast.FunctionDef, qual: str, backend: str, rel: str) -> tuple[list[Site],
                                                                                     list[Site]]:
    kinds = _Kinds(fn)
    sites: list[Site] = []
    with_os: list[Site] = []

    def visit(node: ast.AST, chain: list[ast.AST]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                  ast.ClassDef)):
                continue  # nested definitions run elsewhere, if at all
            if isinstance(child, ast.Call):
                check(child, [*chain, node, child])
            visit(child, [*chain, node])

    def add(call: ast.Call, chain: list[ast.AST], kind: str, verdict: str, why: str,
            n: int) -> None:
        if not verdict:
            return
        if verdict != "host-mirror" and _capture_only(chain, fn.name):
            verdict, why = "capture-only", "runs only while a graph is captured"
        sites.append(Site(rel, call.lineno, qual, backend, _src(call), kind, verdict, why,
                          n if verdict == "syncs" else 0))

    def check(call: ast.Call, chain: list[ast.AST]) -> None:
        f = call.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        is_torch = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
            f.value.id == "torch"
        line = call.lineno
        if name == "repeat_interleave":
            kw = {k.arg: k.value for k in call.keywords}
            if is_torch:
                reps = call.args[1] if len(call.args) > 1 else kw.get("repeats")
            else:
                reps = call.args[0] if call.args else kw.get("repeats")
            if reps is None:
                return
            if "output_size" in kw and not (isinstance(kw["output_size"], ast.Constant)
                                            and kw["output_size"].value is None):
                with_os.append(Site(rel, line, qual, backend, _src(call), name, "no-sync",
                                    "output_size given", 0))
                if not isinstance(kw["output_size"], ast.IfExp):
                    return
                verdict, why = "cannot-tell", "output_size is conditional (None on some calls)"
                add(call, chain, name, verdict, why, 2)
                return
            verdict, why = _classify(kinds.of(reps, line), f"repeats `{_src(reps, 40)}`")
            if verdict == "syncs":
                why += "; no output_size: PyTorch reads the total back (2 syncs)"
            add(call, chain, name, verdict, why, 2)
        elif isinstance(f, ast.Attribute) and name in _HOST_READ_METHODS and not call.args:
            verdict, why = _classify(kinds.of(f.value, line), f"`{_src(f.value, 40)}`")
            add(call, chain, name, verdict, why, 1)
        elif isinstance(f, ast.Attribute) and name == "to" and any(
                isinstance(a, ast.Constant) and a.value == "cpu"
                for a in [*call.args, *(k.value for k in call.keywords)]) and not any(
                k.arg == "non_blocking" and not (isinstance(k.value, ast.Constant)
                                                 and not k.value.value)
                for k in call.keywords):  # a non-blocking copy does not wait by itself
            verdict, why = _classify(kinds.of(f.value, line), f"`{_src(f.value, 40)}`")
            add(call, chain, "to(cpu)", verdict, why, 1)
        elif name in _DYNAMIC and (is_torch or isinstance(f, ast.Attribute)):
            arg = call.args[0] if is_torch and call.args else f.value if not is_torch else None
            if arg is None:
                return
            verdict, why = _classify(kinds.of(arg, line), f"`{_src(arg, 40)}`")
            if verdict == "syncs":
                why += f"; {name} has a data-dependent output size"
            add(call, chain, name, verdict, why, 1)
        elif isinstance(f, ast.Name) and name in ("int", "float", "bool") and call.args and \
                isinstance(call.args[0], ast.Call) and \
                isinstance(call.args[0].func, ast.Attribute) and \
                call.args[0].func.attr in _REDUCTIONS:
            inner = call.args[0].func.value
            verdict, why = _classify(kinds.of(inner, line), f"`{_src(inner, 40)}`")
            add(call, chain, f"{name}()", verdict, why, 1)

    visit(fn, [])
    return sites, with_os


def _builders(tree: ast.Module) -> list[tuple[str, str, ast.FunctionDef]]:
    """(qualname, backend, def) of the init_forward_metadata* family and what it calls."""
    classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}
    funcs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}

    def methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
        return {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}

    def lookup(cls_name: str, meth: str, seen: set[str]) -> tuple[str, ast.FunctionDef] | None:
        cls = classes.get(cls_name)
        if cls is None or cls_name in seen:
            return None
        seen.add(cls_name)
        if meth in methods(cls):
            return cls_name, methods(cls)[meth]
        for b in cls.bases:
            base = b.id if isinstance(b, ast.Name) else None
            if base:
                found = lookup(base, meth, seen)
                if found:
                    return found
        return None

    out: dict[str, tuple[str, str, ast.FunctionDef]] = {}
    todo: list[tuple[str, str, ast.FunctionDef]] = []
    for cname, cls in classes.items():
        for mname, m in methods(cls).items():
            if mname.startswith("init_forward_metadata") or _NAMED_BUILDER.search(mname):
                todo.append((f"{cname}.{mname}", cname, m))
    while todo:
        qual, backend, fn = todo.pop()
        if qual in out:
            continue
        out[qual] = (qual, backend, fn)
        cls_name = qual.split(".")[0] if "." in qual else None
        for n in ast.walk(fn):
            if not isinstance(n, ast.Call):
                continue
            f = n.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
                    f.value.id == "self" and cls_name:
                found = lookup(backend, f.attr, set())
                if found:
                    owner, m = found
                    todo.append((f"{owner}.{f.attr}", backend, m))
            elif isinstance(f, ast.Name) and f.id in funcs:
                todo.append((f.id, backend, funcs[f.id]))
    return list(out.values())


# A file none of whose lines could define a builder seed has no builders (`_builders` starts
# from seeds only): it is not parsed. A textual superset of the seed names, so nothing is missed.
_SEED_TEXT = re.compile(r"\bdef\s+(init_forward_metadata|_?(build|make|prepare|attach|compute)"
                        r"_\w*meta)")


def scan_file(path: Path, rel: str) -> tuple[list[str], list[Site], list[Site]]:
    source = path.read_text(encoding="utf-8", errors="replace")
    if not _SEED_TEXT.search(source):
        return [], [], []
    tree = ast.parse(source, str(path))
    names, sites, with_os = [], [], []
    seen: set[tuple[str, int]] = set()
    for qual, backend, fn in sorted(_builders(tree), key=lambda b: b[2].lineno):
        names.append(qual)
        s, w = _scan_function(fn, qual, backend, rel)
        for site in s:  # a helper reached from two backends is listed once per backend
            if (site.backend, site.line) not in seen:
                seen.add((site.backend, site.line))
                sites.append(site)
        with_os.extend(w)
    return names, sites, with_os


def census(target: Target, use_cache: bool = True) -> Census:
    """Scan every module under sglang/srt/layers/attention (raises FileNotFoundError if absent).

    The result is cached on disk (diag.cache), keyed by every scanned file's path, size, mtime
    and content hash and by this module's source: a cached census is the one a scan would give.
    """
    from diag import cache

    base = target.file(ATTENTION_DIR)
    if not base.is_dir():
        raise FileNotFoundError(f"{target.relpath(base)} not found")
    paths = sorted(base.rglob("*.py"))
    digest = None
    if use_cache:
        try:
            digest = cache.files_key(paths, str(target.root), cache.code_fingerprint(__name__))
        except OSError:
            digest = None
    if digest is not None:
        hit = cache.load("census", digest)
        if hit is not None:
            try:
                return Census.from_dict(hit["value"])
            except (KeyError, TypeError, ValueError):
                pass
    out = _scan_all(target, paths)
    if digest is not None:
        cache.store("census", digest, out.to_dict())
    return out


def _scan_all(target: Target, paths: list[Path]) -> Census:
    out = Census(str(target.root))
    for path in paths:
        rel = target.relpath(path)
        out.files += 1
        try:
            names, sites, with_os = scan_file(path, rel)
        except (SyntaxError, ValueError, RecursionError) as e:
            out.errors.append(f"{rel}: {type(e).__name__}: {e}")
            continue
        if names:
            out.builders[rel] = names
        out.sites.extend(sites)
        out.with_output_size.extend(with_os)
    return out
