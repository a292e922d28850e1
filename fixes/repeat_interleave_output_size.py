"""Fix `repeat-interleave-output-size`: give `repeat_interleave` its output size from the host.

`torch.repeat_interleave(x, repeats)` with device `repeats` and no `output_size` makes PyTorch
read the total back to the host: two syncs, the host waits for the whole GPU queue. Where the
caller already holds the same total on the host, passing `output_size=` removes both.

Site table (found by shape, never by line): `DeepseekV4HipRadixBackend._attach_unified_kv_prefill_meta`
in `deepseek_v4_backend_hip_radix.py`, called by `init_forward_metadata_prefill`.

- shape "4-arg" (<= 0.5.17): no output size anywhere. The rewrite adds a keyword-only parameter
  `_diag_output_size=None` to the builder, passes it as `output_size=`, and makes the caller pass
  `num_tokens` only when the host proves it equal to the sum of the repeats:
  `extend_seq_lens_cpu` (the host mirror the device `extend_seq_lens` was made from) sums to
  `num_tokens`. By default only on the draft-extend path (`need_compress=False`), as upstream
  did in #29202: the same change on the target-extend path caused a GPU memory access fault.
- shape "need_compress" (0.5.18): the draft-extend path already passes `output_size` ->
  `upstream`; the target-extend call can be given one only with the opt-in.
- shape "exact_num_tokens" (0.5.20+): upstream threads its own proof -> `upstream`.
- anything else -> `refused`, with what differs.

Opt-in (environment, read at `apply()`): `DIAG_RI_PATHS=all` also patches the target-extend
path, and always in guarded mode: the host count is checked against the device sum (one sync
instead of two) on the first call and then every Nth call only (`DIAG_RI_GUARD_EVERY`, default
`GUARD_EVERY`; 1 checks every call), so the guard keeps nearly all of the gain (measured by the
bench's guarded row); on a mismatch that call falls back to no `output_size` (exact, as
released), the mismatch is recorded (`MISMATCHES`, telemetry "error"), and from then on every
call is checked. `DIAG_RI_GUARDED=1` guards the default draft-only mode too (for CI).
"""

from __future__ import annotations

import ast
import itertools
import os
import threading
from dataclasses import dataclass
from typing import Any, ClassVar

from diag.context import Context, SpecConfig
from diag.errors import FixError
from diag.findings import Finding
from diag.fixes.base import APPLICABLE, NO_SGLANG, NOT_NEEDED, REFUSED, UPSTREAM, Applicability, Fix
from diag.fixes.start_refusal import refused_at_start
from diag.probes.source import parse_fresh, parse_text
from diag.target import Target

MODULE = "sglang.srt.layers.attention.deepseek_v4_backend_hip_radix"
FILE = "srt/layers/attention/deepseek_v4_backend_hip_radix.py"
CLASS = "DeepseekV4HipRadixBackend"
BUILDER = "_attach_unified_kv_prefill_meta"
CALLER = "init_forward_metadata_prefill"
PARAM = "_diag_output_size"
PATHS = ("draft", "all")

INSTEAD = ("these syncs need a host-side count in SGLang itself (no diag fix rewrites "
           "them); watch them per step with `diag run --probe metadata-syncs`")

MISMATCHES: list[dict[str, Any]] = []  # guarded mode: host count != device sum, per call
_mismatch_lock = threading.Lock()
GUARD_EVERY = 100  # guarded mode checks the first call and then every Nth (DIAG_RI_GUARD_EVERY)
ENV_GUARD_EVERY = "DIAG_RI_GUARD_EVERY"
_guard_calls = itertools.count()  # calls of guarded builders in this process (next() is atomic)
_guard_always = False  # set by the first mismatch: check every call from then on


def guard_every() -> int:
    """N of the guarded mode, from `DIAG_RI_GUARD_EVERY` (a positive integer) or the default."""
    raw = os.environ.get(ENV_GUARD_EVERY, "").strip()
    if not raw:
        return GUARD_EVERY
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise FixError(f"{ENV_GUARD_EVERY} must be a positive integer, not {raw!r}")
    return n


def reset_guard() -> None:
    """Start sampling afresh (the next guarded call is checked; no escalation)."""
    global _guard_calls, _guard_always
    _guard_calls = itertools.count()
    _guard_always = False


def host_count_expr(paths: str) -> str:
    """The expression the rewritten caller passes as `_diag_output_size` (evaluated there)."""
    cond = "not need_compress and " if paths == "draft" else ""
    return (f"num_tokens if {cond}extend_seq_lens_cpu is not None "
            f"and sum(extend_seq_lens_cpu) == num_tokens else None")


