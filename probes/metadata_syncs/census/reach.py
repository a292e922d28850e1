"""Reachability: which builders a module has (the seeds and the helpers they call, transitively,
`_builders`) and what each is reached with (`_analyse`: the union of its callers' paths and
guards, the caller chain of every site).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Any

from diag.probes.metadata_syncs.census.batch_fields import (
    idle_leaves_none,
    leaves_none,
    prefix_on_draft_extend,
)
from diag.probes.metadata_syncs.census.draft_steps import spec_sets
from diag.probes.metadata_syncs.census.fast_paths import gpu_true_methods
from diag.probes.metadata_syncs.census.flags import fn_flags
from diag.probes.metadata_syncs.census.guards import (
    MirrorParams,
    call_site_guards,
    common_guards,
    param_mirrors,
    spec_params,
)
from diag.probes.metadata_syncs.census.kinds import _FnInfo
from diag.probes.metadata_syncs.census.memo import emptied
from diag.probes.metadata_syncs.census.objects import (
    _self_attr,
    choices,
    device_copies,
    held_call,
    held_class,
    method_of,
    objects,
)
from diag.probes.metadata_syncs.census.paths import (
    NONE,
    _modes,
    class_config_attrs,
    class_device_attrs,
    mode_guards,
    mode_helpers,
    step_paths,
)
from diag.probes.metadata_syncs.census.scan import _Edge, _Scan
from diag.probes.metadata_syncs.census.scopes import BUILDERS, FORWARD, Scope
from diag.probes.metadata_syncs.census.sites import (
    _ATTENTION_PKG,
    _HELPER_PKGS,
    ATTENTION_DIR,
    HELPER_DIRS,
)
from diag.probes.metadata_syncs.census.wrapped import is_held, wrapped
from diag.probes.source import (
    ModuleIndex,
    Modules,
    index,
)
from diag.probes.source import inner as _inner


def _methods_of(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    """A class's methods by name, kept on the node: asked per call."""
    out = getattr(cls, "_diag_methods", None)
    if out is None:
        out = cls._diag_methods = {  # type: ignore[attr-defined]
            m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
    return out


def _builders(tree: ast.Module, modules: Modules | None = None, scope: Scope = BUILDERS
              ) -> tuple[list[tuple[str, str, ast.FunctionDef]], Any]:
    """(qualname, backend, def) of the init_forward_metadata* family and what it calls, and the
    resolver from (backend, call) to the (qualname, def) it calls."""
    classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}
    funcs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}

    methods = _methods_of

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

    here = index(tree)
    foreign: dict[str, tuple[str, ModuleIndex, ast.ClassDef] | None] = {}

    def foreign_class(name: str) -> tuple[str, ModuleIndex, ast.ClassDef] | None:
        """(file, module, class) of a class another scanned attention module defines and
        this one imports by `name`."""
        if name not in foreign:
            foreign[name] = None
            dotted = here.imports.get(name, "")
            b = modules.resolve(here, name) if modules is not None and \
                dotted.startswith(_ATTENTION_PKG) else None
            # a backend held by another (0.5.19 minicpm/backend.py:137 holds a
            # FlashAttentionBackend) is scanned in its own module, with its own class's facts:
            # only a helper object without entry points of its own is followed here
            if b is not None and isinstance(b.node, ast.ClassDef) and not any(
                    BUILDERS.is_seed(m) or FORWARD.is_seed(m) for m in _methods_of(b.node)):
                rel = modules.relpath(b.path)  # type: ignore[union-attr]
                other = modules.module(b.dotted)  # type: ignore[union-attr]
                if f"/{ATTENTION_DIR}/" in f"/{rel}" and other is not None:
                    foreign[name] = (rel, other, b.node)
        return foreign[name]

    # a name imported from another attention module that reads as a class: checked (parsed)
    # only when a call goes through the attribute that holds it (`resolve`)
    objs = objects(classes, lambda n: n not in classes and n[:1].isupper()
                   and here.imports.get(n, "").startswith(_ATTENTION_PKG))
    # a method of another module's class (a held object's): that class, for its `self.m(...)`
    home_class: dict[int, ast.ClassDef] = {}
    # a method reached through an object a backend holds (`self.updater.update(...)`) -> its
    # class: the backend it runs as (its own `self`)
    owner: dict[int, str] = {}
    # a held object's class -> the backend that holds it: its sites count for that backend
    held_by: dict[str, str] = {}
    homes: dict[int, tuple[str, ModuleIndex]] = {}  # helper def -> (its file, its module)
    bound: dict[tuple[int, str], Any] = {}  # (module, name) -> what it binds to

    def imported(mod: ModuleIndex, name: str) -> tuple[str, ast.FunctionDef] | None:
        """A function of another attention module that `name` is bound to (followed: its
        syncs count for the builder that calls it)."""
        dotted = mod.imports.get(name, "")
        if modules is None or not dotted.startswith((_ATTENTION_PKG, *_HELPER_PKGS)):
            return None  # not an attention or helper module: not parsed at all
        key = (id(mod), name)
        if key not in bound:
            bound[key] = modules.resolve(mod, name)
        b = bound[key]
        if b is None or not isinstance(b.node, ast.FunctionDef):
            return None
        rel = modules.relpath(b.path)  # type: ignore[union-attr]
        if not any(f"/{d}/" in f"/{rel}" for d in (ATTENTION_DIR, *HELPER_DIRS)):
            return None  # outside the scanned (and cached) trees
        other = modules.module(b.dotted)  # type: ignore[union-attr]
        if other is not None:
            homes[id(b.node)] = (rel, other)
        return f"{b.dotted.rsplit('.', 1)[-1]}.{b.node.name}", b.node

    def resolve(backend: str, call: ast.Call, where: ast.AST | None = None
                ) -> tuple[str, ast.FunctionDef] | None:
        f = call.func
        home = homes.get(id(where)) if where is not None else None
        if home is not None:  # inside a helper of another module: its own names
            cls = home_class.get(id(where))
            if cls is not None and (m := _self_attr(f)) is not None:
                fn = _methods_of(cls).get(m)
                if fn is None:
                    return None
                homes.setdefault(id(fn), home)
                home_class[id(fn)] = cls
                owner[id(fn)] = cls.name
                return f"{cls.name}.{m}", fn
            if isinstance(f, ast.Name):
                if f.id in home[1].funcs:
                    fn = home[1].funcs[f.id]
                    homes.setdefault(id(fn), home)
                    return f"{Path(home[0]).stem}.{f.id}", fn
                return imported(home[1], f.id)
            return None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
                f.value.id == "self" and backend in classes:
            found = lookup(backend, f.attr, set())
            if found:
                return f"{found[0]}.{f.attr}", found[1]
        elif backend in classes and (attr_meth := held_call(f)) is not None:
            held = method_of(objs, backend, *attr_meth)
            if held is not None:
                fn = lookup(held[0], held[1], set())
                if fn is not None:
                    owner[id(fn[1])] = held[0]
                    held_by.setdefault(held[0], held_by.get(backend, backend))
                    return f"{fn[0]}.{held[1]}", fn[1]
            cname = held_class(objs, backend, attr_meth[0])
            away = foreign_class(cname) if cname and cname not in classes else None
            meth = _methods_of(away[2]).get(attr_meth[1]) if away else None
            if away is not None and meth is not None:
                # another module's object (0.5.23 flashattention_backend.py:3403
                # `self.local_attn_builder.build(...)`, local_attention.py:96): its method
                # in its own file, its sites counted for the backend that holds it
                homes[id(meth)] = (away[0], away[1])
                home_class[id(meth)] = away[2]
                owner[id(meth)] = away[2].name
                held_by.setdefault(away[2].name, held_by.get(backend, backend))
                return f"{away[2].name}.{attr_meth[1]}", meth
        elif isinstance(f, ast.Name) and f.id in funcs:
            return f.id, funcs[f.id]
        elif isinstance(f, ast.Name):
            return imported(here, f.id)
        return None

    def alternatives(backend: str, call: ast.Call, where: ast.AST | None = None
                     ) -> list[tuple[str, ast.FunctionDef, tuple[tuple[ast.expr, bool], ...]]]:
        """(qualname, def, tests) of each method a call through a held object's conditional
        alias may run (`objects.choices`); [] where `resolve` answers or nothing does."""
        attr_meth = held_call(call.func)
        if (where is not None and id(where) in homes) or attr_meth is None or \
                backend not in classes:
            return []
        out = []
        for cls, meth, tests in choices(objs, backend, *attr_meth):
            fn = lookup(cls, meth, set())
            if fn is not None:
                owner[id(fn[1])] = cls
                held_by.setdefault(cls, held_by.get(backend, backend))
                out.append((f"{fn[0]}.{meth}", fn[1], tests))
        return out

    resolve.alternatives = alternatives  # type: ignore[attr-defined]
    # the release's root: the writers of the speculative input (census.spec_writers)
    resolve.root = modules.target.root if modules is not None else None  # type: ignore[attr-defined]
    resolve.held_by = held_by  # type: ignore[attr-defined]
    resolve.homes = homes  # type: ignore[attr-defined]
    resolve.classes = classes  # type: ignore[attr-defined]
    resolve.owner = owner  # type: ignore[attr-defined]

    resolve.mode_helpers = mode_helpers(tree)  # type: ignore[attr-defined]
    resolve.mode_guards = mode_guards(tree)  # type: ignore[attr-defined]
    configs: dict[str, set[str]] = {}  # class -> config_attrs, for the classes asked about

    def class_config(name: str) -> set[str]:
        if name not in configs:
            configs[name] = class_config_attrs(classes[name], tree)
        return configs[name]

    def inherited(backend: str, read: Any, seen: set[str] | None = None) -> set[str]:
        """`read(class)` of the class and of its bases defined in this module, joined."""
        seen = seen if seen is not None else set()
        cls = classes.get(backend)
        if cls is None or backend in seen:
            return set()
        seen.add(backend)
        out = set(read(cls))
        for b in cls.bases:
            if isinstance(b, ast.Name):
                out |= inherited(b.id, read, seen)
        return out

    # attributes set from the server arguments (host numbers)
    resolve.host_attrs = lambda b: inherited(  # type: ignore[attr-defined]
        b, lambda c: class_config(c.name))
    # what a method other than __init__ empties again (census.memo)
    resolve.emptied = lambda b: inherited(b, emptied)  # type: ignore[attr-defined]
    devices: dict[str, set[str]] = {}

    def device_attrs(backend: str) -> set[str]:
        if backend not in devices:
            devices[backend] = class_device_attrs(classes[backend]) \
                if backend in classes else set()
            by = objs.built_by.get(backend)
            if by is not None and by[0] != backend:  # what it copies from its builder
                devices[backend] |= device_copies(objs, backend, device_attrs(by[0]))
        return devices[backend]

    resolve.device_attrs = device_attrs  # type: ignore[attr-defined]
    out: dict[tuple[str, str], tuple[str, str, ast.FunctionDef]] = {}
    todo: list[tuple[str, str, ast.FunctionDef]] = []
    for cname, cls in classes.items():
        for mname, m in methods(cls).items():
            if scope.is_seed(mname):
                todo.append((f"{cname}.{mname}", cname, m))
    while todo:
        qual, backend, fn = todo.pop()
        if (qual, backend) in out:
            continue
        out[(qual, backend)] = (qual, backend, fn)
        for n in _inner(fn):
            if isinstance(n, ast.Call):
                found = resolve(backend, n, fn)
                if found:
                    if scope.follows(found[0]):
                        todo.append((found[0], owner.get(id(found[1]), backend), found[1]))
                else:
                    todo += [(q, owner[id(d)], d) for q, d, _ in alternatives(backend, n, fn)
                             if scope.follows(q)]
    return list(out.values()), resolve


