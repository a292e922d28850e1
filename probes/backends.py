"""One backend registry: which classes each `--attention-backend` name builds, per release and
platform, read from the release's source (never imported).

Why one module: the draft-extend gate, the per-phase verdicts, the census of metadata builders,
the fixes and option checking all ask "what does NAME build here?"; reading the registry
(`attention_registry.py`) and the draft factory (`speculative/draft_utils.py`) once per
(tree, platform, model attention) and caching it keeps them on one answer and one cost. Parts:

- `backend_map(target, platform, mla=None)` -> {name: BackendInfo}: the target-model classes
  (`attention_classes`), the draft's decode and draft-extend classes, aliases the argument
  handling rewrites (`backend_aliases`); `mla` (the model family's attention) picks one class
  where a factory tests `use_mla_backend`. Cached; the cache is keyed on the files it reads.
- `classes_for(target, platform, name, phase, mla=None)`: the classes one phase of one
  backend builds (what the census needs instead of hard-coded tables).
- `platform_truth(expr, platform)`: three-valued `_is_hip`/`is_cuda()`/... conditions.
- `read_problems(target, platform)`: the source files the map skipped because they do
  not parse ("skipped FILE: does not parse (...)"), for the findings that use the map to say.
  Backend modules are read on first use (bases, capability methods), so ask after the verdicts.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from diag.probes.source import (
    ModuleIndex,
    Modules,
    index,
    parse_file,
    parse_problem,
    statements,
    walk_all,
)
from diag.target import Target

REGISTRY_FILE = "srt/layers/attention/attention_registry.py"
DRAFT_UTILS_FILE = "srt/speculative/draft_utils.py"
EXTEND_ATTR = "draft_extend_attn_backend"

_PLATFORM_FLAGS = {"hip": "hip", "cuda": "cuda", "npu": None, "musa": None, "xpu": None,
                   "cpu": None, "mps": None}
# tests on the GPU generation: false on HIP (SGLang's `_check_cuda_device_version` returns False
# when not `is_cuda()`, 0.5.23 utils/common.py:274-277), not decided on CUDA (diag has no such
# input); the words say what each needs
GPU_GENERATION = {
    "is_hopper_with_cuda_12_3": "Hopper (SM90) with CUDA >= 12.3",
    "is_sm100_or_sm110": "SM100/SM110 (Blackwell)",
    "is_sm100_or_sm110_supported": "SM100/SM110 (Blackwell)",
    "is_sm100_supported": "SM100 (Blackwell B200/GB200/B300)",
    "is_sm100": "SM100 (Blackwell B200/GB200/B300)",
    "is_sm90_supported": "SM90 (Hopper)",
    "is_sm90": "SM90 (Hopper)",
    "is_sm120": "SM120",
    "is_sm120_supported": "SM120",
    "is_sm121": "SM121 (GB10)",
    "is_sm110_supported": "SM110",
    "is_sm80_supported": "SM80 (Ampere)",
    "is_blackwell_supported": "Blackwell",
    "is_blackwell": "Blackwell",
    "device_sm": "the GPU's compute capability",
}


def _three_valued(expr: ast.AST, leaf) -> bool | None:
    """Evaluate `and`/`or`/`not` over leaves that are True, False or unknown (None)."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        v = _three_valued(expr.operand, leaf)
        return None if v is None else not v
    if isinstance(expr, ast.BoolOp):
        vals = [_three_valued(v, leaf) for v in expr.values]
        if isinstance(expr.op, ast.And):
            if any(v is False for v in vals):
                return False
            return True if all(v is True for v in vals) else None
        if any(v is True for v in vals):
            return True
        return False if all(v is False for v in vals) else None
    return leaf(expr)


def _platform_leaf(expr: ast.AST, platform: str) -> bool | None:
    name = None
    if isinstance(expr, ast.Name):
        name = expr.id
    elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and not expr.args:
        name = expr.func.id
    if name:
        m = re.fullmatch(r"_?is_(hip|cuda|npu|musa|xpu|cpu|mps)", name)
        if m:
            return _PLATFORM_FLAGS[m.group(1)] == platform
        if name.lstrip("_") in GPU_GENERATION and name.lstrip("_") != "device_sm" \
                and platform == "hip":
            return False
    return None


def platform_truth(expr: ast.AST, platform: str) -> bool | None:
    """Three-valued: does a condition made of `_is_hip`/`is_hip()`/... hold on `platform`?"""
    return _three_valued(expr, lambda e: _platform_leaf(e, platform))




