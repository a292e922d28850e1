"""Batch fields a target-verify step leaves None, read from the release's `ForwardBatch.init_new`
(and, below, the fields an IDLE step leaves None and the prefix lengths of a draft-extend step).

Why: a builder that tests `forward_batch.extend_seq_lens is not None` (or a local bound once to
it) does not run that branch on a target-verify step. `init_new` sets `extend_seq_lens` and
`extend_prefix_lens` only in the `else` of `if ret.forward_mode.is_decode() or
ret.forward_mode.is_target_verify():` (0.5.17 forward_batch_info.py:902-920, 0.5.21
:1103-1122, 0.5.23 :1226-1245), and the dataclass defaults them to None (0.5.23 :666).

The other writers do not set them on a target-verify batch (0.5.23):
- `prepare_mlp_sync_batch` relabels the batch EXTEND before it fabricates them (:1873-1885,
  :1926-1927), and pads or slices them only when set (:2079-2083, :2213);
- the prefill graph runner's view (prefill_cuda_graph_runner.py:1289) never serves a
  target-verify batch;
- two-batch overlap rewrites them on the prefill half of a split only
  (batch_overlap/two_batch_overlap.py:648-663);
- the decode graph runner's replay view has no such field (decode_cuda_graph_runner.py:170-245:
  `getattr(view, "extend_seq_lens", None)` reads None).

So QSA's verify-row mapping (0.5.23 qwen_sparse_attn_backend.py:339-350) runs on draft-extend
only. Only the per-step target-verify phase takes the fact: capture batches are the graph
runner's own (base_runner.py:680-699 passes `extend_seq_lens`).
"""

from __future__ import annotations

import ast
import re

from diag.probes.metadata_syncs.census.paths import MODES, cond
from diag.probes.source import Modules, parse_file, parse_pruned

_MODULE = "sglang.srt.model_executor.forward_batch_info"
REL = "srt/model_executor/forward_batch_info.py"  # (Target.file: part of the census's key)
SPEC_UTILS = "sglang.srt.speculative.spec_utils"
EAGLE_UTILS = "sglang.srt.speculative.eagle_utils"
VERIFY_RELS = ("srt/speculative/spec_utils.py", "srt/speculative/eagle_utils.py")  # (key too)
DRAFT_EXTEND_MODULE = "sglang.srt.speculative.eagle_worker_common"
DRAFT_EXTEND_REL = "srt/speculative/eagle_worker_common.py"  # (key too)
# The fields whose other writers (above) were read; `init_new` of the release decides whether
# it still leaves them None on a target-verify batch.
CHECKED = frozenset({"extend_seq_lens", "extend_prefix_lens"})


def none_on_verify(modules: Modules | None) -> frozenset[str]:
    """The fields of ForwardBatch a target-verify step leaves None (kept per target)."""
    if modules is None:
        return frozenset()
    got = getattr(modules, "_diag_none_fields", None)
    if got is None:
        tree = parse_file(modules.path(_MODULE))
        got = _read(tree) if tree is not None else frozenset()
        modules._diag_none_fields = got  # type: ignore[attr-defined]
    return got


def leaves_none(modules: Modules | None, field: str | None) -> bool:
    """Whether a target-verify step leaves `field` None; `init_new` is read only for a field
    whose other writers were read (CHECKED), on the first test that asks; a field the EAGLE
    verify preparation clears on the schedule batch (`cleared_for_verify`) is None too."""
    return (field in CHECKED and field in none_on_verify(modules)) or \
        (field is not None and field in cleared_for_verify(modules))


def cleared_for_verify(modules: Modules | None) -> frozenset[str]:
    """The fields a `prepare_*_for_verify` of speculative/spec_utils.py sets to None on the
    schedule batch (`batch.<f> = None`) where EAGLE's verify preparation calls it (its name
    called in speculative/eagle_utils.py), before the verify ForwardBatch is built from that
    batch. 0.5.19 spec_utils.py:769-795 `prepare_mamba_track_for_verify`, called at
    eagle_utils.py:554: `batch.mamba_track_mask = None` (:793), "so a stale extend-time mask
    [does not trigger] in-forward tracking during TARGET_VERIFY"; its early return (no mamba
    extra buffer, :782) is where the mask is never built on the device at all
    (schedule_batch.py:2733-2748 builds it under the same switch). 0.5.14 :573, 0.5.23 :937."""
    if modules is None:
        return frozenset()
    got = getattr(modules, "_diag_verify_cleared", None)
    if got is None:
        got = frozenset(t.attr for fn in _verify_preparations(modules)
                        for st in ast.walk(fn) if isinstance(st, ast.Assign)
                        and isinstance(st.value, ast.Constant) and st.value.value is None
                        for t in st.targets if isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name) and t.value.id == "batch")
        modules._diag_verify_cleared = got  # type: ignore[attr-defined]
    return got


