"""The draft-extend graph-capture gate of an SGLang release, read from its source with `ast`.

Why: whether speculative decoding's draft-extend phase is captured as a CUDA/HIP graph or runs
eager is decided by a few lines in the EAGLE draft worker (`supports_hip*draft_extend_graph`,
an `isinstance` allow-list). The gate moved between methods and was renamed across releases
(sglang 0.5.13.post1: `EagleDraftWorker.init_cuda_graphs`, srt/speculative/eagle_worker_v2.py:368;
0.5.15.post1: `_capture_cuda_graphs`, :441; `supports_hip_aiter_draft_extend_graph` became
`supports_hip_draft_extend_graph` in 0.5.18, :403), so everything here is found by name and shape, never by line, and SGLang is never
imported. Parts:

- `select_worker(target, environ, server_args, topk, overlap_off)`: which EAGLE worker runs (v1
  or v2, where a release has both: `SGLANG_ENABLE_SPEC_V2`, the topk and
  --disable-overlap-schedule as the release's server_args weighs them (`overlap_rule`), or a
  server's `disable_overlap_schedule`);
- `read_gate(target, environ=..., server_args=...)` → `GateInfo`: where that worker's gate is
  and what it admits, per platform, every name in it resolved (`_Scope`), or why not
  (`broken` for a worker file that is missing, empty or does not parse);
- the backend names and the classes they build: `probes.backends` (one registry, cached;
  `backend_map`, `BackendInfo`, `backend_aliases` are re-exported here for older callers);
- `verdict(gate, info, platform, num_steps, ...)` → `Verdict(mode, reason)`, a pure function.

Size (over ~600 lines, kept whole): worker selection, the gate's name resolution (`_Scope`) and
the verdict read and fill one `GateInfo`, and every release's shape of the gate is handled in
one place so that the probe, the trace verdict and fix `draft-extend-allowlist` agree; the
backend registry, the other half, is already apart (`probes.backends`).
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from diag.probes.backends import (  # noqa: F401  (re-exported: the gate's callers use them)
    ALIAS_FILES,
    DRAFT_UTILS_FILE,
    GPU_GENERATION,
    REGISTRY_FILE,
    BackendInfo,
    _method,
    _platform_leaf,
    _three_valued,
    backend_aliases,
    backend_map,
    platform_truth,
)
from diag.probes.source import (
    file_state,
    kept,
    parse_file,
    parse_problem,
    parse_pruned,
    walk_all,
)
from diag.target import Target

V2_FILE = "srt/speculative/eagle_worker_v2.py"
V1_FILE = "srt/speculative/eagle_worker.py"
MULTI_LAYER_FILE = "srt/speculative/multi_layer_eagle_worker_v2.py"
ENVIRON_FILE = "srt/environ.py"

HIP_VAR = re.compile(r"^supports_hip\w*draft_extend_graph$")
CUDA_VAR = re.compile(r"^supports_cuda\w*draft_extend_graph$")
KILL_SWITCH = re.compile(r"SGLANG_DISABLE_DRAFT_EXTEND\w*")
RUNNER_ATTR = "cuda_graph_runner_for_draft_extend"
EXTEND_ATTR = "draft_extend_attn_backend"
DECODE_ATTR = "draft_attn_backend"

EXPECTED = (f"a method of the EAGLE draft worker that sets self.{RUNNER_ATTR} under an `if` "
            f"testing self.{EXTEND_ATTR}, with the HIP condition in a variable named "
            "supports_hip*draft_extend_graph (isinstance allow-list), or inline")

_ENV_TRUE = ("true", "1", "yes", "y")  # SGLang's EnvBool (environ.py)
_ENV_FALSE = ("false", "0", "no", "n")  # any other value reads as the default


def env_bool(value: str | None, default: bool = False) -> bool:
    """An SGLang `EnvBool(default)` switch as the engine reads it (`environ.py`: lower-cased,
    not stripped; an invalid value falls back to the default)."""
    if value is None:
        return default
    v = value.lower()
    return True if v in _ENV_TRUE else False if v in _ENV_FALSE else default


# Graph modes a verdict can give.
GRAPH, EAGER, UNSUPPORTED, UNKNOWN = "graph", "eager", "unsupported", "unknown"


# Parsing and the module index live in the shared source-reading core (probes.source).


# --------------------------------------------------------------------------- the gate


@dataclass(frozen=True)
class Check:
    """One `isinstance(self.<attr>, <cls>)` test of the gate (`exact`: `type(self.<attr>) is
    <cls>` or `in {...}`, which a subclass does not pass)."""

    attr: str  # "draft_attn_backend" (the multi-step decode backend) | "draft_extend_attn_backend"
    cls: str
    exact: bool = False

    def text(self) -> str:
        if self.exact:
            return f"type(self.{self.attr}) is {self.cls}"
        return f"isinstance(self.{self.attr}, {self.cls})"


@dataclass
class MultiLayerGate:
    """`multi_layer_eagle_worker_v2.py`: captures draft-extend with no backend allow-list."""

    file: str
    line: int | None
    method: str
    has_allowlist: bool
    kill_switch_env: str | None


@dataclass
class GateInfo:
    """Where the draft-extend gate is and what it admits.

    `hip_policy`: "allowlist" (a supports_hip*draft_extend_graph variable of isinstance checks),
    "never" (the worker has no HIP branch: only CUDA/NPU capture), "any" (the v1 worker of
    0.5.9 that captures on every non-NPU device). `cuda_policy`: "allowlist" | "any" | "never".
    """

    recognised: bool
    problem: str | None = None
    file: str | None = None  # relative to the target root, e.g. sglang/srt/speculative/...
    line: int | None = None  # the HIP variable's assignment, else the capture `if`
    cuda_line: int | None = None  # the CUDA allow-list's isinstance test, where there is one
    method: str | None = None  # init_cuda_graphs | _capture_cuda_graphs | ...
    worker_class: str | None = None
    worker: str = "v2"  # "v2" (eagle_worker_v2.py) | "v1" (eagle_worker.py)
    spec_v2_default: bool = True
    variable: str | None = None  # supports_hip_draft_extend_graph | ..._aiter_... | None
    hip_policy: str = "never"
    hip_checks: list[Check] = field(default_factory=list)
    cuda_policy: str = "never"
    cuda_checks: list[Check] = field(default_factory=list)
    kill_switch_env: str | None = None
    graphs_disabled_check: str | None = None  # the early-return condition, as source
    capture_condition: str | None = None  # the capture `if`, as source
    multi_layer: MultiLayerGate | None = None
    expected: str = EXPECTED
    # The worker file cannot be read: "missing" | "empty" | "does not parse (...)" (a target
    # error, not a changed gate shape); `line` is then the syntax error's line.
    broken: str | None = None
    # How the release picks this worker, e.g. "SGLANG_ENABLE_SPEC_V2 unset (default False)
    # -> v1 (sglang/srt/speculative/spec_info.py:81)"; None where there is one worker only.
    selection: str | None = None
    # (why, server_args.py line) where the release refuses to start this worker with the topk
    # under audit (`start_refusal`); None otherwise, and always for a running server.
    start_refused: tuple[str, int] | None = None
    # Names of the CUDA allow-list that could not be followed: CUDA verdicts are then unknown.
    cuda_unresolved: list[str] = field(default_factory=list)
    # Policy "capability" (sglang PR #36324): the gate asks the backend itself, through this
    # method called on `self.<capability_attr>`, instead of an isinstance allow-list.
    capability_method: str | None = None
    capability_attr: str | None = None

    @property
    def hip_classes(self) -> list[str]:
        return [c.cls for c in self.hip_checks]

    @property
    def cuda_classes(self) -> list[str]:
        return [c.cls for c in self.cuda_checks]

    @property
    def tested_attr(self) -> dict[str, str]:
        """HIP allow-listed class → the worker attribute it is tested on."""
        return {c.cls: c.attr for c in self.hip_checks}

    def to_dict(self) -> dict:
        return {
            "recognised": self.recognised, "problem": self.problem, "file": self.file,
            "line": self.line, "method": self.method, "worker_class": self.worker_class,
            "worker": self.worker, "variable": self.variable, "hip_policy": self.hip_policy,
            "hip_checks": [c.text() for c in self.hip_checks], "cuda_policy": self.cuda_policy,
            "cuda_classes": self.cuda_classes, "kill_switch_env": self.kill_switch_env,
            "broken": self.broken, "selection": self.selection,
        }


SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"
SPEC_INFO_FILE = "srt/speculative/spec_info.py"
V1_MODULE, V2_MODULE = "sglang.srt.speculative.eagle_worker", "sglang.srt.speculative.eagle_worker_v2"


def ragged_algorithms(target: Target) -> tuple[frozenset[str], int] | None:
    """The algorithms whose `supports_ragged_verify()` is true (the `self.is_<name>()` it
    returns) and the method's line, or None where the release has no such method (then
    nothing is ruled out): the only ones whose verify input may carry a `RaggedVerifyLayout`
    (0.5.23 speculative/spec_info.py:160-164: DSPARK)."""
    tree = parse_file(target.file(SPEC_INFO_FILE))
    if tree is None:
        return None
    for fn in walk_all(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name == "supports_ragged_verify":
            ret = [n for n in walk_all(fn) if isinstance(n, ast.Return) and n.value]
            return frozenset(m.upper() for r in ret for m in re.findall(
                r"self\.is_(\w+)\(\)", ast.unparse(r.value))), fn.lineno
    return None


def spec_v2_env_default(target: Target) -> tuple[bool, int] | None:
    """`SGLANG_ENABLE_SPEC_V2 = EnvBool(<default>)` in environ.py: (default, line), or None
    where the release has no such variable."""
    tree = parse_file(target.file(ENVIRON_FILE))
    if tree is None:
        return None
    for node in walk_all(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == SPEC_V2_ENV
                and isinstance(node.value, ast.Call) and node.value.args
                and isinstance(node.value.args[0], ast.Constant)):
            return bool(node.value.args[0].value), node.lineno
    return None


def spec_v2_is_default(target: Target) -> bool:
    """`SGLANG_ENABLE_SPEC_V2 = EnvBool(False)` in environ.py (0.5.9, 0.5.10) → the v1 worker."""
    d = spec_v2_env_default(target)
    return True if d is None else d[0]


def _worker_imports(target: Target) -> tuple[dict[str, int], int | None]:
    """spec_info.py: {module: line} for the EAGLE worker modules it imports, and the line of
    `enable_overlap = not server_args.disable_overlap_schedule` (what picks v1 or v2)."""
    tree = parse_file(target.file(SPEC_INFO_FILE))
    found: dict[str, int] = {}
    overlap = None
    if tree is None:
        return found, overlap
    for node in walk_all(tree):
        if isinstance(node, ast.ImportFrom) and node.module in (V1_MODULE, V2_MODULE):
            found.setdefault(node.module, node.lineno)
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Name)
              and node.targets[0].id == "enable_overlap" and overlap is None):
            overlap = node.lineno
    return found, overlap


SERVER_ARGS_FILE = "srt/server_args.py"
_V1_FALLBACK = re.compile(r'spec_v1_reason = "spec v2 currently only supports topk = 1"')
_V2_RAISES = re.compile(r'"Spec v2 currently only supports topk = 1')
_ENV_TEST = re.compile(r"envs\.SGLANG_ENABLE_SPEC_V2\.get\(\)")


@dataclass(frozen=True)
class OverlapRule:
    """How server_args sets the overlap scheduler for EAGLE, and with it the worker
    (spec_info.py: `enable_overlap = not server_args.disable_overlap_schedule`).

    `forced` (0.5.9 server_args.py:2368-2389): SGLANG_ENABLE_SPEC_V2 alone decides, the user's
    --disable-overlap-schedule is overwritten, and topk > 1 with the v2 worker raises at start.
    `fallback` (0.5.11 :3463-3474, 0.5.12.post1 :3748-3761): topk > 1 or the switch read false
    turn the scheduler off (the v1 worker); so does --disable-overlap-schedule."""

    shape: str  # forced | fallback
    topk_line: int
    env_line: int | None


def overlap_rule(target: Target) -> OverlapRule | None:
    """The release's `OverlapRule`, found by its lines in server_args.py; None where neither
    shape is there (one worker only, or a shape not known: the switch alone is read)."""
    state = file_state(target.file(SERVER_ARGS_FILE))
    return _overlap_rule(*state) if state else None


@functools.lru_cache(maxsize=8)
def _overlap_rule(path: str, _mtime: int, _size: int) -> OverlapRule | None:
    """`overlap_rule` of one file version (asked once per backend and phase: read once)."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return None
    env = [i + 1 for i, t in enumerate(lines) if _ENV_TEST.search(t)]
    for i, text in enumerate(lines):
        if _V1_FALLBACK.search(text):
            return OverlapRule("fallback", i + 1, next((n for n in env if n > i + 1), None))
        if _V2_RAISES.search(text):
            before = [n for n in env if n <= i + 1]
            return OverlapRule("forced", i, before[-1] if before else None)  # the raise line
    return None