@dataclass
class BackendInfo:
    """What `--attention-backend NAME` builds for the draft model on one platform."""

    name: str
    in_registry: bool
    attention_classes: list[str] = field(default_factory=list)  # the registry's (target model)
    has_draft_factory_entry: bool = False
    draft_extend_classes: list[str] = field(default_factory=list)
    decode_classes: list[str] = field(default_factory=list)
    decode_min_steps: int | None = None  # no multi-step decode backend below this many steps
    # "file:line" of the `return None` the draft-extend factory takes on this platform: the
    # release builds no draft-extend backend, so nothing is captured (0.5.9-0.5.15.post1 flashmla)
    draft_extend_none: str | None = None
    # the tests no input decides on the way to the draft-extend classes (`is_blackwell()`,
    # `use_mla_backend` without a model): more than one class means one of these picks, and
    # "file:line" of the factory method that builds them
    draft_extend_choice: list[str] = field(default_factory=list)
    draft_extend_factory: str | None = None
    # The release's argument handling rewrites this name before use: (new name, "file:line")
    alias_of: tuple[str, str] | None = None
    # Base classes (by name) of the classes above, found on first use: reading them parses the
    # backend modules, which only a verdict without a direct class match needs.
    _ancestors: Callable[[list[str]], list[str]] | None = field(default=None, repr=False,
                                                                compare=False)
    _cache: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    # (class names, method) -> [(class, True | False | None, returned expression, "file:line")]:
    # what each class's own or inherited method returns (PR #36324's capability method).
    _capability: Callable[[list[str], str], list[tuple]] | None = field(
        default=None, repr=False, compare=False)

    # (class names, method) -> [(class, defining class, FunctionDef, file)]
    _methods: Callable[[list[str], str], list[tuple]] | None = field(
        default=None, repr=False, compare=False)

    def methods(self, method: str, attr: str = EXTEND_ATTR) -> list[tuple]:
        """Each built class's own or inherited `method`: (class, owner, def, file)."""
        names = self.draft_extend_classes if attr == EXTEND_ATTR else self.decode_classes
        return self._methods(names, method) if self._methods and names else []

    # (class names, attribute) -> [(class, True | False | None, words, "file:line")]
    _attrs: Callable[[list[str], str], list[tuple]] | None = field(
        default=None, repr=False, compare=False)

    def class_attr(self, attr: str, role: str) -> list[tuple]:
        """What each class built for `role` (target | draft-extend | decode) sets `attr` to, in
        its own body or a base's: (class, True | False | None (not a constant), words,
        "file:line"; "" where no class of its chain sets it, None where the chain was not
        read)."""
        names = {"target": self.attention_classes, "draft-extend": self.draft_extend_classes,
                 "decode": self.decode_classes}[role]
        return self._attrs(names, attr) if self._attrs and names else []

    def capability(self, method: str, attr: str = EXTEND_ATTR) -> list[tuple]:
        names = self.draft_extend_classes if attr == EXTEND_ATTR else self.decode_classes
        return self._capability(names, method) if self._capability and names else []

    @property
    def draft_extend_ancestors(self) -> list[str]:
        return self._lazy("ext", self.draft_extend_classes)

    @property
    def decode_ancestors(self) -> list[str]:
        return self._lazy("dec", self.decode_classes)

    def _lazy(self, key: str, names: list[str]) -> list[str]:
        if key not in self._cache:
            self._cache[key] = self._ancestors(names) if self._ancestors and names else []
        return self._cache[key]

    @property
    def draft_extend_class(self) -> str | None:
        return " | ".join(self.draft_extend_classes) or None

    @property
    def decode_class(self) -> str | None:
        return " | ".join(self.decode_classes) or None


_Module = ModuleIndex  # one parsed module (probes.source)
_module_of = index