def checked_output_size(repeats: Any, count: int | None, every: int = 1) -> int | None:
    """Guarded mode: the host count, checked against the device (one sync) on every `every`th
    call (the first included, every call after a mismatch); on a mismatch None (as released)."""
    global _guard_always
    if count is None:
        return None
    if not _guard_always and every > 1 and next(_guard_calls) % every:
        return count
    actual = int(repeats.sum())
    if actual == count:
        return count
    with _mismatch_lock:
        _guard_always = True
        MISMATCHES.append({"host": int(count), "device": actual})
    from diag import events

    events.emit(events.Error(where=f"{CLASS}.{BUILDER}",
                             message=f"output_size {count} != sum(repeats) {actual}; used none"))
    return None


# ----------------------------------------------------------------------------------- shapes


@dataclass
class Shape:
    name: str  # "4-arg" | "need_compress" | "exact_num_tokens" | "absent" | "" (unknown)
    missing: list[int]  # lines of repeat_interleave calls on extend_seq_lens without output_size
    draft_missing: bool  # is one of those on the draft-extend path?
    reason: str = ""


def _methods(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == CLASS:
            return {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
    return {}


def _ri_calls(fn: ast.FunctionDef) -> list[ast.Call]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == "repeat_interleave"
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "torch"]


def _has_output_size(call: ast.Call) -> bool:
    return any(k.arg == "output_size" for k in call.keywords)


def _param_names(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]


def _builder_calls(fn: ast.FunctionDef) -> list[ast.Call]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == BUILDER
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]


def _in_need_compress_branch(fn: ast.FunctionDef, call: ast.Call) -> bool | None:
    """True if under `if need_compress:` body, False if in its else, None if not in such an if."""
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "need_compress":
            if any(call is n for s in node.body for n in ast.walk(s)):
                return True
            if any(call is n for s in node.orelse for n in ast.walk(s)):
                return False
    return None


def analyze(source: str) -> Shape:
    """Recognise the site's shape in a release's source of deepseek_v4_backend_hip_radix.py."""
    try:
        tree = parse_text(source)
    except SyntaxError as e:
        return Shape("", [], False, f"does not parse: {e}")
    ms = _methods(tree)
    b, c = ms.get(BUILDER), ms.get(CALLER)
    if b is None and ms:
        return Shape("absent", [], False, f"{CLASS}.{BUILDER} not in this release")
    if b is None or c is None:
        missing = BUILDER if b is None else CALLER
        return Shape("", [], False, f"{CLASS}.{missing} not found")
    params = _param_names(b)
    calls = _ri_calls(b)
    on_lens = [k for k in calls if len(k.args) >= 2 and isinstance(k.args[1], ast.Name)
               and k.args[1].id == "extend_seq_lens"]
    if len(on_lens) != len(calls) or not calls:
        return Shape("", [], False, f"{BUILDER}: expected torch.repeat_interleave(..., "
                                    f"extend_seq_lens) calls only, found {len(calls)} other")
    missing = [k for k in calls if not _has_output_size(k)]
    caller_params = set(_param_names(c))
    need = {"num_tokens", "extend_seq_lens_cpu", "need_compress"}
    if not need <= caller_params:
        return Shape("", [], False, f"{CALLER} lacks {sorted(need - caller_params)}")
    if len(_builder_calls(c)) != 1:
        return Shape("", [], False, f"{CALLER}: expected one call of {BUILDER}")
    if PARAM in params:
        return Shape("", [], False, f"{BUILDER} already has a {PARAM} parameter")
    if params == ["self", "core", "req_pool_indices", "seq_lens", "extend_seq_lens"]:
        if len(calls) != 1 or missing != calls:
            return Shape("", [], False, f"{BUILDER}: expected one call without output_size")
        return Shape("4-arg", [k.lineno for k in missing], True)
    if "need_compress" in params and "num_tokens" in params:
        draft = any(_in_need_compress_branch(b, k) is not True for k in missing)
        return Shape("need_compress", [k.lineno for k in missing], draft)
    if "exact_num_tokens" in params:
        return Shape("exact_num_tokens", [k.lineno for k in missing], bool(missing))
    return Shape("", [], False, f"{BUILDER}: unexpected signature ({', '.join(params)})")


# ------------------------------------------------------------------------------- transforms


def _locate(node: ast.AST, ref: ast.AST) -> ast.AST:
    """Give a new node (and all inside it) the source position of `ref`."""
    for n in ast.walk(node):
        if "lineno" in n._attributes:
            ast.copy_location(n, ref)
    return node