def select_worker(target: Target, environ: dict[str, str] | None = None,
                  server_args: dict | None = None, topk: int | None = None,
                  overlap_off: bool | None = None) -> tuple[str, str | None]:
    """Which EAGLE worker the release runs ("v1" | "v2") and, where it has both, why.

    Both workers (up to 0.5.12.post1): spec_info.py takes the v2 worker when the overlap
    scheduler is on (`enable_overlap = not server_args.disable_overlap_schedule`), and
    server_args turns it off when `SGLANG_ENABLE_SPEC_V2` reads false (EnvBool; default False
    in 0.5.9-0.5.10, True in 0.5.11-0.5.12.post1). A server's resolved
    `disable_overlap_schedule` decides; else `environ` (None: the release's default).
    """
    imports, overlap_line = _worker_imports(target)
    has_v1 = V1_MODULE in imports or (not imports and target.file(V1_FILE).is_file())
    has_v2 = V2_MODULE in imports or (not imports and target.file(V2_FILE).is_file())
    if not (has_v1 and has_v2):
        return ("v1" if has_v1 else "v2"), None
    where = f"{target.relpath(target.file(SPEC_INFO_FILE))}:{overlap_line or imports[V2_MODULE]}"
    if server_args and isinstance(server_args.get("disable_overlap_schedule"), bool):
        off = server_args["disable_overlap_schedule"]
        return ("v1" if off else "v2"), (
            f"the server runs with disable_overlap_schedule={off} -> "
            f"{'v1 eagle_worker.py' if off else 'v2 eagle_worker_v2.py'} ({where})")
    d = spec_v2_env_default(target)
    default = True if d is None else d[0]
    value = (environ or {}).get(SPEC_V2_ENV) if environ is not None else None
    on = env_bool(value, default)
    env_where = (f"{target.relpath(target.file(ENVIRON_FILE))}:{d[1]}" if d else "no default found")
    shown = f"{SPEC_V2_ENV}={value!r}" if value is not None else f"{SPEC_V2_ENV} unset"
    why = f"{shown} (EnvBool({default}), {env_where})"
    rule = overlap_rule(target)
    if rule is not None and rule.shape == "fallback" and on:
        sa = f"{target.relpath(target.file(SERVER_ARGS_FILE))}:{rule.topk_line}"
        if topk is not None and topk > 1:
            on, why = False, f"--speculative-eagle-topk {topk} > 1 turns the overlap scheduler off ({sa})"
        elif overlap_off:
            on, why = False, f"--disable-overlap-schedule, {why}"
    elif rule is not None and rule.shape == "forced" and overlap_off is not None:
        why += (f"; --{'disable-' if overlap_off else ''}overlap-schedule is overwritten by it "
                f"({target.relpath(target.file(SERVER_ARGS_FILE))}:{rule.env_line or rule.topk_line})")
    return ("v2" if on else "v1"), (
        f"{why} -> {'v2 eagle_worker_v2.py' if on else 'v1 eagle_worker.py'} ({where})")