class _Resolver:
    """Follows a factory function to the `...Backend(...)` classes it builds on a platform."""

    def __init__(self, target: Target, platform: str, mla: bool | None = None,
                 skipped: dict[str, str] | None = None) -> None:
        self.target, self.platform, self.mla = target, platform, mla
        self._mods = Modules(target)  # the target's sglang.* modules (probes.source)
        self.seen_in: dict[str, _Module] = {}  # class name → the module whose code builds it
        # file (relative to the root) → why it was skipped: a source that exists and does not parse
        self.skipped: dict[str, str] = {} if skipped is None else skipped
        # while set: the tests neither the platform nor the model decides, met on the way
        # (`is_blackwell()`: which class a factory builds then depends on the GPU)
        self.undecided: list[str] | None = None

    def module(self, dotted: str) -> _Module | None:
        mod = self._mods.module(dotted)
        if mod is None and dotted.split(".")[0] == "sglang":
            _skip(self.target, self._mods.path(dotted), self.skipped)
        return mod

    def classes(self, func: ast.FunctionDef, mod: _Module, cls: ast.ClassDef | None = None,
                depth: int = 0) -> list[str]:
        out: list[str] = []
        if depth > 4:
            return out
        # `cls = DeepseekV4TrtllmAttnBackend` ... `return cls(runner)` (0.5.23's dsv4 on CUDA)
        aliases: dict[str, list[str]] = {}
        for stmt in self._live(func.body):
            for node in walk_all(stmt):
                if (isinstance(node, ast.Assign) and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Name)
                        and isinstance(node.value, ast.Name)
                        and node.value.id.endswith("Backend")):
                    aliases.setdefault(node.targets[0].id, []).append(node.value.id)
        for stmt in self._live(func.body):
            for node in walk_all(stmt):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                if isinstance(f, ast.Name) and f.id.endswith("Backend") and f.id[:1].isupper():
                    out.append(f.id)
                    self.seen_in.setdefault(f.id, mod)
                elif isinstance(f, ast.Name) and f.id in aliases:
                    out += aliases[f.id]
                    for a in aliases[f.id]:
                        self.seen_in.setdefault(a, mod)
                elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                        and f.value.id == "self" and cls is not None:
                    m = _method(cls, f.attr)
                    if m is not None and f.attr.startswith("_create"):
                        out += self.classes(m, mod, cls, depth + 1)
                elif isinstance(f, ast.Name) and f.id[:1].islower():
                    if f.id in mod.funcs and f.id.startswith(("create", "_create")):
                        out += self.classes(mod.funcs[f.id], mod, None, depth + 1)
                    elif f.id in mod.imports and "backend" in f.id:
                        other = self.module(mod.imports[f.id])
                        if other and f.id in other.funcs:
                            out += self.classes(other.funcs[f.id], other, None, depth + 1)
        return list(dict.fromkeys(out))

    def none_return(self, func: ast.FunctionDef) -> int | None:
        """The line of the `return None` (or bare `return`) the platform path of a factory
        method that builds no class takes; None when it returns something else."""
        for stmt in self._live(func.body):
            for node in walk_all(stmt):
                if isinstance(node, ast.Return):
                    if node.value is None or (isinstance(node.value, ast.Constant)
                                              and node.value.value is None):
                        return node.lineno
                    return None
        return None

    def ancestors(self, name: str, mod: _Module, depth: int = 0) -> list[str]:
        """Base classes of `name` (by name), found through the modules that define them, so an
        isinstance check on a base class is seen to admit a subclass."""
        if depth > 6:
            return []
        where, node = mod, mod.classes.get(name)
        if node is None and name in mod.imports:
            where = self.module(mod.imports[name])
            node = where.classes.get(name) if where else None
        if node is None or where is None:
            return []
        out: list[str] = []
        for b in node.bases:
            bname = _base_name(b)
            if bname and bname not in out:
                out.append(bname)
                out += [a for a in self.ancestors(bname, where, depth + 1) if a not in out]
        return out

    def _class(self, name: str, mod: _Module, dotted: str
               ) -> tuple[ast.ClassDef, _Module, str] | None:
        """(the class `name` as `mod` sees it, the module defining it, that module's dotted
        name): defined there or imported."""
        where, node, wd = mod, mod.classes.get(name), dotted
        if node is None and name in mod.imports:
            wd = mod.imports[name]
            where = self.module(wd)
            node = where.classes.get(mod.import_names.get(name, name)) if where else None
        return None if node is None or where is None else (node, where, wd)

    def method_of(self, name: str, mod: _Module, dotted: str, method: str, depth: int = 0
                  ) -> tuple[str, ast.FunctionDef, str] | None:
        """(defining class, the method, its module) for `name.method`, following the bases."""
        found = self._class(name, mod, dotted) if depth <= 6 else None
        if found is None:
            return None
        node, where, wd = found
        m = _method(node, method)
        if m is not None:
            return node.name, m, wd
        for b in node.bases:
            bname = _base_name(b)
            hit = self.method_of(bname, where, wd, method, depth + 1) if bname else None
            if hit is not None:
                return hit
        return None

    def methods(self, names: list[str], method: str, mod: _Module, dotted: str) -> list[tuple]:
        out = []
        for n in names:
            hit = self.method_of(n, self.seen_in.get(n, mod), dotted, method)
            if hit is not None:
                owner, fn, wd = hit
                out.append((n, owner, fn, self.target.relpath(self._mods.path(wd))))
        return out

    def capabilities(self, names: list[str], method: str, mod: _Module, dotted: str
                     ) -> list[tuple]:
        out = []
        for n in names:
            hit = self.method_of(n, self.seen_in.get(n, mod), dotted, method)
            if hit is None:
                out.append((n, None, f"no {method}() found on {n} or its bases", None))
                continue
            owner, fn, wd = hit
            body = [st for st in fn.body if not (isinstance(st, ast.Expr)
                                                 and isinstance(st.value, ast.Constant))]
            where = f"{self.target.relpath(self._mods.path(wd))}:{fn.lineno}"
            if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
                v = body[0].value
                val = v.value if isinstance(v, ast.Constant) and isinstance(v.value, bool) \
                    else None
                out.append((n, val, f"{owner}.{method}() returns {ast.unparse(v)}", where))
            else:
                out.append((n, None, f"{owner}.{method}() decides in a body of "
                                     f"{len(body)} statements", where))
        return out

    def attr_of(self, name: str, mod: _Module, dotted: str, attr: str, depth: int = 0
                ) -> tuple[str, list[ast.stmt], str] | None:
        """(defining class, the statements that set `attr` there, its module) for
        `name.attr`, following the bases: a class-level assignment, or `self.attr = ...` in
        one of its methods."""
        found = self._class(name, mod, dotted) if depth <= 6 else None
        if found is None:
            return None
        node, where, wd = found
        sets: list[ast.stmt] = [
            st for st in node.body if isinstance(st, (ast.Assign, ast.AnnAssign))
            and any(isinstance(t, ast.Name) and t.id == attr
                    for t in (st.targets if isinstance(st, ast.Assign) else [st.target]))]
        for fn in (n for n in node.body if isinstance(n, ast.FunctionDef)):
            sets += [st for st in statements(fn) if isinstance(st, (ast.Assign, ast.AugAssign,
                                                                     ast.AnnAssign))
                     and any(isinstance(t, ast.Attribute) and t.attr == attr
                             and isinstance(t.value, ast.Name) and t.value.id == "self"
                             for t in (st.targets if isinstance(st, ast.Assign)
                                       else [st.target]))]
        if sets:
            return node.name, sets, wd
        unresolved = False
        for b in node.bases:
            bname = _base_name(b)
            hit = self.attr_of(bname, where, wd, attr, depth + 1) if bname else None
            if hit is not None and hit[1]:
                return hit
            unresolved = unresolved or hit is None and bname not in ("object", "ABC")
        # found, and no class of its resolved chain sets it: (the class, [], its module);
        # None where a base could not be read
        return None if unresolved else (node.name, [], wd)

    def attrs(self, names: list[str], attr: str, mod: _Module, dotted: str) -> list[tuple]:
        """Per class: what `attr` is, a constant bool where every statement that sets it in
        the defining class sets the same constant (a conditional or computed one: None)."""
        out = []
        for n in names:
            hit = self.attr_of(n, self.seen_in.get(n, mod), dotted, attr)
            if hit is None:
                out.append((n, None, f"no {attr} found on {n} or its bases", None))
                continue
            owner, sets, wd = hit
            file = self.target.relpath(self._mods.path(wd))
            if not sets:
                out.append((n, None, f"no class of {n}'s chain sets {attr} ({owner})", ""))
                continue
            consts = [st for st in sets if isinstance(st, (ast.Assign, ast.AnnAssign))
                      and isinstance(st.value, ast.Constant) and isinstance(st.value.value, bool)]
            if len(consts) == len(sets) and len({c.value.value for c in consts}) == 1:
                last = sets[-1]
                out.append((n, consts[0].value.value, f"{owner}: {ast.unparse(last).strip()}",
                            f"{file}:{last.lineno}"))
            else:  # computed, or constants that differ: cite the first that is not one
                odd = next((st for st in sets if st not in consts), sets[-1])
                out.append((n, None, f"{owner}: {ast.unparse(odd).strip()}",
                            f"{file}:{odd.lineno}"))
        return out

    def all_ancestors(self, names: list[str], mod: _Module) -> list[str]:
        out: list[str] = []
        for n in names:
            found = self.ancestors(n, self.seen_in.get(n, mod))
            out += [a for a in found if a not in out and a not in names]
        return out

    def _live(self, body: list[ast.stmt]) -> list[ast.stmt]:
        """The statements that can run on the platform: platform `if`s pruned, others kept."""
        return self._live_ends(body)[0]

    def _truth(self, test: ast.AST) -> bool | None:
        """Platform flags, and `<runner>.use_mla_backend` when the model is known (the model
        family picks the class: MLA or MHA under one backend name)."""
        def leaf(e: ast.AST) -> bool | None:
            if isinstance(e, ast.Attribute) and e.attr == "use_mla_backend":
                return self.mla
            return _platform_leaf(e, self.platform)

        return _three_valued(test, leaf)

    def _live_ends(self, body: list[ast.stmt]) -> tuple[list[ast.stmt], bool]:
        """(live statements, whether the platform path surely returns or raises)."""
        out: list[ast.stmt] = []
        for stmt in body:
            if isinstance(stmt, ast.If):
                truth = self._truth(stmt.test)
                if truth is None and self.undecided is not None:
                    self.undecided.append(ast.unparse(stmt.test))
                live_body, body_ends = self._live_ends(stmt.body)
                live_else, else_ends = self._live_ends(stmt.orelse)
                if truth is not False:
                    out += live_body
                if truth is not True:
                    out += live_else
                if (truth is True and body_ends) or (truth is False and else_ends) or (
                        truth is None and body_ends and else_ends):
                    return out, True  # the platform path returns: nothing after it runs
            elif isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                continue
            else:
                out.append(stmt)
                if isinstance(stmt, (ast.Return, ast.Raise)):
                    return out, True
        return out, False