_PREPARE = re.compile(r"^def (prepare_\w*_for_verify)\(", re.M)
_NEXT_TOP = re.compile(r"^[A-Za-z_@]", re.M)  # the next top-level statement


def _verify_preparations(modules: Modules) -> list[ast.FunctionDef]:
    """The module-level `prepare_*_for_verify` functions of spec_utils.py that eagle_utils.py
    calls, each parsed alone (a cold diagnose reads them; the rest of the module is not needed)."""
    try:
        text = modules.path(SPEC_UTILS).read_text(encoding="utf-8", errors="replace")
        callers = modules.path(EAGLE_UTILS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for m in _PREPARE.finditer(text):
        if f"{m.group(1)}(" not in callers:
            continue
        out += _top_defs(text, m)
    return out


def _top_defs(text: str, m: re.Match) -> list[ast.FunctionDef]:
    """The top-level function whose `def` `m` found, parsed alone (to the next top-level
    statement); none where that text does not parse."""
    end = _NEXT_TOP.search(text, m.end())
    try:
        tree = ast.parse(text[m.start():end.start() if end else len(text)])
    except SyntaxError:
        return []
    return [f for f in tree.body if isinstance(f, ast.FunctionDef)]


def _read(tree: ast.Module) -> frozenset[str]:
    cls = next((c for c in tree.body if isinstance(c, ast.ClassDef)
                and c.name == "ForwardBatch"), None)
    if cls is None:
        return frozenset()
    defaults_none = {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign)
                     and isinstance(s.target, ast.Name) and isinstance(s.value, ast.Constant)
                     and s.value.value is None}
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef)
                 and f.name == "init_new"), None)
    if init is None:
        return frozenset()
    assigned: dict[str, set[str]] = {}
    _walk(init.body, set(MODES), assigned)
    for n in ast.walk(init):  # the constructor call's keywords set a field in every mode
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
                n.func.id in ("cls", "ForwardBatch"):
            for k in n.keywords:
                if k.arg:
                    assigned.setdefault(k.arg, set()).update(MODES)
    return frozenset(f for f in defaults_none & CHECKED
                     if f in assigned and "target-verify" not in assigned[f])