def start_refusal(target: Target, worker: str, topk: int | None) -> tuple[str, int] | None:
    """(why, server_args line) where the release refuses to start this worker with this topk:
    0.5.9's v2 worker with topk > 1 (`raise ValueError("Spec v2 currently only supports
    topk = 1 ...")`, server_args.py:2380)."""
    rule = overlap_rule(target) if worker == "v2" and topk is not None and topk > 1 else None
    if rule is None or rule.shape != "forced":
        return None
    sa = target.relpath(target.file(SERVER_ARGS_FILE))
    return (f"the v2 worker ({SPEC_V2_ENV} on) raises ValueError for --speculative-eagle-topk "
            f"{topk} > 1 at start ({sa}:{rule.topk_line})", rule.topk_line)


def read_gate(target: Target, worker: str = "default", environ: dict[str, str] | None = None,
              server_args: dict | None = None, topk: int | None = None,
              overlap_off: bool | None = None) -> GateInfo:
    """The gate of the worker the release runs (`worker="v2"|"v1"` to choose).

    `environ`/`server_args` pick the worker on releases with both (see `select_worker`);
    None reads the release's defaults, so the result does not depend on this process.
    """
    selection = None
    if worker == "default":
        worker, selection = select_worker(target, environ, server_args, topk, overlap_off)
    rel = V2_FILE if worker == "v2" else V1_FILE
    path = target.file(rel)
    def read() -> GateInfo:  # 11 ms a read; every verdict asks
        parse_file(path)  # recorded even when missing: a file that appears is a change
        return _read_worker_gate(target, path, worker)

    info = replace(kept(_GATES, (str(target.root), str(path), worker), read))
    info.selection = selection
    if selection is not None and not server_args:
        info.start_refused = start_refusal(target, worker, topk)
    info.spec_v2_default = spec_v2_is_default(target)
    info.multi_layer = _read_multi_layer(target)
    return info


_GATES: dict = {}  # source.kept's