def _ends(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


def _base_name(b: ast.expr) -> str | None:
    return b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else None


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for n in cls.body:
        if isinstance(n, ast.FunctionDef) and n.name == name:
            return n
    return None


def _skip(target: Target, path: Path, skipped: dict[str, str] | None) -> None:
    """Note in `skipped` a source file that exists and does not parse (a missing one is not a
    problem: the map looks in places some releases do not have)."""
    if skipped is None:
        return
    why = parse_problem(path)
    if why is not None and why[0] not in ("missing", "empty"):
        skipped.setdefault(target.relpath(path), why[0])


def _registry(target: Target, skipped: dict[str, str] | None = None
              ) -> tuple[_Module, dict[str, ast.FunctionDef]] | None:
    """`@register_attention_backend("name")` functions (attention_registry.py, else any module
    under srt/layers/attention that uses the decorator)."""
    candidates = [target.file(REGISTRY_FILE)]
    if not candidates[0].is_file():
        candidates = sorted(target.file("srt/layers/attention").glob("*.py"))
    for path in candidates:
        tree = parse_file(path)
        if tree is None:
            _skip(target, path, skipped)
            continue
        names: dict[str, ast.FunctionDef] = {}
        for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
            for d in fn.decorator_list:
                if (isinstance(d, ast.Call) and isinstance(d.func, ast.Name)
                        and d.func.id == "register_attention_backend" and d.args
                        and isinstance(d.args[0], ast.Constant)):
                    names[str(d.args[0].value)] = fn
        if names:
            return _module_of(tree), names
    return None


def _draft_factory(target: Target, skipped: dict[str, str] | None = None
                   ) -> tuple[_Module, ast.ClassDef] | None:
    """The class with `create_draft_extend_backend` and `create_decode_backend` methods."""
    paths = [target.file(DRAFT_UTILS_FILE)]
    paths += [p for p in sorted(target.file("srt/speculative").glob("*.py")) if p != paths[0]]
    for path in paths:
        tree = parse_file(path)
        if tree is None:
            _skip(target, path, skipped)
            continue
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            if _method(cls, "create_draft_extend_backend") and _method(cls, "create_decode_backend"):
                return _module_of(tree), cls, path
    return None


def _factory_map(method: ast.FunctionDef) -> dict[str, list[str]]:
    """`backend_map = {"aiter": self._create_aiter_prefill_backend, ...}` → {name: [method]};
    a conditional value (`a if not is_blackwell() else b`, 0.5.9) gives both methods."""
    def methods(v: ast.AST) -> list[str]:
        if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "self":
            return [v.attr]
        if isinstance(v, ast.IfExp):
            return methods(v.body) + methods(v.orelse)
        return []

    for node in walk_all(method):
        if isinstance(node, ast.Dict) and node.keys and all(
                isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
            out = {k.value: methods(v) for k, v in zip(node.keys, node.values) if methods(v)}
            if out:
                return out
    return {}


def _map_tests(method: ast.FunctionDef, name: str) -> list[str]:
    """The test of a conditional value for `name` in the factory's map (`a if not is_blackwell()
    else b`, 0.5.9): which method runs is then up to it."""
    for node in walk_all(method):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == name and isinstance(v, ast.IfExp):
                    return [ast.unparse(v.test)]
    return []


def _decode_min_steps(method: ast.FunctionDef) -> int | None:
    """`if self.speculative_num_steps == 1: return None` (or `<= 1`) → 2."""
    for node in method.body:
        if isinstance(node, ast.If) and _ends(node.body) and isinstance(node.test, ast.Compare):
            t = node.test
            if (isinstance(t.left, ast.Attribute) and t.left.attr == "speculative_num_steps"
                    and len(t.comparators) == 1 and isinstance(t.comparators[0], ast.Constant)):
                n, op = t.comparators[0].value, t.ops[0]
                if isinstance(op, (ast.Eq, ast.LtE)):
                    return int(n) + 1
                if isinstance(op, ast.Lt):
                    return int(n)
    return None


def _read_backend_map(target: Target, platform: str, mla: bool | None = None,
                      skipped: dict[str, str] | None = None) -> dict[str, BackendInfo]:
    """Every attention-backend name the release knows → the draft classes it builds on `platform`,
    plus the deprecated names its argument handling rewrites (`backend_aliases`). `mla`: the
    model's attention (True MLA, False MHA) picks one class where the factory tests
    `use_mla_backend`; None keeps both."""
    res = _Resolver(target, platform, mla, skipped)
    reg = _registry(target, res.skipped)
    fac = _draft_factory(target, res.skipped)
    out: dict[str, BackendInfo] = {}
    if reg:
        mod, funcs = reg
        for name, fn in funcs.items():
            out[name] = BackendInfo(name, True, attention_classes=res.classes(fn, mod))
    if fac:
        fmod, cls, fpath = fac
        ext_m = _method(cls, "create_draft_extend_backend")
        dec_m = _method(cls, "create_decode_backend")
        ext_map, dec_map = _factory_map(ext_m), _factory_map(dec_m)
        min_steps = _decode_min_steps(dec_m)
        names = set(ext_map) | set(dec_map) | set(out)
        for name in sorted(names):
            info = out.setdefault(name, BackendInfo(name, False))
            ext = ext_map.get(name) or [m for m in [_named_method(cls, name, "draft_extend")] if m]
            dec = dec_map.get(name) or [m for m in [_named_method(cls, name, "decode")] if m]
            info.has_draft_factory_entry = bool(ext)
            info.decode_min_steps = min_steps
            nones = []
            res.undecided = _map_tests(ext_m, name)
            for m in (_method(cls, e) for e in ext):
                if m is None:
                    continue
                if not info.draft_extend_factory:
                    info.draft_extend_factory = f"{target.relpath(fpath)}:{m.lineno}"
                found = res.classes(m, fmod, cls)
                info.draft_extend_classes += [c for c in found if c not in
                                              info.draft_extend_classes]
                if not found:
                    nones.append(res.none_return(m))
            info.draft_extend_choice = list(dict.fromkeys(res.undecided))
            res.undecided = None
            if ext and nones and len(nones) == len(ext) and all(nones):
                info.draft_extend_none = f"{target.relpath(fpath)}:{nones[0]}"
            for m in (_method(cls, d) for d in dec):
                if m is not None:
                    info.decode_classes += [c for c in res.classes(m, fmod, cls)
                                            if c not in info.decode_classes]
            info._ancestors = functools.partial(res.all_ancestors, mod=fmod)
            info._capability = functools.partial(res.capabilities, mod=fmod,
                                                 dotted=_dotted(target, fpath))
            info._methods = functools.partial(res.methods, mod=fmod,
                                              dotted=_dotted(target, fpath))
            info._attrs = functools.partial(res.attrs, mod=fmod, dotted=_dotted(target, fpath))
    for old, (new, where) in backend_aliases(target, res.skipped).items():
        if new in out:
            out[old] = dataclasses.replace(out[new], name=old, alias_of=(new, where),
                                           _cache={})
    return dict(sorted(out.items()))


ALIAS_FILES = ("srt/server_args.py", "srt/arg_groups")


def backend_aliases(target: Target, skipped: dict[str, str] | None = None
                    ) -> dict[str, tuple[str, str]]:
    """Deprecated attention-backend names the release's argument handling rewrites before use:
    {old: (new, "file:line")}. Found by shape: a `for attr in ("attention_backend", ...)` loop
    whose body compares a value to "old" and sets "new" (0.5.12-0.5.19: `compressed` → `dsv4`),
    or looks the value up in a {"old": "new"} dict (0.5.23: + `tokenspeed_mla` → `cutedsl_mla`)."""
    paths = [target.file(ALIAS_FILES[0])]
    d = target.file(ALIAS_FILES[1])
    if d.is_dir():
        paths += sorted(d.glob("*.py"))
    out: dict[str, tuple[str, str]] = {}
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if '"prefill_attention_backend"' not in text:
            continue
        tree = parse_file(path)
        if tree is None:
            _skip(target, path, skipped)
            continue
        rel = target.relpath(path)
        for func in (n for n in walk_all(tree) if isinstance(n, ast.FunctionDef)):
            dicts = {a.targets[0].id: a.value for a in walk_all(func)
                     if isinstance(a, ast.Assign) and len(a.targets) == 1
                     and isinstance(a.targets[0], ast.Name) and isinstance(a.value, ast.Dict)}
            for loop in (n for n in walk_all(func) if isinstance(n, ast.For)):
                if not (isinstance(loop.iter, (ast.Tuple, ast.List)) and any(
                        isinstance(e, ast.Constant) and e.value == "attention_backend"
                        for e in loop.iter.elts)):
                    continue
                for node in (n for st in loop.body for n in walk_all(st)):
                    if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) \
                            and len(node.test.ops) == 1:
                        op, right = node.test.ops[0], node.test.comparators[0]
                        if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) \
                                and isinstance(right.value, str):
                            new = []
                            for c in (c for st in node.body for c in walk_all(st)):
                                v = (c.args[2] if isinstance(c, ast.Call) and isinstance(
                                    c.func, ast.Name) and c.func.id == "setattr"
                                    and len(c.args) == 3 else c.value
                                    if isinstance(c, ast.Assign) else None)
                                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                                    new.append(v.value)
                            if new:
                                out.setdefault(right.value, (new[0], f"{rel}:{node.lineno}"))
                        elif isinstance(op, ast.In) and isinstance(right, ast.Name) \
                                and right.id in dicts:
                            dn = dicts[right.id]
                            for k, v in zip(dn.keys, dn.values):
                                if isinstance(k, ast.Constant) and isinstance(v, ast.Constant):
                                    out.setdefault(k.value, (v.value, f"{rel}:{dn.lineno}"))
    return out


