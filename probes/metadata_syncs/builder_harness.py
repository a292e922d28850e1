"""Run REAL SGLang metadata-builder methods alone, without importing sglang.

How: the release's source file is parsed; the backend class is rebuilt with only the chosen real
methods (their AST untouched, compiled with the real file name and line numbers, so the code
objects equal the installed ones and `fixes.patcher.rewrite_function` accepts them) and executed
in a small namespace of stand-ins. Everything a method needs from around it comes from there:

- `torch`, `F` (`torch.nn.functional`): the real local torch.
- `UnifiedKvMetadata`: `UnifiedKvMetadataStandIn`, a plain attribute holder (the real class is a
  dataclass of tensors that the builder only assigns to).
- imports of `sglang.*` inside a method: answered by `_SGLANG_STAND_INS` (the env gate
  `is_unified_kv_triton` -> True, the path where the builder does its work); any other sglang
  name raises ImportError, and the builder is reported "not executed" with that reason.
- `self`: `BackendSelfStandIn` (`token_to_kv_pool.unified_swa_window`, read on 0.5.23's padding
  branch); `core`: `CoreMetadataStandIn` (`unified`, `positions_casual` sized to the tokens).

The loaded module is registered in `sys.modules` under `_diag_harness.<version>.<stem>` so a fix
can patch it exactly as it would patch the engine's module.
"""

from __future__ import annotations
import __future__

import ast
import builtins
import random
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any

from diag.probes.source import parse_fresh
from diag.target import Target

DSV4_FILE = "srt/layers/attention/deepseek_v4_backend_hip_radix.py"
DSV4_CLASS = "DeepseekV4HipRadixBackend"
ATTACH = "_attach_unified_kv_prefill_meta"
CALLER = "init_forward_metadata_prefill"
PATHS = ("draft-extend", "target-extend")
OUTPUT_FIELDS = ("pf_state_slot", "pf_chunk_start", "pf_cu_q", "pf_final_pos")


class HarnessError(Exception):
    """A builder could not be loaded or run alone; the message says why."""