# The multi-step draft backends (`TritonMultiStepDraftBackend`, `DeepseekV4MultiStepBackend`,
# ...) are the draft worker's `draft_attn_backend`: their entry points run for draft decode
# only, a DECODE batch (0.5.23 speculative/eagle_worker_v2.py:707-711 skips an idle one;
# eagle_draft_cuda_graph_runner.py:153 captures DECODE), never extend or verify (0.5.23
# flashinfer_backend.py:2584-2585 asserts `spec_info.is_draft_input()`).
_MULTI_STEP = re.compile(r"MultiStep\w*Backend$")
_DRAFT_DECODE = _modes({"decode", "idle"})


def _mirror_params(tree: ast.Module, classes: dict[str, ast.ClassDef], qual: str,
                   fn: ast.FunctionDef) -> MirrorParams:
    """`guards.param_mirrors` of a builder that is a method of a class of this module (a
    module function or another module's helper: none)."""
    cls = classes.get(qual.split(".", 1)[0]) if "." in qual else None
    return param_mirrors(tree, cls, fn) if cls is not None else ()


def mode_binds(edges: list[_Edge]) -> MirrorParams:
    """(parameter, ((mode, "none" | "mirror:<x>", the calls' `file:line`s), ...)) for each
    parameter some call binds to None or a host mirror: per forward mode, what every call
    reaching that mode binds. A mode whose calls disagree, or bind anything else, is left out:
    there the test stays data (`_Scan.guards_of` also drops a parameter the callee may rebind
    before its test). flashinfer's `update_single_wrapper` tests `extend_prefix_lens_cpu is
    not None` (0.5.23 flashinfer_backend.py:1958): the extend branch of init_forward_metadata
    (:1075) passes the batch's mirror, target-verify's calls (:1026, :782) pass none, and on
    draft-extend the graph path's call (:808) passes none where :1075 passes the mirror."""
    out = []
    for p in sorted({p for e in edges for p in e.binds}):
        per: dict[str, dict[str, list[str]]] = {}
        for e in edges:
            b = e.binds.get(p, "other")
            for m in step_paths(e.state):
                per.setdefault(m, {}).setdefault(b, []).append(e.at.split(" ", 1)[0])
        decided = tuple((m, b, ", ".join(dict.fromkeys(at))) for m, got in per.items()
                        if len(got) == 1 for b, at in got.items() if b != "other")
        if decided:
            out.append((p, decided))
    return tuple(out)