def _dotted(target: Target, path: Path) -> str:
    rel = target.relpath(path)
    return rel[:-3].replace("/", ".") if rel.endswith(".py") else rel


def _named_method(cls: ast.ClassDef, name: str, phase: str) -> str | None:
    """A factory method built for one name outside the map (0.5.23's qsa profile):
    `_create_<...name...>_<phase>_backend`."""
    for n in cls.body:
        if (isinstance(n, ast.FunctionDef) and n.name.startswith("_create_")
                and n.name.endswith(f"_{phase}_backend")
                and re.search(rf"_{re.escape(name)}_", n.name[len("_create"):])):
            return n.name
    return None


_MAPS: dict[tuple, dict[str, BackendInfo]] = {}
_SKIPPED: dict[tuple, dict[str, str]] = {}  # per map: the files it skipped so far (filled lazily)


def _signature(target: Target) -> tuple:
    """What the map is read from: the registry, the draft factory and the alias files (their
    mtime and size), so a tree edited in place is read again."""
    out = []
    paths = [target.file(REGISTRY_FILE), target.file(DRAFT_UTILS_FILE),
             target.file(ALIAS_FILES[0])]
    d = target.file(ALIAS_FILES[1])
    if d.is_dir():
        paths += sorted(d.glob("*.py"))
    for path in paths:
        try:
            st = path.stat()
            out.append((str(path.resolve()), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(path), None, None))
    return tuple(out)