class UnifiedKvMetadataStandIn:
    """Stand-in for SGLang's `UnifiedKvMetadata`: holds whatever the builder assigns."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


class CoreMetadataStandIn(types.SimpleNamespace):
    """Stand-in for `DSV4AttnMetadata` as the builder uses it: `unified`, `positions_casual`."""


class BackendSelfStandIn(types.SimpleNamespace):
    """Stand-in for the backend instance: only `token_to_kv_pool.unified_swa_window`."""


_SGLANG_STAND_INS: dict[str, dict[str, Any]] = {
    # 0.5.17 - 0.5.19
    "sglang.kernels.ops.attention.dsv4.unified_kv_kernels.env_gate":
        {"is_unified_kv_triton": lambda: True},
    # 0.5.15.post1
    "sglang.srt.layers.attention.dsv4.unified_kv_kernels.env_gate":
        {"is_unified_kv_triton": lambda: True},
    # 0.5.23
    "sglang.srt.layers.attention.dsv4.unified_kv_gate": {"is_unified_kv_triton": lambda: True},
}


def _import(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and (name == "sglang" or name.startswith("sglang.")):
        names = _SGLANG_STAND_INS.get(name)
        missing = [n for n in fromlist or () if names is None or n not in names]
        if names is None or missing:
            raise ImportError(f"the harness has no stand-in for {name} "
                              f"{', '.join(missing or fromlist or ())}".rstrip())
        mod = types.ModuleType(name)
        mod.__dict__.update(names)
        return mod
    return builtins.__import__(name, globals, locals, fromlist, level)


_modules: dict[tuple[str, str], types.ModuleType] = {}
_load_lock = threading.Lock()


def loaded(target: Target, rel: str, cls: str) -> bool:
    """Whether this process has already loaded `cls` of `rel` (a fix may have patched it)."""
    prefix = (str(target.root), f"{rel}:{cls}:")
    with _load_lock:
        return any(r == prefix[0] and k.startswith(prefix[1]) for r, k in _modules)


def load_class(target: Target, rel: str, cls: str, methods: tuple[str, ...]) -> type:
    """The real class `cls` of `rel`, holding only `methods`, in a stand-in namespace."""
    key = (str(target.root), f"{rel}:{cls}:{','.join(methods)}")
    with _load_lock:
        if key in _modules:
            return getattr(_modules[key], cls)
        path = target.file(rel)
        if not path.is_file():
            raise HarnessError(f"{target.relpath(path)} not in this release")
        source = path.read_text(encoding="utf-8")
        tree = parse_fresh(source, str(path))  # its nodes are compiled into a module
        cdef = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        if cdef is None:
            raise HarnessError(f"class {cls} not found in {target.relpath(path)}")
        defs = {n.name: n for n in cdef.body if isinstance(n, ast.FunctionDef)}
        absent = [m for m in methods if m not in defs]
        if absent:
            raise HarnessError(f"{cls} has no {', '.join(absent)} in this release")
        flags = 0
        for node in tree.body:  # keep the module's __future__ flags: same code objects
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                for alias in node.names:
                    flags |= getattr(__future__, alias.name).compiler_flag
        for m in methods:
            defs[m].decorator_list = []
        shell = ast.ClassDef(name=cls, bases=[], keywords=[], decorator_list=[],
                             body=[defs[m] for m in methods], type_params=[])
        ast.copy_location(shell, cdef)
        # The module's own imports, never run (`if False:`): the compiler picks its opcodes by
        # whether a name was bound by an import (3.11 `torch.f()` -> LOAD_ATTR, not LOAD_METHOD).
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                   and getattr(n, "module", None) != "__future__"]
        body: list[ast.stmt] = [shell]
        if imports:
            never = ast.If(test=ast.Constant(False), body=imports, orelse=[])
            body.insert(0, ast.copy_location(never, imports[0]))
        mod_tree = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
        code = compile(mod_tree, str(path), "exec", flags=flags, dont_inherit=True)
        version = (target.version or "x").replace(".", "_")
        name = f"_diag_harness.v{version}.{path.stem}"
        mod = types.ModuleType(name)
        mod.__file__ = str(path)
        import torch

        mod.__dict__.update({
            "torch": torch, "F": torch.nn.functional,
            "UnifiedKvMetadata": UnifiedKvMetadataStandIn,
            "__builtins__": {**vars(builtins), "__import__": _import},
        })
        exec(code, mod.__dict__)
        mod.__dict__["_diag_defs"] = {m: defs[m] for m in methods}  # their trees (read only)
        sys.modules[name] = mod
        _modules[key] = mod
        return getattr(mod, cls)


def dsv4_class(target: Target) -> type:
    """The real `DeepseekV4HipRadixBackend` builder and its caller (the caller is only patched)."""
    return load_class(target, DSV4_FILE, DSV4_CLASS, (ATTACH, CALLER))


@dataclass
class Inputs:
    """One call's inputs, as the real caller would pass them on a path."""

    kwargs: dict[str, Any]
    core: CoreMetadataStandIn
    device_tensors: list[Any]
    locals_: dict[str, Any] = field(default_factory=dict)  # what the caller holds (for the fix)