def _read_worker_gate(target: Target, path: Path, worker: str) -> GateInfo:
    relfile = target.relpath(path)
    broken = parse_problem(path)
    if broken is not None:
        what, line = broken
        return GateInfo(False, f"{relfile} is {what}" if what in ("missing", "empty")
                        else f"{relfile} {what}", file=relfile, line=line, worker=worker,
                        broken=what)
    tree = parse_file(path)
    if tree is None:
        return GateInfo(False, f"{relfile} does not parse", file=relfile, worker=worker,
                        broken="does not parse")
    site = _find_capture_site(tree)
    if site is None:
        return GateInfo(False, f"no method in {relfile} sets self.{RUNNER_ATTR} under an `if` "
                               f"testing self.{EXTEND_ATTR}", file=relfile, worker=worker)
    cls, method, capture_if = site
    info = GateInfo(True, file=relfile, worker=worker, worker_class=cls.name, method=method.name,
                    line=capture_if.lineno, capture_condition=ast.unparse(capture_if.test))
    info.kill_switch_env = _kill_switch(method)
    info.graphs_disabled_check = _graphs_disabled(method)
    scope = _Scope(target, tree, cls, method, relfile)

    cap = _capability_call(method)
    if cap is not None:  # the backend decides (PR #36324): no allow-list to read
        info.capability_attr, info.line = cap
        info.capability_method = CAPABILITY_METHOD
        info.hip_policy = info.cuda_policy = "capability"
        return info
    hip_assign = _var_assignment(method, HIP_VAR) or _hip_var_by_shape(method)
    if hip_assign is not None:
        name, value, lineno = hip_assign
        info.variable, info.line = name, lineno
        info.hip_checks = scope.checks(value)
        info.hip_policy = "allowlist"
        if scope.unresolved:
            return _unrecognised(info, "not recognised: " + "; ".join(scope.unresolved))
        if not info.hip_checks:
            return _unrecognised(info, f"{name} (line {lineno}) holds no isinstance(self.<backend>"
                                       f", Class) check: {ast.unparse(value)[:120]}")
        if not _name_loaded(method, name):
            return _unrecognised(info, f"{name} is assigned but never used in {method.name}")
    else:
        info.hip_policy = _inline_policy(capture_if.test, "hip")
    cuda_assign = _var_assignment(method, CUDA_VAR)
    cuda_scope = _Scope(target, tree, cls, method, relfile)
    if cuda_assign is not None:
        info.cuda_checks = cuda_scope.checks(cuda_assign[1])
        info.cuda_policy = "allowlist" if info.cuda_checks else "never"
    else:
        info.cuda_policy = _inline_policy(capture_if.test, "cuda")
        if info.cuda_policy == "allowlist":
            info.cuda_checks = cuda_scope.checks(capture_if.test, follow=False)
    info.cuda_unresolved = list(cuda_scope.unresolved)
    if info.cuda_policy == "allowlist":
        info.cuda_line = min(cuda_scope.tested_at, default=None) or (
            cuda_assign[2] if cuda_assign is not None else None)
    if info.hip_policy == "unknown":
        return _unrecognised(info, f"the capture condition names no HIP rule: "
                                   f"{info.capture_condition[:160]}")
    return info


CAPABILITY_METHOD = "supports_draft_extend_cuda_graph"


def _capability_call(method: ast.FunctionDef) -> tuple[str, int] | None:
    """`self.<attr>.supports_draft_extend_cuda_graph()` in the capture method: (attr, line)."""
    for node in walk_all(method):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == CAPABILITY_METHOD
                and isinstance(node.func.value, ast.Attribute)
                and isinstance(node.func.value.value, ast.Name)
                and node.func.value.value.id == "self"):
            return node.func.value.attr, node.lineno
    return None


def _unrecognised(info: GateInfo, problem: str) -> GateInfo:
    info.recognised = False
    info.problem = problem
    return info


def _find_capture_site(tree: ast.Module):
    """(class, method, if) where `self.cuda_graph_runner_for_draft_extend = <runner>` is set
    under an `if` whose test reads `self.draft_extend_attn_backend`."""
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for method in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            for node in walk_all(method):
                if not isinstance(node, ast.If) or not _reads_self_attr(node.test, EXTEND_ATTR):
                    continue
                for stmt in walk_all(node):
                    if (isinstance(stmt, ast.Assign) and _assigns_self_attr(stmt, RUNNER_ATTR)
                            and not (isinstance(stmt.value, ast.Constant)
                                     and stmt.value.value is None)):
                        return cls, method, node
    return None


def _reads_self_attr(expr: ast.AST, attr: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == attr
               and isinstance(n.value, ast.Name) and n.value.id == "self"
               for n in walk_all(expr))


def _assigns_self_attr(stmt: ast.Assign, attr: str) -> bool:
    return any(isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
               and t.value.id == "self" for t in stmt.targets)


def _var_assignment(method: ast.FunctionDef, pattern: re.Pattern):
    """The last non-constant assignment to a name matching `pattern`: (name, value, line)."""
    found = None
    for node in walk_all(method):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t = node.targets[0]
            if isinstance(t, ast.Name) and pattern.match(t.id):
                if isinstance(node.value, ast.Constant):
                    found = found or (t.id, node.value, node.lineno)
                elif found is None or isinstance(found[1], ast.Constant) \
                        or node.lineno > found[2]:
                    found = (t.id, node.value, node.lineno)
    return found


def _hip_var_by_shape(method: ast.FunctionDef):
    """The HIP gate under another name: a variable assigned a non-constant value inside an
    `if _is_hip:` block (or from an expression testing `_is_hip`) and read later in the method:
    (name, value, line) of its last such assignment."""
    found = None
    for node in walk_all(method):
        if isinstance(node, ast.If) and platform_truth(node.test, "hip") is True \
                and platform_truth(node.test, "cuda") is False:
            for stmt in (n for st in node.body for n in walk_all(st)):
                if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                        and isinstance(stmt.targets[0], ast.Name)
                        and not isinstance(stmt.value, ast.Constant)
                        and not isinstance(stmt.value, (ast.List, ast.Tuple, ast.Set))
                        and _name_loaded(method, stmt.targets[0].id)):
                    found = (stmt.targets[0].id, stmt.value, stmt.lineno)
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.BoolOp)
              and isinstance(node.value.op, ast.And)
              and any(platform_truth(v, "hip") is True and platform_truth(v, "cuda") is False
                      for v in node.value.values)
              and _name_loaded(method, node.targets[0].id)):
            found = (node.targets[0].id, node.value, node.lineno)
    return found


def _name_loaded(method: ast.FunctionDef, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
               for n in walk_all(method))