def backend_map(target: Target, platform: str, mla: bool | None = None
                ) -> dict[str, BackendInfo]:
    """Every attention-backend name the release knows -> the classes it builds on `platform`
    (cached per tree, platform and model attention; a new dict each call, shared infos)."""
    key = (str(target.root.resolve()), platform, mla, _signature(target))
    hit = _MAPS.get(key)
    if hit is None:
        skipped = _SKIPPED[key] = {}
        hit = _MAPS[key] = _read_backend_map(target, platform, mla, skipped)
    return dict(hit)


def read_problems(target: Target, platform: str) -> list[str]:
    """What the backend maps of this tree on `platform` (any model attention) skipped so far,
    one line per file: "skipped sglang/srt/layers/attention/x.py: does not parse (SyntaxError
    at line N: ...)". Backend modules are parsed on first use (a verdict's bases or capability
    methods): ask after the verdicts that use the map. [] for a tree that parses."""
    root, sig = str(target.root.resolve()), _signature(target)
    out: dict[str, str] = {}
    for (r, plat, _mla, s), skipped in _SKIPPED.items():
        if (r, plat, s) == (root, platform, sig):
            for f, why in skipped.items():
                out.setdefault(f, why)
    return [f"skipped {f}: {why}" for f, why in sorted(out.items())]