def make_inputs(fn: Any, path: str, batch: int, device: str = "cpu", seed: int = 0,
                num_draft_tokens: int = 4) -> Inputs:
    """Inputs for `_attach_unified_kv_prefill_meta` on `path`, by its real parameter names."""
    import inspect

    import torch

    if path not in PATHS:
        raise HarnessError(f"path must be one of {', '.join(PATHS)}")
    rng = random.Random(seed)
    seq = [rng.randint(64, 4096) for _ in range(batch)]
    if path == "draft-extend":
        ext = [num_draft_tokens] * batch
    else:
        ext = [rng.randint(1, min(s, 512)) for s in seq]
    num_tokens = sum(ext)
    rpi = torch.tensor(rng.sample(range(4 * batch), batch), dtype=torch.int32, device=device)
    seq_lens = torch.tensor(seq, dtype=torch.int32, device=device)
    ext_lens = torch.tensor(ext, dtype=torch.int32, device=device)
    rpi_rep = torch.repeat_interleave(rpi, torch.tensor(ext, device=device),
                                      output_size=num_tokens)
    core = CoreMetadataStandIn(unified=None,
                               positions_casual=torch.zeros(num_tokens, device=device))
    values = {"core": core, "req_pool_indices": rpi, "req_pool_indices_repeated": rpi_rep,
              "seq_lens": seq_lens, "extend_seq_lens": ext_lens, "num_tokens": num_tokens,
              # what the real callers pass on each path (0.5.18: need_compress=not is_draft;
              # 0.5.20-0.5.23: exact_num_tokens=is_draft from init_forward_metadata, which
              # 0.5.21-0.5.23's init_forward_metadata_prefill may prove: `caller_argument`)
              "need_compress": path != "draft-extend",
              "exact_num_tokens": path == "draft-extend"}
    exact = caller_argument(fn, "exact_num_tokens", {
        "exact_num_tokens": path == "draft-extend", "need_compress": path != "draft-extend",
        "extend_seq_lens_cpu": ext, "num_tokens": num_tokens})
    if exact is not None:
        values["exact_num_tokens"] = bool(exact)
    params = list(inspect.signature(fn).parameters)[1:]  # without self
    kwargs = {p: values[p] for p in params if p in values and p != "_diag_output_size"}
    unknown = [p for p in params if p not in values and p != "_diag_output_size"]
    if unknown:
        raise HarnessError(f"{ATTACH} takes parameters the harness does not know: {unknown}")
    caller_locals = {"num_tokens": num_tokens, "extend_seq_lens_cpu": ext,
                     "need_compress": values["need_compress"]}
    return Inputs(kwargs, core, [rpi, rpi_rep, seq_lens, ext_lens, core.positions_casual],
                  caller_locals)


_SAFE_BUILTINS = {"sum": sum, "len": len, "int": int, "bool": bool, "min": min, "max": max}


def caller_argument(fn: Any, name: str, params: dict[str, Any]) -> Any | None:
    """What the release's `CALLER` passes as `name` to the builder, computed from its source
    with its parameters as the prefill call gives them (`params`, its defaults for the rest):
    0.5.21-0.5.23 pass `exact_num_tokens or host_proves_exact_num_tokens` (0.5.23
    deepseek_v4_backend_hip_radix.py:1236), the local at :1221-1226, which the host lengths
    of a target prefill prove (the prefill call, :2221-2236). None where the caller, its call or
    a value it reads cannot be found: the path's own value stands."""
    # the caller's tree as `load_class` parsed it (the release's file, real lines)
    caller = getattr(fn, "__globals__", {}).get("_diag_defs", {}).get(CALLER)
    if not isinstance(caller, ast.FunctionDef):
        return None
    calls = [c for c in ast.walk(caller) if isinstance(c, ast.Call)
             and isinstance(c.func, ast.Attribute) and c.func.attr == fn.__name__]
    exprs = [k.value for c in calls for k in c.keywords if k.arg == name]
    if len(calls) != 1 or len(exprs) != 1:
        return None
    args = caller.args
    ns: dict[str, Any] = {}
    for a, d in [*zip(args.args[len(args.args) - len(args.defaults):], args.defaults),
                 *zip(args.kwonlyargs, args.kw_defaults)]:
        if d is not None:
            try:
                ns[a.arg] = ast.literal_eval(d)
            except ValueError:
                pass
    ns.update(params)
    for st in caller.body:  # the locals bound before the call, where they can be computed
        if st.lineno >= calls[0].lineno:
            break
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and \
                isinstance(st.targets[0], ast.Name):
            try:
                ns[st.targets[0].id] = _eval(st.value, ns)
            except Exception:  # reads something the harness does not hold: not a value
                ns.pop(st.targets[0].id, None)
    try:
        return _eval(exprs[0], ns)
    except Exception:
        return None


_CODE: dict[int, tuple[ast.expr, Any]] = {}  # an expression node -> its code (one compile)


def _eval(e: ast.expr, ns: dict[str, Any]) -> Any:
    """An expression of the caller's source over `ns` and a few builtins only."""
    hit = _CODE.get(id(e))
    if hit is None or hit[0] is not e:
        hit = _CODE[id(e)] = (e, compile(ast.Expression(e), "<diag caller>", "eval"))
    return eval(hit[1], {"__builtins__": _SAFE_BUILTINS}, dict(ns))  # noqa: S307


def backend_self() -> BackendSelfStandIn:
    return BackendSelfStandIn(token_to_kv_pool=types.SimpleNamespace(unified_swa_window=128))