def transform_builder(guarded: bool, every: int = 1):
    """The AST rewrite of the builder: a `_diag_output_size=None` parameter, passed on (guarded:
    through `checked_output_size(..., every)`)."""

    def transform(fn: ast.FunctionDef) -> ast.FunctionDef:
        fn.args.kwonlyargs.append(_locate(ast.arg(PARAM), fn))
        fn.args.kw_defaults.append(_locate(ast.Constant(None), fn))
        if guarded:
            imp = parse_fresh(f"from {__name__} import "
                            "checked_output_size as _diag_checked").body[0]
            fn.body.insert(0, _locate(imp, fn.body[0]))
        n = 0
        for call in _ri_calls(fn):
            if not _has_output_size(call):
                value = parse_fresh(f"_diag_checked(extend_seq_lens, {PARAM}, {int(every)})"
                                  if guarded else PARAM, mode="eval").body
                call.keywords.append(_locate(ast.keyword("output_size", value), call))
                n += 1
        if n == 0:
            from diag.patcher import PatchError

            raise PatchError(f"{BUILDER}: no repeat_interleave without output_size")
        return fn

    return transform


def transform_caller(paths: str):
    """The AST rewrite of the caller: pass the host-proved count to the builder."""

    def transform(fn: ast.FunctionDef) -> ast.FunctionDef:
        calls = _builder_calls(fn)
        if len(calls) != 1:
            from diag.patcher import PatchError

            raise PatchError(f"{CALLER}: expected one call of {BUILDER}")
        expr = parse_fresh(host_count_expr(paths), mode="eval").body
        calls[0].keywords.append(_locate(ast.keyword(PARAM, expr), calls[0]))
        return fn

    return transform


def make_patch(module: str = MODULE, paths: str = "draft", guarded: bool = False,
               every: int | None = None):
    """The Patch for `module` (the engine's, or a harness module holding the same real code).
    `every`: guarded mode's N (None: `guard_every()`, from the environment or the default)."""
    from diag.patcher import Patch, marked, rewrite_function

    if paths not in PATHS:
        raise FixError(f"DIAG_RI_PATHS must be one of {', '.join(PATHS)}, not {paths!r}")
    guarded = guarded or paths == "all"
    every = guard_every() if every is None else int(every)
    if every < 1:
        raise FixError(f"guard sampling must check every N >= 1 calls, not {every}")
    qb, qc = f"{CLASS}.{BUILDER}", f"{CLASS}.{CALLER}"
    patch = Patch("repeat-interleave-output-size")
    def make_builder(f):
        # the in-engine sync counter may wrap the builder already: rewrite what it wraps, keep
        # the counting (revert restores the counter's wrapper itself)
        counter = f if marked(f, "sync-counter") else None
        base = f.__wrapped__ if counter else f
        new = rewrite_function(base, qb, transform_builder(guarded, every))
        if counter:
            from diag.probes.metadata_syncs.sync_counter import rewrap

            return rewrap(counter, new)
        return new

    patch.add(module, qb, make_builder)
    patch.add(module, qc, lambda f: rewrite_function(f, qc, transform_caller(paths)))
    return patch


# -------------------------------------------------------------------------------------- fix