def _list_vars(method: ast.FunctionDef) -> dict[str, list[str]]:
    """`graph_supported_backend_types = [A, B]` plus its `.append(C)` calls → {name: [A, B, C]}."""
    out: dict[str, list[str]] = {}
    for node in walk_all(method):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, (ast.List, ast.Tuple))):
            out[node.targets[0].id] = [e.id for e in node.value.elts if isinstance(e, ast.Name)]
    for node in walk_all(method):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("append", "extend") and isinstance(node.func.value, ast.Name)
                and node.func.value.id in out):
            for a in node.args:
                if isinstance(a, ast.Name):
                    out[node.func.value.id].append(a.id)
                elif isinstance(a, (ast.List, ast.Tuple)):
                    out[node.func.value.id] += [e.id for e in a.elts if isinstance(e, ast.Name)]
    return out


def _class_names(expr: ast.AST, lists: dict[str, list[str]]) -> list[str]:
    if isinstance(expr, ast.Name):
        return list(lists.get(expr.id, [expr.id]))
    if isinstance(expr, (ast.Tuple, ast.List)):
        return [n for e in expr.elts for n in _class_names(e, lists)]
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) \
            and expr.func.id in ("tuple", "list") and expr.args:
        return _class_names(expr.args[0], lists)
    if isinstance(expr, ast.Attribute):
        return [expr.attr]
    return []


def _isinstance_checks(expr: ast.AST, lists: dict[str, list[str]],
                       scope: ast.FunctionDef | None = None, _seen: set | None = None
                       ) -> list[Check]:
    """The isinstance(self.x, C) checks in `expr`, following names assigned in `scope`
    (0.5.15's `graph_supported_backend = isinstance(...)`)."""
    out: list[Check] = []
    seen = _seen if _seen is not None else set()
    if scope is not None:
        for node in walk_all(expr):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                    and node.id not in seen and node.id not in lists:
                seen.add(node.id)
                for a in walk_all(scope):
                    if (isinstance(a, ast.Assign) and len(a.targets) == 1
                            and isinstance(a.targets[0], ast.Name) and a.targets[0].id == node.id
                            and not isinstance(a.value, ast.Constant)):
                        out += [c for c in _isinstance_checks(a.value, lists, scope, seen)
                                if c not in out]
    for node in walk_all(expr):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance" and len(node.args) == 2
                and isinstance(node.args[0], ast.Attribute)
                and isinstance(node.args[0].value, ast.Name) and node.args[0].value.id == "self"):
            for cls in _class_names(node.args[1], lists):
                c = Check(node.args[0].attr, cls)
                if c not in out:
                    out.append(c)
    return out


_BUILTINS = frozenset({"isinstance", "type", "tuple", "list", "set", "frozenset", "getattr",
                       "hasattr", "len", "any", "all", "bool"})


_MODINFO: dict[int, tuple[ast.Module, tuple]] = {}