@dataclass
class Prepared:
    """One builder call with everything but the call itself done beforehand (for timing): the
    function, the backend stand-in and the keyword arguments (the patched builder's
    `_diag_output_size` already computed, by the caller's expression compiled once)."""

    fn: Any
    self_obj: Any
    kwargs: dict[str, Any]
    core: CoreMetadataStandIn

    def reset(self) -> None:
        """Outside the timed call: clear what the builder assigns, so each call builds anew."""
        self.core.unified = None

    def outputs(self) -> dict[str, Any]:
        if self.core.unified is None:
            raise HarnessError(f"{ATTACH} returned without building metadata")
        return {k: getattr(self.core.unified, k) for k in OUTPUT_FIELDS}


def prepare(cls: type, inp: Inputs, output_size_expr: str | None = None) -> Prepared:
    """A `Prepared` call of the builder as `cls` holds it now (patched or not): time only
    `p.fn(p.self_obj, **p.kwargs)`."""
    kwargs = dict(inp.kwargs)
    if output_size_expr is not None:
        code = compile(output_size_expr, "<diag output_size>", "eval")
        kwargs["_diag_output_size"] = eval(code, {}, dict(inp.locals_))  # noqa: S307
    return Prepared(getattr(cls, ATTACH), backend_self(), kwargs, inp.core)


def call(cls: type, inp: Inputs, output_size_expr: str | None = None) -> dict[str, Any]:
    """Call the builder (the patched one takes `_diag_output_size`, computed by the caller's
    rewritten expression from the same caller locals); return the tensors it produced."""
    fn = getattr(cls, ATTACH)
    kwargs = dict(inp.kwargs)
    if output_size_expr is not None:
        kwargs["_diag_output_size"] = eval(output_size_expr, {}, dict(inp.locals_))  # noqa: S307
    inp.core.unified = None
    fn(backend_self(), **kwargs)
    if inp.core.unified is None:
        raise HarnessError(f"{ATTACH} returned without building metadata")
    return {k: getattr(inp.core.unified, k) for k in OUTPUT_FIELDS}


@dataclass
class Measurement:
    version: str | None
    path: str
    mode: str  # "cpu" | "gpu"
    patched: bool
    syncs: int | None = None
    sites: list[str] = field(default_factory=list)  # "file:line function" per sync
    seconds: float | None = None
    error: str | None = None  # why it was not executed

    @property
    def executed(self) -> bool:
        return self.error is None


def run_limited(fn: Any, timeout: float) -> Any:
    """Run `fn` in a daemon thread; HarnessError if it takes longer than `timeout` seconds."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # reported to the caller
            box["error"] = e

    t = threading.Thread(target=target, daemon=True, name="diag-builder-harness")
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise HarnessError(f"did not finish within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def measure(target: Target, path: str, mode: str = "cpu", batch: int = 64,
            patched_expr: str | None = None, cls: type | None = None,
            timeout: float = 20.0) -> Measurement:
    """Count the syncs of one call of the real builder on `path` (mode "cpu" or "gpu").

    `cls`: a class already loaded (e.g. patched by a fix); `patched_expr`: the caller's
    `_diag_output_size` expression when `cls` is patched. Never raises: errors go in `.error`.
    """
    from diag.probes.metadata_syncs.sync_counter import DeviceTags, count_syncs

    m = Measurement(target.version, path, mode, patched_expr is not None)
    try:
        cls = cls or dsv4_class(target)
        device = "cuda" if mode == "gpu" else "cpu"
        inp = make_inputs(getattr(cls, ATTACH), path, batch, device)

        def once() -> Any:
            call(cls, inp, patched_expr)  # warm-up (first-call allocations)
            if mode == "gpu":
                import torch

                torch.cuda.synchronize()
            tags = DeviceTags(device=inp.device_tensors) if mode == "cpu" else None
            with count_syncs(mode, tags) as rep:
                call(cls, inp, patched_expr)
            return rep

        rep = run_limited(once, timeout)
        m.syncs = rep.count
        m.seconds = rep.seconds
        m.sites = [f"{target.relpath(e.file)}:{e.line} {e.function}" for e in rep.events]
    except HarnessError as e:
        m.error = str(e)
    except Exception as e:  # a builder that cannot run alone is reported, never raised
        m.error = f"{type(e).__name__}: {e}"
    return m