PHASE_CLASSES = {"target-extend": "attention_classes", "target-verify": "attention_classes",
                 "draft-decode": "decode_classes", "draft-extend": "draft_extend_classes"}


def classes_for(target: Target, platform: str, name: str, phase: str,
                mla: bool | None = None) -> list[str]:
    """The classes `--attention-backend name` builds for one speculative phase (the target's
    registry class for target-extend/verify, the draft factory's for draft-decode/extend);
    [] for a name the release does not know."""
    info = backend_map(target, platform, mla).get(name)
    return list(getattr(info, PHASE_CLASSES[phase])) if info is not None else []


def never_draft_extends(target: Target, platforms: tuple[str, ...] = ("hip", "cuda")
                        ) -> dict[str, str]:
    """{backend class: why it never serves a draft-extend batch}: classes some
    `--attention-backend` name builds for the target model on HIP or CUDA, only under names the
    draft factory has no draft-extend entry for (it raises for those), that no name builds for
    draft-extend, that no class of the attention package subclasses, and that the factory's
    file never names (0.5.23 wave: `WaveAttnBackend` is absent from
    `create_draft_extend_backend`'s map, speculative/draft_utils.py:122). Empty where the
    factory is not found. Cached per tree and platforms."""
    key = (str(target.root.resolve()), _signature(target), platforms)
    hit = _NEVER.get(key)
    if hit is not None:
        return hit
    out: dict[str, str] = {}
    fac = _draft_factory(target)
    ext = _method(fac[1], "create_draft_extend_backend") if fac is not None else None
    if fac is not None and ext is not None:
        fpath = fac[2]
        maps = [backend_map(target, p) for p in platforms]
        drafts = {c for m in maps for i in m.values() for c in i.draft_extend_classes}
        try:
            factory_text = fpath.read_text(encoding="utf-8", errors="replace")
        except OSError:
            factory_text = None
        # a name with an entry may run its registry class for draft-extend eagerly (0.5.9
        # flashmla: the entry builds None, the draft runner's own backend serves the batch);
        # a name without one stops the server at start: `_create_backend` raises (0.5.23
        # draft_utils.py:63-64), and every worker that runs DRAFT_EXTEND calls the factory
        # (0.5.23 eagle_worker_v2.py:408-410, multi_layer_eagle_worker_v2.py:403; 0.5.9
        # eagle_worker.py:226-228)
        entered = {c for m in maps for i in m.values() if i.has_draft_factory_entry
                   for c in i.attention_classes}
        raises = factory_text is not None and re.search(
            r"not in backend_map:\s*\n\s*raise\b", factory_text) is not None
        candidates = {c for m in maps for i in m.values() for c in i.attention_classes
                      if c not in drafts and c not in entered} if raises else set()
        candidates = {c for c in candidates if c not in factory_text}  # type: ignore[operator]
        if candidates:
            # a subclass would inherit the class's syncs: any `class X(..., C)` in the package
            # keeps C. Read as text: resolving every draft class's ancestors parses their
            # modules (0.39 s cold on 0.5.23, against 0.03 s for this scan)
            texts = []
            for path in sorted(target.file("srt/layers/attention").rglob("*.py")):
                try:
                    texts.append(path.read_text(encoding="utf-8", errors="replace"))
                except OSError:
                    candidates = set()  # a module not read: claim nothing
                    break
            subclassed = re.compile(r"^\s*class\s+\w+\s*\(([^)]*)\)", re.M)
            bases = {b for t in texts for m in subclassed.finditer(t)
                     for b in re.findall(r"\w+", m.group(1))}
            for c in sorted(candidates - bases):
                out[c] = (f"{c} serves no draft-extend batch: the draft factory has no "
                          f"entry for its backend names and refuses them "
                          f"({target.relpath(fpath)}:{ext.lineno})")
    _NEVER[key] = out
    return out


_NEVER: dict[tuple, dict[str, str]] = {}


def class_attrs_of(target: Target, pairs: list[tuple[str, str]], attr: str
                   ) -> dict[tuple[str, str], tuple | None]:
    """What each class `cls` of `pairs` (cls, rel), as the module `rel` (relative to the root)
    sees the name, sets `attr` to: `_Resolver.attrs`'s row (class, True | False | None, words,
    "file:line"; "" where no class of its chain sets it), or None where the module or a base
    cannot be read."""
    res = _Resolver(target, "any")
    out: dict[tuple[str, str], tuple | None] = {}
    for cls, rel in pairs:
        dotted = _dotted(target, target.root / rel)
        mod = res.module(dotted)
        out[(cls, rel)] = None if mod is None or res.attr_of(cls, mod, dotted, attr) is None \
            else res.attrs([cls], attr, mod, dotted)[0]
    return out