def _analyse(tree: ast.Module, rel: str, modules: Modules | None = None,
             scope: Scope = BUILDERS) -> tuple[list[str], list[_Scan]]:
    """Walk every builder until what reaches each one (the union over its callers' branches,
    and, for an entry point, what its name says) and its callers' argument facts settle."""
    builders, resolve = _builders(tree, modules, scope)
    # what a multi-step draft backend sets on the spec input before each per-step call
    resolve.spec_sets = spec_sets(tree, rel)  # type: ignore[attr-defined]
    # a GPU fast path returns first on every GPU: the host fallback after it cannot run
    resolve.gpu_true = gpu_true_methods(tree, rel, modules)  # type: ignore[attr-defined]
    # whether a target-verify step leaves a batch field None (census.batch_fields)
    resolve.none_on_verify = functools.partial(leaves_none, modules)  # type: ignore[attr-defined]
    # ... or an IDLE step (the same)
    resolve.none_on_idle = functools.partial(  # type: ignore[attr-defined]
        idle_leaves_none, modules)
    # whether a draft-extend step's prefix lengths are the committed ones (the same)
    resolve.prefix_on_draft_extend = functools.partial(  # type: ignore[attr-defined]
        prefix_on_draft_extend, modules)
    homes = getattr(resolve, "homes", {})
    classes_ = getattr(resolve, "classes", {})
    defining = {id(m): cname for cname, c in classes_.items() for m in c.body
                if isinstance(m, ast.FunctionDef)}
    flag_memo: dict[tuple[str, int], Any] = {}

    def flags_for(backend: str, fn: ast.FunctionDef) -> Any:
        """The start-up flags `fn`'s tests may read through (census.flags); None for a helper
        of another module."""
        if id(fn) in homes:
            return None
        key = (backend, id(fn))
        if key not in flag_memo:
            flag_memo[key] = fn_flags(tree, classes_, backend, fn, rel, defining.get(id(fn)),
                                      modules)
        return flag_memo[key]

    resolve.fn_flags = flags_for  # type: ignore[attr-defined]
    held = wrapped(modules)  # a backend only a wrapper runs: the modes it withholds
    keys = [(q, b) for q, b, _ in builders]
    # a named builder only non-builders call: the guards around those calls (kept)
    called_from: dict[tuple[str, str], frozenset] = {}
    classes = getattr(resolve, "classes", {})
    helpers = getattr(resolve, "mode_helpers", {})
    infos = {id(fn): _FnInfo(fn, helpers) for _, _, fn in builders}
    mirrors = {id(fn): _mirror_params(tree, classes, qual, fn) for qual, _, fn in builders}
    specs = {id(fn): spec_params(tree, classes[qual.split(".", 1)[0]], fn)
             for qual, backend, fn in builders if backend in resolve.spec_sets
             and "." in qual and qual.split(".", 1)[0] in classes}
    def derive(key: tuple[str, str], edges: list[_Edge]) -> tuple:
        """What reaches a builder, from the calls into it: (entry state, whether a call sits
        under a mode test the census cannot read, its callers' argument facts, parameter
        truths, the guards every reaching call passes, per-parameter guards, per-mode
        bindings)."""
        name = key[0].rsplit(".", 1)[-1]
        external = scope.external(name) or (scope.is_seed(key[0]) and not edges)
        st = scope.seed_state(name) if external else NONE
        if external and held is not None and name == held.entry and \
                is_held(classes, key[1], held.child_type):  # census.wrapped
            st = frozenset(s for s in st if s[0] not in held.modes)
        elif external and held is not None and name == held.entry and key[1] == held.wrapper:
            st = frozenset(s for s in st if s[0] not in held.wrapper_modes)
        if external and _MULTI_STEP.search(key[1]):
            st &= _DRAFT_DECODE
        for e in edges:
            st |= e.state
        unk = any(e.unknown and e.state for e in edges)
        reaching = [e.guards for e in edges if e.state]
        grd = frozenset()
        if reaching and not external:
            grd = common_guards(reaching)
        elif not edges and not scope.external(name) and key[1] in classes:
            # a named builder only non-builders call (`forward_*`): their guards
            grd = called_from.setdefault(key, call_site_guards(
                classes[key[1]], name, rel, tree=tree))
        agreed: dict[str, str] = {}
        truth: dict[str, tuple[frozenset, frozenset]] = {}
        pg: dict[tuple[str, bool], frozenset] = {}
        mb: MirrorParams = ()
        if edges and not external:
            for pname in {p for e in edges for p in e.args}:
                vals = {e.args.get(pname, "other") for e in edges}
                if len(vals) == 1 and vals <= {"none", "host", "host-set", "tensor"}:
                    agreed[pname] = vals.pop()
                elif vals == {"host", "host-set"}:
                    agreed[pname] = "host"
            pnames = set.intersection(*(set(e.truth) for e in edges))
            truth = {p: (frozenset().union(*(e.truth[p][0] for e in edges)),
                         frozenset().union(*(e.truth[p][1] for e in edges)))
                     for p in pnames}
            reach_all = [e for e in edges if e.state]
            for p in pnames:
                for i, holds in ((0, True), (1, False)):
                    some = [e.guards for e in reach_all if e.truth[p][i]]
                    if some and len(some) < len(reach_all):
                        pg[(p, holds)] = common_guards(some)
            mb = mode_binds(reach_all)
        return (st, unk, agreed, truth, grd, pg, mb)

    # Each pass walks the builders in discovery order (`_builders`: a caller before the helpers
    # it reaches) and gives each the inputs its callers' latest scans say, this pass's where
    # they ran already: a chain of helpers settles in one pass, not one pass per link. A scan
    # depends only on its builder and its inputs: one whose inputs did not change is kept. The
    # walk ends at a pass that scans nothing again.
    index = {k: i for i, k in enumerate(keys)}
    made: dict[tuple[str, str], tuple[tuple, _Scan]] = {}
    incoming: dict[tuple[str, str], dict[tuple[str, str], list[_Edge]]] = {}
    for _ in range(12):
        again = False
        for qual, backend, fn in builders:
            key = (qual, backend)
            into = incoming.get(key, {})
            edges = [e for k in sorted(into, key=index.__getitem__) for e in into[k]]
            inputs = derive(key, edges)
            if key in made and made[key][1].used_formula:
                # its formulas read each call's arguments: a new call is a new input
                inputs = (*inputs, tuple(map(id, edges)))
            if key in made and made[key][0] == inputs:
                continue
            where = homes[id(fn)][0] if id(fn) in homes else rel  # a helper's own file
            s = _Scan(fn, qual, backend, where, inputs[2], resolve, inputs[3], infos[id(fn)],
                      mirrors[id(fn)] + tuple(b for b in inputs[6]
                                              if b[0] not in dict(mirrors[id(fn)])),
                      inputs[5], specs.get(id(fn), ()))
            s.in_calls = [(e.state, e.call) for e in edges if e.state and e.call is not None]
            s.run(inputs[0], inputs[1], inputs[4])
            if key in made:
                for e in made[key][1].edges:
                    incoming.get(e.callee, {}).pop(key, None)
            for e in s.edges:
                incoming.setdefault(e.callee, {}).setdefault(key, []).append(e)
            made[key] = (inputs, s)
            again = True
        if not again:
            break
    scans = {k: made[k][1] for k in keys}
    names = [q for q, _, fn in sorted(builders, key=lambda b: b[2].lineno)]
    order = sorted(builders, key=lambda b: b[2].lineno)
    callers: dict[tuple[str, str], list[_Edge]] = {}
    for s in scans.values():
        for e in s.edges:
            if e.state:  # a call that can run
                callers.setdefault(e.callee, []).append(e)
    for key, s in scans.items():
        chain, seen, at = [], {key}, key
        while callers.get(at):
            e = callers[at][0]
            chain.append(e.at)
            at = (e.at.rsplit(" ", 1)[-1], at[1])
            if at in seen:
                break
            seen.add(at)
        s.chain = tuple(chain)
    return list(dict.fromkeys(names)), [scans[(q, b)] for q, b, _ in order]
