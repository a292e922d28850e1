"""Backend classes that keep the batch's host lengths (`seq_lens_cpu`) on every decode-side batch
they serve: a fact of the release alone, for the census without a configuration.

Why: a builder's `if seq_lens_cpu is None: ... seq_lens.max().item()` (0.5.23
aiter_backend.py:2969-2975) syncs only where the batch comes without its host copy. From 0.5.17
the one thing that drops it on target-verify, draft-decode and draft-extend batches is the
spec-v2 relay, `FutureMap.resolve_seq_lens_cpu` under the overlap scheduler (0.5.23
managers/overlap_utils.py:615-619; 0.5.19 :539-542), and only where
`decide_needs_cpu_seq_lens` finds no backend of the worker that wants it (`getattr(b,
"needs_cpu_seq_lens", True)`, 0.5.23 :48-51). Off the overlap scheduler the batch keeps the copy
it has and refreshes it after each verify (0.5.23 managers/scheduler.py:4847-4848,
speculative/eagle_worker_v2.py:1527). A wrapper asks the class it hands those batches to
(hybrid_attn_backend.py:47-48 ORs the decode backend's and, where the spec passes go to the
prefill backend, that one's; hybrid_linear_attn_backend.py:1201-1203 the full-attention one's),
and no module sets the flag on another object. So a class whose chain sets
`needs_cpu_seq_lens` to the constant True, or never sets it (the getattr default), is never
served a decode-side batch without `seq_lens_cpu`. A class that decides it at start (0.5.23
DSV4 HIP radix: `envs.SGLANG_OPT_USE_ONLINE_COMPRESS.get()`, :1006) or opts out is left to the
configuration (probes.startup.host_lengths). An IDLE batch gets an empty copy where it is made
(`prepare_for_idle`, 0.5.23 managers/schedule_batch.py:3606; 0.5.19 :3181), and the relay does
not drop it whatever the class: every IDLE batch is made fresh, `ScheduleBatch.init_new([],
...)` then `prepare_for_idle()` (census.batch_fields.fresh_idle_batches; 0.5.23
managers/scheduler_components/dp_attn.py:810-821), so it has no speculative input when the
relay reads it, and the relay returns before it drops anything for a batch without one (`if
draft_input is None: return`, 0.5.23 overlap_utils.py:593-595; 0.5.19 :519-521). So a
`seq_lens_cpu is None` test is false on IDLE for a class that opts out too (0.5.23
dsa_backend.py:1107, whose `seq_lens.max().item()` at :1115 runs on the relayed
target-verify, draft-decode and draft-extend batches only).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from diag.probes.backends import class_attrs_of
from diag.probes.metadata_syncs.census.batch_fields import fresh_idle_batches
from diag.probes.source import Modules
from diag.probes.startup.resolve import find_line
from diag.target import Target

RELAY = "srt/managers/overlap_utils.py"
SCHEDULE = "srt/managers/schedule_batch.py"
ATTR = "needs_cpu_seq_lens"
FACT = "mirror:seq_lens_cpu"
# the modes the relay serves (probes.startup.host_lengths.DECODE_SIDE)
DECODE_SIDE = ("target-verify", "decode", "draft-extend")


def relay_lines(target: Target) -> tuple[str, str] | None:
    """(where the relay nulls the copy, where the decision's default is True), or None where the
    release has no relay of that shape."""
    nulls = find_line(target, RELAY, r"if not self\.needs_cpu_seq_lens:")
    default = find_line(target, RELAY, r'getattr\(b, "needs_cpu_seq_lens", True\)')
    return (str(nulls), str(default)) if nulls and default else None


def idle_line(target: Target) -> str | None:
    """Where `prepare_for_idle` gives an IDLE batch its (empty) host copy, or None."""
    start = find_line(target, SCHEDULE, r"def prepare_for_idle\(")
    got = find_line(target, SCHEDULE, r"self\.seq_lens_cpu = torch\.empty\(0\b",
                    start.line) if start else None
    return str(got) if got and start and got.line - start.line <= 20 else None


def relay_skips_idle(target: Target, modules: Modules | None = None) -> str | None:
    """Where the relay returns for a batch without a speculative input (`draft_input =
    batch.spec_info`, `if draft_input is None:`, `return` on the next lines), before the line
    that drops the copy, where every IDLE batch is made fresh (so has none then); else None."""
    path = target.file(RELAY)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    at = next((i for i, x in enumerate(lines) if "def resolve_seq_lens_cpu(" in x), None)
    if at is None:
        return None
    for i in range(at + 1, len(lines) - 2):
        text = lines[i].strip()
        if text.startswith("def ") or "if not self.needs_cpu_seq_lens:" in text:
            return None  # the function ends, or drops the copy, before such a return
        if text == "draft_input = batch.spec_info" and lines[i + 1].strip() == \
                "if draft_input is None:" and lines[i + 2].strip() == "return":
            if not fresh_idle_batches(modules if modules is not None else Modules(target)):
                return None
            return f"{target.relpath(path)}:{i + 2}"
    return None


def _has_fact(g: tuple) -> bool:
    """Whether the guard tests the batch's copy: itself, or a parameter every call of some
    mode binds to it (`bind:`, census.reach.mode_binds: 0.5.23 aiter_backend.py:2090 and
    :3008 hand the DCP planner's `seq_lens_cpu` the batch's on decode)."""
    if g[0] == "any":
        return any(_has_fact(p) for p in g[2])
    if g[0] == "on":
        return _has_fact(g[2][1])
    return g[0] == FACT or (g[0].startswith("bind:") and any(b == FACT for _, b, _ in g[2] or ()))


def _home(s: Any) -> str:
    """The file the site's class is read in: the site's own, but for a helper of a module
    outside the class's (the DCP planner, 0.5.23 layers/dcp/planner.py), the file of the first
    caller that is a method of the class (`Site.callers`: "file:line Class.method")."""
    for c in s.callers or ():
        at, _, qual = c.partition(" ")
        if qual.split(".")[0] == s.backend:
            return at.rsplit(":", 1)[0]
    return s.file


def fill(target: Target, out: Any, modules: Modules | None = None) -> Any:
    """Each `mirror:seq_lens_cpu` guard (or a `bind:` guard's mode whose calls pass it) of a
    site whose class keeps the copy gets
    `("kept", why, where an IDLE batch gets it or None)` as its value
    (census_config.decide_guard: set on the decode-side modes, and on IDLE where made); that
    of a site whose class does not, `("idle", why, where an IDLE batch gets it)` where the
    relay never drops an IDLE batch's copy (`relay_skips_idle`): set on IDLE only. `modules`:
    the census's own, whose reading of the IDLE makers is reused."""
    home = {id(s): _home(s) for s in out.sites if any(_has_fact(g) for g in s.guards)}
    if not home:
        return out
    lines = relay_lines(target)
    if lines is None:
        return out
    nulls, default = lines
    idle = idle_line(target)
    skips = relay_skips_idle(target, modules) if idle else None
    pairs = sorted({(s.backend, home[id(s)]) for s in out.sites if id(s) in home})
    rows = class_attrs_of(target, pairs, ATTR)
    why: dict[tuple[str, str], str] = {}
    for key, row in rows.items():
        if row is None:
            continue
        cls, value, text, where = row
        if value is True:
            said = f"{text}, {where}"
        elif value is None and where == "":
            said = f"no class of {cls}'s chain sets it: the relay's default True, {default}"
        else:
            continue
        why[key] = (f"{cls} keeps the host lengths ({said}); the relay drops them only where "
                    f"no backend of the worker wants them ({nulls})")

    idle_why = (f"every IDLE batch is made fresh and the relay returns for a batch without a "
                f"speculative input ({skips}) before it drops the copy ({nulls})") if skips \
        else None

    def one(g: tuple, value: tuple) -> tuple:
        if g[0] == "any":
            return (g[0], g[1], tuple(one(p, value) for p in g[2]), *g[3:])
        if g[0] == "on":
            return (g[0], g[1], (g[2][0], one(g[2][1], value)), *g[3:])
        if g[0].startswith("bind:"):  # a mode whose calls all pass the batch's copy
            return (g[0], g[1], tuple((m, (b, value) if b == FACT else b, at)
                                      for m, b, at in g[2] or ()), *g[3:])
        return (g[0], g[1], value, *g[3:]) if g[0] == FACT else g

    def value_of(s: Any) -> tuple | None:
        if id(s) not in home:
            return None
        if (s.backend, home[id(s)]) in why:
            return ("kept", why[(s.backend, home[id(s)])], idle)
        return ("idle", idle_why, idle) if idle_why else None

    sites = []
    for s in out.sites:
        value = value_of(s)
        sites.append(replace(s, guards=tuple(one(g, value) for g in s.guards))
                     if value is not None else s)
    out.sites = sites
    return out