class _Scope:
    """Resolves a gate expression to `Check`s: names bound in the method (class lists, locals
    holding `self.<attr>`), the helper methods and functions it calls (parameters bound to the
    arguments), module-level constants (`ALLOWED = (A, B)`, `X = A`) and imports (`from m
    import Y as Z`, followed into m). What it cannot follow is added to `unresolved` with
    file:line, and the gate is then "not recognised", never guessed."""

    def __init__(self, target: Target, tree: ast.Module, cls: ast.ClassDef,
                 method: ast.FunctionDef, rel: str) -> None:
        self.target, self.cls, self.method = target, cls, method
        self.unresolved: list[str] = []
        self.tested_at: list[int] = []  # lines of the method's own isinstance tests
        dotted = rel[:-3].replace("/", ".") if rel.endswith(".py") else ""
        self._home = self._modinfo_of(tree, rel, dotted)
        self._mods: dict[str, tuple | None] = {}

    # -- modules ------------------------------------------------------------------------
    @staticmethod
    def _modinfo_of(tree: ast.Module, rel: str, dotted: str) -> tuple:
        hit = _MODINFO.get(id(tree))
        if hit is not None and hit[0] is tree:
            return hit[1]
        info = _Scope._build_modinfo(tree, rel, dotted)
        _MODINFO[id(tree)] = (tree, info)
        return info

    @staticmethod
    def _build_modinfo(tree: ast.Module, rel: str, dotted: str) -> tuple:
        assigns: dict[str, ast.AST] = {}
        classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        for n in tree.body:
            if isinstance(n, ast.Assign) and len(n.targets) == 1 \
                    and isinstance(n.targets[0], ast.Name):
                assigns[n.targets[0].id] = n.value
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value:
                assigns[n.target.id] = n.value
        imports: dict[str, tuple[str, str]] = {}
        pkg = dotted.rsplit(".", 1)[0] if dotted else ""
        for n in walk_all(tree):
            if isinstance(n, ast.ImportFrom):
                mod = n.module or ""
                if n.level:
                    base = pkg.split(".")
                    base = base[:len(base) - (n.level - 1)] if n.level > 1 else base
                    mod = ".".join([*base, mod] if mod else base)
                for a in n.names:
                    imports.setdefault(a.asname or a.name, (mod, a.name))
        return rel, assigns, classes, funcs, imports

    def _path(self, dotted: str) -> Path | None:
        parts = dotted.split(".")
        if parts[0] != "sglang":
            return None
        for path in (self.target.root.joinpath(*parts[:-1], parts[-1] + ".py"),
                     self.target.root.joinpath(*parts, "__init__.py")):
            if path.is_file():
                return path
        return None

    def _module(self, dotted: str) -> tuple | None:
        if dotted not in self._mods:
            self._mods[dotted] = None
            path = self._path(dotted)
            tree = parse_file(path) if path is not None else None
            if tree is not None:
                self._mods[dotted] = self._modinfo_of(tree, self.target.relpath(path), dotted)
        return self._mods[dotted]

    def _defines_class(self, dotted: str, name: str) -> bool:
        """A top-level `class name` in the module, by its text (no parse of a big backend
        module just to learn that an imported name is the class it says)."""
        path = self._path(dotted)
        try:
            text = path.read_text(encoding="utf-8", errors="replace") if path else ""
        except OSError:
            return False
        return re.search(rf"^class {re.escape(name)}\b", text, re.M) is not None

    # -- checks ---------------------------------------------------------------------------
    def checks(self, expr: ast.AST, follow: bool = True) -> list[Check]:
        out: list[Check] = []
        self._walk(expr, self.method, {}, out, set(), follow, 0)
        return out

    def _where(self, node: ast.AST) -> str:
        return f"{self._home[0]}:{getattr(node, 'lineno', '?')}"

    def _walk(self, expr: ast.AST, func: ast.FunctionDef, subj: dict[str, str], out: list,
              seen: set, follow: bool, depth: int) -> None:
        for node in walk_all(expr):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "isinstance" and len(node.args) == 2:
                if func is self.method:
                    self.tested_at.append(node.lineno)
                attr = self._subject(node.args[0], func, subj)
                if attr is None:
                    self.unresolved.append(f"isinstance subject {ast.unparse(node.args[0])} "
                                           f"({self._where(node)}) is not a worker attribute")
                    continue
                for c in self._classes(node.args[1], func, self._home, 0):
                    if Check(attr, c) not in out:
                        out.append(Check(attr, c))
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 \
                    and isinstance(node.left, ast.Call) and isinstance(node.left.func, ast.Name) \
                    and node.left.func.id == "type" and len(node.left.args) == 1 \
                    and isinstance(node.ops[0], (ast.Is, ast.Eq, ast.In)):
                attr = self._subject(node.left.args[0], func, subj)
                if attr is None:
                    self.unresolved.append(f"type() subject {ast.unparse(node.left.args[0])} "
                                           f"({self._where(node)}) is not a worker attribute")
                    continue
                for c in self._classes(node.comparators[0], func, self._home, 0):
                    if Check(attr, c, True) not in out:
                        out.append(Check(attr, c, True))
            elif isinstance(node, ast.Call) and depth < 4:
                helper, bound_self = self._helper(node, func)
                if helper is None:
                    continue
                params = [a.arg for a in helper.args.args]
                if bound_self:
                    params = params[1:]
                sub = {p: a for p, a in zip(params, node.args)}
                sub.update({k.arg: k.value for k in node.keywords if k.arg})
                hsubj = {}
                selfish = set()
                for p, a in sub.items():
                    attr = self._subject(a, func, subj)
                    if attr is not None:
                        hsubj[p] = attr
                    elif isinstance(a, ast.Name) and (a.id == "self" or subj.get(a.id) == "self"):
                        selfish.add(p)
                hsubj.update({p: "self" for p in selfish})
                for r in (n for n in walk_all(helper) if isinstance(n, ast.Return) and n.value):
                    self._walk(r.value, helper, hsubj, out, set(), True, depth + 1)
            elif follow and isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                    and node.id not in seen:
                seen.add(node.id)
                for a in walk_all(func):
                    if (isinstance(a, ast.Assign) and len(a.targets) == 1
                            and isinstance(a.targets[0], ast.Name) and a.targets[0].id == node.id
                            and not isinstance(a.value, (ast.Constant, ast.List, ast.Tuple,
                                                         ast.Set, ast.Attribute))):
                        self._walk(a.value, func, subj, out, seen, follow, depth)

    def _helper(self, call: ast.Call, func: ast.FunctionDef):
        """A method of the worker class called on self, or a function of the module."""
        f = call.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            m = _method(self.cls, f.attr)
            return (m, True) if m is not None else (None, False)
        if isinstance(f, ast.Name) and f.id not in _BUILTINS and f.id in self._home[3]:
            return self._home[3][f.id], False
        return None, False

    def _subject(self, node: ast.AST, func: ast.FunctionDef, subj: dict[str, str],
                 depth: int = 0) -> str | None:
        """The worker attribute an expression reads: `self.x`, a parameter bound to it, or a
        local `b = self.x`."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                node.value.id == "self" or subj.get(node.value.id) == "self"):
            return node.attr
        if isinstance(node, ast.Name) and depth < 4:
            if node.id in subj and subj[node.id] != "self":
                return subj[node.id]
            for a in walk_all(func):
                if (isinstance(a, ast.Assign) and len(a.targets) == 1
                        and isinstance(a.targets[0], ast.Name) and a.targets[0].id == node.id):
                    return self._subject(a.value, func, subj, depth + 1)
        return None

    def _classes(self, node: ast.AST, func: ast.FunctionDef | None, mod: tuple,
                 depth: int) -> list[str]:
        """The class names an isinstance/type target binds."""
        if depth > 8:
            self.unresolved.append(f"{ast.unparse(node)} ({mod[0]}) nests too deep")
            return []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [c for e in node.elts for c in self._classes(e, func, mod, depth + 1)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.BitOr)):
            return (self._classes(node.left, func, mod, depth + 1)
                    + self._classes(node.right, func, mod, depth + 1))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("tuple", "list", "set", "frozenset") and not node.keywords:
            return self._classes(node.args[0], func, mod, depth + 1) if node.args else []
        if isinstance(node, ast.Attribute):
            return [node.attr]  # module.Class
        if isinstance(node, ast.Name):
            return self._name(node, func, mod, depth)
        self.unresolved.append(f"{ast.unparse(node)} ({mod[0]}:{getattr(node, 'lineno', '?')}) "
                               "is not a class, a tuple of classes or a name of one")
        return []

    def _name(self, node: ast.Name, func: ast.FunctionDef | None, mod: tuple,
              depth: int) -> list[str]:
        n = node.id
        rel, assigns, classes, _funcs, imports = mod
        if func is not None:
            local = [a for a in walk_all(func) if isinstance(a, ast.Assign)
                     and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
                     and a.targets[0].id == n]
            if local:
                out = self._classes(local[-1].value, func, mod, depth + 1)
                for c in walk_all(func):  # `names.append(C)` / `.extend([...])` / `.add(C)`
                    if (isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                            and c.func.attr in ("append", "extend", "add")
                            and isinstance(c.func.value, ast.Name) and c.func.value.id == n):
                        for a in c.args:
                            out += self._classes(a, func, mod, depth + 1)
                return out
        if n in classes:
            return [n]
        if n in assigns:
            return self._classes(assigns[n], None, mod, depth + 1)
        if n in imports:
            dotted, orig = imports[n]
            if self._defines_class(dotted, orig):
                return [orig]
            other = self._module(dotted)
            if other is None:
                sub = self._module(f"{dotted}.{orig}")
                if sub is not None:  # `from pkg import module`: not a class
                    self.unresolved.append(f"{n} ({rel}:{node.lineno}) is a module")
                    return []
                self.unresolved.append(f"{n} ({rel}:{node.lineno}) is imported from {dotted}, "
                                       "which is not in this tree")
                return []
            return self._name(ast.Name(id=orig, ctx=ast.Load(), lineno=node.lineno), None,
                              other, depth + 1)
        self.unresolved.append(f"{n} ({rel}:{node.lineno}) is bound to nothing the analysis can "
                               "follow")
        return []


def _kill_switch(method: ast.FunctionDef) -> str | None:
    for node in walk_all(method):
        text = node.attr if isinstance(node, ast.Attribute) else (
            node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None)
        if text and KILL_SWITCH.fullmatch(text):
            return text
    return None


def _graphs_disabled(method: ast.FunctionDef) -> str | None:
    """The early `return` taken when CUDA graphs are disabled (disable_cuda_graph / DISABLED)."""
    for node in method.body:
        if isinstance(node, ast.If) and any(isinstance(s, ast.Return) for s in node.body):
            src = ast.unparse(node.test)
            if "disable_cuda_graph" in src or "DISABLED" in src:
                return src
    return None


def _inline_policy(test: ast.AST, platform: str) -> str:
    """Capture conditions without a gate variable (0.5.9): which rule holds for `platform`.

    `... and not _is_npu` → "any"; `... and (_is_npu or (_is_cuda and isinstance(...)))` →
    "allowlist" for cuda, "never" for hip.
    """
    flag = f"_is_{platform}"
    names = {n.id for n in walk_all(test) if isinstance(n, ast.Name)}
    has_isinstance = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                         and n.func.id == "isinstance" for n in walk_all(test))
    # Evaluate the condition's platform part with every non-platform leaf taken as true.
    truth = _eval_with(test, platform)
    if truth is True:
        return "any"
    if truth is False:
        return "never"
    if flag in names and has_isinstance:
        return "allowlist"
    return "unknown" if not any(n.startswith("_is_") for n in names) else "never"


def _eval_with(expr: ast.AST, platform: str) -> bool | None:
    """Platform truth of a condition, treating `self.x` reads as true and isinstance as unknown."""

    def leaf(e: ast.AST) -> bool | None:
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
            return True
        return _platform_leaf(e, platform)

    return _three_valued(expr, leaf)


def _read_multi_layer(target: Target) -> MultiLayerGate | None:
    path = target.file(MULTI_LAYER_FILE)
    tree = parse_pruned(path, (RUNNER_ATTR,))  # only a method that sets the runner counts
    if tree is None:
        return None
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for method in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            sets = [s for s in walk_all(method) if isinstance(s, ast.Assign)
                    and _assigns_self_attr(s, RUNNER_ATTR)
                    and not (isinstance(s.value, ast.Constant) and s.value.value is None)]
            if not sets:
                continue
            checks = _isinstance_checks(method, _list_vars(method))
            return MultiLayerGate(target.relpath(path), sets[0].lineno, method.name,
                                  has_allowlist=bool(checks), kill_switch_env=_kill_switch(method))
    return None


# --------------------------------------------------------------------------- the verdict


class Verdict(tuple):
    """`(mode, reason)`, a pair, plus `.cause`: a stable code for hints and tests.

    mode: graph | eager | unsupported | unknown. cause: for graph "allowlist" | "any_device" |
    "multi_layer"; for eager "not_allowlisted" | "num_steps" | "kill_switch" |
    "graphs_disabled" | "no_branch" | "no_draft_extend_backend"; for unknown "class_depends" (the
    class the factory builds is up to a test no input decides) | "capability_depends" | "unknown";
    else "unsupported".
    """

    def __new__(cls, mode: str, reason: str, cause: str = "") -> Verdict:
        self = super().__new__(cls, (mode, reason))
        self.cause = cause
        return self

    @property
    def mode(self) -> str:
        return self[0]

    @property
    def reason(self) -> str:
        return self[1]

    def __repr__(self) -> str:
        return f"Verdict(mode={self.mode!r}, reason={self.reason!r}, cause={self.cause!r})"


def verdict(gate: GateInfo, info: BackendInfo | None, platform: str, num_steps: int | None,
            kill_switch_set: bool = False, graphs_disabled: bool = False,
            multi_layer: bool = False, release: str | None = None) -> Verdict:
    """Graph or eager for one backend and configuration. Pure: reads only its arguments.

    `num_steps=None` means unknown: checks on the multi-step decode backend are then taken as
    passing, and the reason says they need --speculative-num-steps >= 2. A name the release
    rewrites (`info.alias_of`) is judged as the name it becomes, and the reason says so.
    """
    v = _verdict(gate, info, platform, num_steps, kill_switch_set, graphs_disabled,
                 multi_layer, release)
    if info is not None and info.alias_of is not None and v.cause not in ("unknown",):
        new, where = info.alias_of
        return Verdict(v.mode, f"{info.name!r} is rewritten to {new!r} ({where}); {v.reason}",
                       v.cause)
    return v


def _verdict(gate: GateInfo, info: BackendInfo | None, platform: str, num_steps: int | None,
             kill_switch_set: bool, graphs_disabled: bool, multi_layer: bool,
             release: str | None) -> Verdict:
    rel = f"sglang {release}" if release else "this release"
    if not gate.recognised:
        return Verdict(UNKNOWN, f"gate not recognised: {gate.problem}", "unknown")
    if info is None or (not info.in_registry and not info.has_draft_factory_entry):
        return Verdict(UNSUPPORTED, f"backend unknown to {rel}", "unsupported")
    if not info.has_draft_factory_entry:
        return Verdict(UNSUPPORTED, f"{rel} has no draft backend for {info.name!r} "
                                    "(EAGLE refuses it at start)", "unsupported")
    if graphs_disabled:
        return Verdict(EAGER, "CUDA graphs disabled (--disable-cuda-graph)", "graphs_disabled")
    if info.draft_extend_none:
        return Verdict(EAGER, f"{rel}'s draft-extend factory builds no backend for {info.name!r} "
                              f"on {platform.upper()} (returns None, {info.draft_extend_none}): "
                              "nothing is captured", "no_draft_extend_backend")
    if multi_layer and gate.multi_layer is not None:
        ml = gate.multi_layer
        if kill_switch_set and ml.kill_switch_env:
            return Verdict(EAGER, f"kill switch {ml.kill_switch_env} set", "kill_switch")
        if not ml.has_allowlist:
            return Verdict(GRAPH, "multi-layer worker: captures draft-extend with no backend "
                                  f"allow-list ({ml.method})", "multi_layer")
    if kill_switch_set and gate.kill_switch_env:
        return Verdict(EAGER, f"kill switch {gate.kill_switch_env} set", "kill_switch")
    if platform != "hip" and gate.cuda_unresolved:
        return Verdict(UNKNOWN, "CUDA allow-list not recognised: "
                                + "; ".join(gate.cuda_unresolved), "unknown")
    policy = gate.hip_policy if platform == "hip" else gate.cuda_policy
    checks = gate.hip_checks if platform == "hip" else gate.cuda_checks
    where = f"{gate.worker_class}.{gate.method}"
    if policy == "capability":
        return _capability_verdict(gate, info, where)
    if policy == "any":
        return Verdict(GRAPH, f"{where} captures draft-extend on every non-NPU device",
                       "any_device")
    if policy == "never":
        return Verdict(EAGER, f"{where} has no {platform.upper()} capture branch", "no_branch")
    split = _class_split(checks, info, platform, where)
    if split is not None:
        return split
    ext = set(info.draft_extend_classes)
    dec = set(info.decode_classes)
    if not any((c.attr == EXTEND_ATTR and c.cls in ext) or (c.attr == DECODE_ATTR and c.cls in dec)
               for c in checks):  # no direct match: an allow-listed base class still admits it
        ext_anc, dec_anc = set(info.draft_extend_ancestors), set(info.decode_ancestors)
        checks = [c for c in checks if not c.exact or c.cls in (ext if c.attr == EXTEND_ATTR
                                                                 else dec)]
        ext |= ext_anc
        dec |= dec_anc
    steps_short = (num_steps is not None and info.decode_min_steps is not None
                   and num_steps < info.decode_min_steps)
    decode_blocked = None
    for c in checks:
        if c.attr == EXTEND_ATTR and c.cls in ext:
            return Verdict(GRAPH, f"on the {platform.upper()} allow-list: {c.text()}", "allowlist")
        if c.attr == DECODE_ATTR and c.cls in dec:
            if steps_short:
                decode_blocked = c
                continue
            extra = ("" if num_steps is not None or info.decode_min_steps is None
                     else f" (needs --speculative-num-steps >= {info.decode_min_steps})")
            return Verdict(GRAPH, f"on the {platform.upper()} allow-list: {c.text()}{extra}",
                           "allowlist")
    if decode_blocked is not None:
        return Verdict(EAGER, f"{decode_blocked.cls} is tested on the multi-step decode backend,"
                              f" which --speculative-num-steps {num_steps} does not create "
                              f"(needs >= {info.decode_min_steps})", "num_steps")
    listed = gate.hip_checks if platform == "hip" else gate.cuda_checks
    admitted = ", ".join(dict.fromkeys(c.cls for c in listed)) or "nothing"
    built = info.draft_extend_class or "no class found"
    return Verdict(EAGER, f"{built} not on the {platform.upper()} allow-list of {where} "
                          f"(admits {admitted})", "not_allowlisted")


def _class_split(checks: list, info: BackendInfo, platform: str, where: str) -> Verdict | None:
    """More than one class the factory may build, the gate admitting some and not the others
    (0.5.19 `hybrid_linear_attn` on CUDA: TritonAttnBackend on Blackwell, FlashAttentionBackend
    elsewhere, draft_utils.py:241-246, and only Triton on the list): which one runs is up to a
    test no input decides.
    A gate that admits on the multi-step decode backend is not split by the extend class."""
    classes = info.draft_extend_classes
    if len(classes) < 2 or any(c.attr != EXTEND_ATTR for c in checks):
        return None
    anc = info._ancestors or (lambda names: [])

    def admitted(cls: str) -> bool:
        up = set(anc([cls]))
        return any(c.cls == cls or (not c.exact and c.cls in up) for c in checks)

    yes = [c for c in classes if admitted(c)]
    no = [c for c in classes if c not in yes]
    if not yes or not no:
        return None
    tests = [t for t in info.draft_extend_choice if "use_mla_backend" not in t]
    by = (" (MLA or MHA: pass --model)" if len(tests) < len(info.draft_extend_choice) else "")
    if tests:
        words = [f"`{t}`" + (f" ({GPU_GENERATION[n]})" if (n := t.split("(")[0].lstrip("_"))
                             in GPU_GENERATION else "") for t in tests]
        by += f"; the factory ({info.draft_extend_factory}) picks by {', '.join(words)}"
    return Verdict(UNKNOWN, f"depends: {' | '.join(yes)} on the {platform.upper()} allow-list "
                            f"of {where}, {' | '.join(no)} not{by}", "class_depends")


def _capability_verdict(gate: GateInfo, info: BackendInfo, where: str) -> Verdict:
    """The backend class answers (PR #36324): True graph, False eager, an expression depends."""
    rows = info.capability(gate.capability_method or CAPABILITY_METHOD,
                           gate.capability_attr or EXTEND_ATTR)
    if not rows:
        return Verdict(UNKNOWN, f"{where} asks the backend ({gate.capability_method}) but no "
                                f"class was found for {info.name!r}", "unknown")
    vals = {r[1] for r in rows}
    said = "; ".join(f"{r[2]} ({r[3]})" if r[3] else r[2] for r in rows)
    if vals == {True}:
        return Verdict(GRAPH, f"{where} asks the backend: {said}", "capability")
    if vals == {False}:
        return Verdict(EAGER, f"{where} asks the backend: {said}", "not_capable")
    return Verdict(UNKNOWN, f"depends: {where} asks the backend: {said}", "capability_depends")