class RepeatInterleaveOutputSizeFix(Fix):
    id: ClassVar[str] = "repeat-interleave-output-size"
    title: ClassVar[str] = "pass output_size= to repeat_interleave in metadata builders"
    addresses: ClassVar[tuple[str, ...]] = ("metadata-syncs",)
    bench: ClassVar[str | None] = "diag.fixes.bench_metadata:run"

    @staticmethod
    def options() -> tuple[str, bool]:
        paths = os.environ.get("DIAG_RI_PATHS", "draft").strip() or "draft"
        guarded = os.environ.get("DIAG_RI_GUARDED", "") not in ("", "0")
        return paths, guarded

    def applies_to(self, target: Target | None, platform: str, config: SpecConfig | None = None,
                   paths: str | None = None) -> Applicability:
        paths = paths or self.options()[0]
        if target is None:
            return Applicability(REFUSED, NO_SGLANG)
        if platform != "hip":
            return Applicability(NOT_NEEDED, f"{CLASS} is the HIP backend; not used on {platform}")
        if (refused := refused_at_start(target, platform, config)) is not None:
            return refused
        name, ran = (None, "")
        if config:  # the backend SGLang runs (DeepSeek-V4: dsv4, whatever was given)
            from diag.probes.startup.default_backend import audited_backend

            name, ran = audited_backend(target, platform, config)
        if name:
            from diag.probes.backends import backend_map

            info = backend_map(target, platform).get(name)
            built = set(info.attention_classes + info.draft_extend_classes) if info else set()
            if CLASS not in built:
                said = f"{name} ({ran})" if ran else f"--attention-backend {name}"
                return Applicability(NOT_NEEDED, f"{said} does not build "
                                     f"{CLASS}, the only builder this fix rewrites", INSTEAD)
        src = target.source(FILE)
        if src is None:
            return Applicability(NOT_NEEDED, f"this release has no {FILE.rsplit('/', 1)[-1]}",
                                 INSTEAD)
        shape = analyze(src)
        where = f"{FILE.rsplit('/', 1)[-1]}::{BUILDER}"
        if shape.name == "absent":
            return Applicability(NOT_NEEDED, f"{CLASS} has no {BUILDER} in this release", INSTEAD)
        if not shape.name:
            return Applicability(REFUSED, f"{where}: source differs from what the fix expects: "
                                          f"{shape.reason}", INSTEAD)
        if shape.name == "exact_num_tokens":
            return Applicability(UPSTREAM, f"{where} threads exact_num_tokens into output_size "
                                           f"(0.5.20+): nothing to patch", INSTEAD)
        if shape.name == "need_compress" and (paths == "draft" or not shape.missing):
            return Applicability(UPSTREAM, f"{where} already passes output_size on the "
                                           f"draft-extend path (#29202)", INSTEAD)
        scope = "draft-extend path" if paths == "draft" else "all paths, guarded (opt-in)"
        return Applicability(APPLICABLE, f"{where}: repeat_interleave without output_size at "
                                         f"line {', '.join(map(str, shape.missing))}; patches "
                                         f"the {scope}", INSTEAD, (f"{CLASS}.{BUILDER}",))

    def build_patch(self, target: Target | None):
        paths, guarded = self.options()
        return make_patch(MODULE, paths, guarded)

    def would_change(self, finding: Finding, applicability: Applicability) -> tuple[bool, str]:
        """Only when the finding names the builder it rewrites."""
        ok, why = super().would_change(finding, applicability)
        if not ok:
            return ok, why
        named = {e.function for e in finding.evidence if e.function} | {
            str(e.data.get("builder")) for e in finding.evidence if e.data and e.data.get("builder")}
        if set(applicability.changes) & named:
            return True, ""
        return False, f"it rewrites {', '.join(applicability.changes)} only, which has no sync here"

    def verify(self, ctx: Context) -> list[Finding]:
        """The probes it addresses, plus the real builder of the target measured with the
        fix applied to a harness copy (not the engine): syncs per call and output equality."""
        from diag.findings import Status, metric, note
        from diag.probes.metadata_syncs import builder_harness as h

        out = super().verify(ctx)
        paths, guarded = self.options()
        a = self.applies_to(ctx.target, ctx.platform, ctx.config, paths=paths)
        title = f"{self.title} (verified on the real builder)"
        if a.status != APPLICABLE or not ctx.execute:
            why = a.reason if a.status != APPLICABLE else "execution disabled (--no-execute)"
            out.append(Finding("metadata-syncs", Status.SKIP, title, f"{a.status}: {why}"))
            return out
        try:
            cls = h.dsv4_class(ctx.target)
        except h.HarnessError as e:
            out.append(Finding("metadata-syncs", Status.SKIP, title, f"not executed: {e}"))
            return out
        expr = host_count_expr(paths)
        patch = make_patch(cls.__module__, paths, guarded)
        ev, bad = [], []
        for path in h.PATHS:
            inp = h.make_inputs(getattr(cls, BUILDER), path, 64)
            before_out = h.call(cls, inp)
            before = h.measure(ctx.target, path, cls=cls)
            patch.apply()
            try:
                after_out = h.call(cls, inp, expr)
                after = h.measure(ctx.target, path, patched_expr=expr, cls=cls)
            finally:
                patch.revert()
            import torch

            same = all(torch.equal(before_out[k], after_out[k]) for k in before_out)
            ev.append(metric(f"syncs per call ({path})", f"{before.syncs} -> {after.syncs}",
                             "syncs", detail=f"{after.mode}; outputs identical: {same}"))
            if not same or after.syncs is None or (path == "draft-extend" and after.syncs):
                bad.append(path)
        if bad:
            ev.append(note(f"not as expected on: {', '.join(bad)}"))
        out.append(Finding("metadata-syncs", Status.FAIL if bad else Status.OK, title,
                           "the patched builder " + ("does not behave as expected" if bad else
                                                     "is identical and syncs less"),
                           evidence=ev, fixes=[self.id]))
        return out