def _walk(stmts: list[ast.stmt], modes: set[str], assigned: dict[str, set[str]]) -> None:
    """Record, per `ret.<field> = ...`, the modes under which the mode tests around it let it
    run (any other test goes both ways; an early return is not followed: more modes, never
    fewer; nested defs are not `init_new`'s own code)."""
    for st in stmts:
        if isinstance(st, ast.If):
            c = cond(st.test, {})
            _walk(st.body, modes & {m for m, _ in c.true}, assigned)
            _walk(st.orelse, modes & {m for m, _ in c.false}, assigned)
            continue
        targets = st.targets if isinstance(st, ast.Assign) else \
            [st.target] if isinstance(st, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            for x in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and \
                        x.value.id == "ret":
                    assigned.setdefault(x.attr, set()).update(modes)
        if isinstance(st, ast.Try):
            _walk(st.body + [s for h in st.handlers for s in h.body] + st.orelse
                  + st.finalbody, modes, assigned)
        elif isinstance(st, (ast.With, ast.For, ast.While)):
            _walk(st.body + getattr(st, "orelse", []), modes, assigned)


def prefix_on_draft_extend(modules: Modules | None) -> bool:
    """Whether a draft-extend step's `any(forward_batch.extend_prefix_lens_cpu)` never comes
    out false: the EAGLE v2 worker's `prepare_for_draft_extend` (the one builder of an eager
    DRAFT_EXTEND_V2 batch: eagle_worker_v2.py and multi_layer_eagle_worker_v2.py call it; the
    draft-extend graph runners' own batches are capture-time ones) sets `batch.prefix_lens`
    only from the committed `seq_lens`. On the host path that is a list of the committed
    lengths (0.5.23 eagle_worker_common.py:188-190, 0.5.19 :163-165; `front_offset` is 0 with
    the window widening off, its default, multi_layer_eagle_worker_v2.py:247), which
    ForwardBatch.init_new hands on as `extend_prefix_lens_cpu` (0.5.23
    forward_batch_info.py:1240, 0.5.19 :907); on the GPU-only path the prefix lengths are
    device tensors and the mirror stays None (0.5.19 :909-913, 0.5.23 :1242-1246), where
    `any(None)` raises before a branch on it. So flashinfer MLA's ragged prefill (0.5.23
    flashinfer_mla_backend.py:449-453: `not any(...)`) is never taken on draft-extend.
    Read from the release (kept per target): False where the function or its assignments
    differ (no such fact on the v1 worker's releases)."""
    if modules is None:
        return False
    got = getattr(modules, "_diag_prefix_on_de", None)
    if got is None:
        got = modules._diag_prefix_on_de = _read_prefix(modules)  # type: ignore[attr-defined]
    return got


def _read_prefix(modules: Modules) -> bool:
    try:
        text = modules.path(DRAFT_EXTEND_MODULE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    m = re.search(r"^def prepare_for_draft_extend\(", text, re.M)
    fns = _top_defs(text, m) if m is not None else []
    if not fns:
        return False
    tree = fns[0]
    values = [st.value for st in ast.walk(tree) if isinstance(st, ast.Assign)
              for t in st.targets for x in (t.elts if isinstance(t, ast.Tuple) else [t])
              if isinstance(x, ast.Attribute) and x.attr == "prefix_lens"
              and isinstance(x.value, ast.Name) and x.value.id == "batch"]
    return bool(values) and all("seq_lens" in ast.unparse(v) for v in values) and \
        "DRAFT_EXTEND_V2" in ast.unparse(tree)


# --- fields an IDLE batch leaves None ----------------------------------------------------
SCHEDULE_MODULE = "sglang.srt.managers.schedule_batch"
SCHEDULE_REL = "srt/managers/schedule_batch.py"  # (key too)
IDLE_MAKERS = ("srt/managers", "srt/speculative")  # where `prepare_for_idle()` is called
# The fields whose other writers were read (as CHECKED for target-verify): after the batch is
# made, only the extend and the non-speculative decode preparations set `mamba_track_mask`
# (0.5.19 managers/schedule_batch.py:2739, :3372), filter/merge and the verify preparation
# clear it (:3435, :3501; speculative/spec_utils.py:793), ForwardBatch pads it only where set
# (forward_batch_info.py:1549-1550), and inkling's short-conv backend sets it on its graph path
# only (layers/attention/linear/inkling_sconv_backend.py:443); 0.5.23 the same (:3117, :3344,
# :3892, :3960; spec_utils.py:937; forward_batch_info.py:2053; inkling_sconv_backend.py:477).
CHECKED_IDLE = frozenset({"mamba_track_mask"})
_NAME_BEFORE = re.compile(r"(\w+)\Z")  # the name a call is made on (searched up to the dot)


def none_on_idle(modules: Modules | None) -> frozenset[str]:
    """The ForwardBatch fields an IDLE step leaves None (kept per target).

    Why: an IDLE batch (a DP rank with no request) is made fresh, `ScheduleBatch.init_new([],
    ...)` then `prepare_for_idle()` (0.5.23 managers/scheduler_components/dp_attn.py:811-820,
    speculative/eagle_worker_v2.py:1619-1628; 0.5.19 dp_attn.py:586-595), and `prepare_for_idle`
    is the only writer of `ForwardMode.IDLE` in schedule_batch.py (0.5.23 :3603). A field
    ScheduleBatch defaults to None (0.5.19 :2232 `mamba_track_mask: torch.Tensor = None`) that
    neither `init_new`'s constructor call nor `prepare_for_idle` sets is None on that batch,
    and ForwardBatch.init_new hands it on as it is (0.5.19 forward_batch_info.py:792
    `mamba_track_mask=batch.mamba_track_mask`). So the linear-attention metadata's
    `forward_batch.mamba_track_mask is not None` (0.5.19 hybrid_linear_attn_backend.py:137) is
    false on IDLE. Nothing is decided where a `prepare_for_idle()` runs on a batch not made
    right before by `ScheduleBatch.init_new` (0.5.9 speculative/eagle_worker.py:915 turns a
    live batch IDLE)."""
    if modules is None:
        return frozenset()
    got = getattr(modules, "_diag_none_idle", None)
    if got is None:
        got = modules._diag_none_idle = _read_idle(modules)  # type: ignore[attr-defined]
    return got


def idle_leaves_none(modules: Modules | None, field: str) -> bool:
    """Whether an IDLE step leaves `field` None; read only for a field whose other writers
    were read (CHECKED_IDLE), on the first test that asks."""
    return field in CHECKED_IDLE and field in none_on_idle(modules)


def idle_maker_files(root) -> list:
    """The modules that can call `prepare_for_idle()` (the census's cache key holds them)."""
    return sorted(p for d in IDLE_MAKERS for p in (root / d).rglob("*.py")) if root else []


def fresh_idle_batches(modules: Modules) -> bool:
    """`_fresh_idle_batches`, read once per target (census.kept_lengths asks it too)."""
    got = getattr(modules, "_diag_fresh_idle", None)
    if got is None:
        got = modules._diag_fresh_idle = _fresh_idle_batches(modules)  # type: ignore[attr-defined]
    return got


def _fresh_idle_batches(modules: Modules) -> bool:
    """Every `X.prepare_for_idle()` under IDLE_MAKERS follows `X = ScheduleBatch.init_new(` in
    the same function, and schedule_batch.py sets `ForwardMode.IDLE` in prepare_for_idle only."""
    sched = modules.path(SCHEDULE_MODULE)
    try:
        text = sched.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    sets = [m.start() for m in re.finditer(r"forward_mode = ForwardMode\.IDLE\b", text)]
    idle = re.search(r"^    def prepare_for_idle\(self\)", text, re.M)
    if idle is None or len(sets) != 1 or not idle.start() < sets[0] < (
            (re.compile(r"^    def ", re.M).search(text, idle.end()) or re.search(r"\Z", text))
            .start()):
        return False
    found = False
    for path in idle_maker_files(sched.parents[2]):
        try:
            raw = path.read_bytes()
        except OSError:
            return False
        if b"prepare_for_idle()" not in raw:
            continue
        src = raw.decode("utf-8", errors="replace")
        at = src.find(".prepare_for_idle()")
        while at >= 0:  # (found by text: a regex starting `\w+` backtracks at every name)
            found = True
            name = _NAME_BEFORE.search(src, max(0, at - 80), at)
            start = src.rfind("def ", 0, at)
            if name is None or \
                    f"{name.group(1)} = ScheduleBatch.init_new(" not in src[start:at]:
                return False
            at = src.find(".prepare_for_idle()", at + 1)
    return found


def _read_idle(modules: Modules) -> frozenset[str]:
    if not fresh_idle_batches(modules):
        return frozenset()
    # the methods read, the rest of each module left out (source.parse_pruned)
    sched = _class(parse_pruned(modules.path(SCHEDULE_MODULE), (
        "init_new", "prepare_for_idle", "__post_init__")), "ScheduleBatch")
    fwd = _class(parse_pruned(modules.path(_MODULE), ("init_new",)), "ForwardBatch")
    if sched is None or fwd is None:
        return frozenset()
    methods = {f.name: f for f in sched.body if isinstance(f, ast.FunctionDef)}
    fb_init = next((f for f in fwd.body if isinstance(f, ast.FunctionDef)
                    and f.name == "init_new"), None)
    init, idle, post = (methods.get(n) for n in ("init_new", "prepare_for_idle",
                                                  "__post_init__"))
    if init is None or idle is None or fb_init is None:
        return frozenset()
    none = {s.target.id for s in sched.body if isinstance(s, ast.AnnAssign)
            and isinstance(s.target, ast.Name) and isinstance(s.value, ast.Constant)
            and s.value.value is None}
    made = _keywords(init) | _stores(init, "batch") | _stores(idle, "self") | \
        (_stores(post, "self") if post is not None else set())
    handed = {k.arg for n in ast.walk(fb_init) if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Name) and n.func.id in ("cls", "ForwardBatch")
              for k in n.keywords if k.arg and isinstance(k.value, ast.Attribute)
              and k.value.attr == k.arg and isinstance(k.value.value, ast.Name)
              and k.value.value.id == "batch"}
    return frozenset((none - made) & (handed - _stores(fb_init, "ret")) & CHECKED_IDLE)


def _class(tree: ast.Module | None, name: str) -> ast.ClassDef | None:
    return next((c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == name),
                None) if tree is not None else None


def _keywords(fn: ast.FunctionDef) -> set[str]:
    """The keywords of the `cls(...)` constructor calls in `fn`."""
    return {k.arg for n in ast.walk(fn) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id == "cls" for k in n.keywords if k.arg}


def _stores(fn: ast.FunctionDef, owner: str) -> set[str]:
    """The attributes `fn` assigns on `owner` (`owner.x = ...`, augmented or annotated too)."""
    return {t.attr for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign,
                                                            ast.AnnAssign))
            for t0 in (n.targets if isinstance(n, ast.Assign) else [n.target])
            for t in (t0.elts if isinstance(t0, ast.Tuple) else [t0])
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
            and t.value.id == owner}
