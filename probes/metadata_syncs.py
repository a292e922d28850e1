"""Probe `metadata-syncs`: where the attention metadata builders read the device from the host.

Static census over `sglang/srt/layers/attention/**` (probes.metadata_census), plus, with
`ctx.execute`, the real DSV4 HIP builder run alone (probes.builder_harness) on the draft-extend
and target-extend paths: counted on the GPU when there is one, by the CPU counter otherwise
(both when there is a GPU; a disagreement is reported).
"""

from __future__ import annotations

from typing import Any

from diag.context import Context
from diag.findings import Finding, Status, location, metric, note, row
from diag.probes.base import Probe

MAX_LOCATIONS = 40
TIMEOUT_S = 20.0


class MetadataSyncsProbe(Probe):
    id = "metadata-syncs"
    title = "implicit device->host syncs in attention metadata builders"
    fixes = ("repeat-interleave-output-size",)

    def run(self, ctx: Context) -> Finding:
        from diag.probes.metadata_census import (
            ATTENTION_DIR,
            BACKEND_NAMES,
            DRAFT_EXTEND_BACKENDS,
            census,
        )

        target = ctx.target
        if not target.file(ATTENTION_DIR).is_dir():
            return self.finding(Status.SKIP, f"this release has no sglang/{ATTENTION_DIR}")
        key = f"metadata_census:{target.root}"
        c = ctx.cache.get(key) or census(target)
        ctx.cache[key] = c
        name = ctx.config.attention_backend
        hot_backends = BACKEND_NAMES.get(name or "", set()) if name else \
            DRAFT_EXTEND_BACKENDS.get(ctx.platform, set())
        scope = f"--attention-backend {name}" if name else f"{ctx.platform} draft-extend path"
        # repeat_interleave first (two syncs each, and what the fix addresses), then by place
        syncing = sorted(c.syncing(), key=lambda s: (s.kind != "repeat_interleave", -s.syncs,
                                                     s.file, s.line))
        hot = [s for s in syncing if s.backend in hot_backends]
        cold = [s for s in syncing if s.backend not in hot_backends]
        ev = [metric("sync sites (static, per-step path)", len(syncing), "sites", 0),
              metric(f"sync sites on the {scope}", len(hot), "sites", 0)]
        disagreements = self._measured(ctx, c, ev) if ctx.execute else []
        ev.append(metric("builders scanned", sum(len(v) for v in c.builders.values()),
                         "functions"))
        for s in (hot + cold)[:MAX_LOCATIONS]:
            tag = "draft-extend backend" if s.backend in hot_backends else "other backend"
            ev.append(location(s.file, s.line, s.function,
                               f"{s.kind}: {s.why} ({s.syncs} sync{'s' if s.syncs > 1 else ''};"
                               f" {tag}) `{s.call}`"))
        if len(syncing) > MAX_LOCATIONS:
            ev.append(note(f"... and {len(syncing) - MAX_LOCATIONS} more sync sites (--json "
                           f"lists the first {MAX_LOCATIONS})"))
        unsure = [s for s in c.sites if s.verdict == "cannot-tell"]
        ev.append(note(f"{len(unsure)} calls the census cannot classify (device or host "
                       f"unknown), {sum(s.verdict == 'host-mirror' for s in c.sites)} read host "
                       f"mirrors, {sum(s.verdict == 'capture-only' for s in c.sites)} run only "
                       f"under graph capture; bool-mask indexing is not detected statically"))
        for backend, counts in sorted(c.by_backend().items()):
            ev.append(row(backend=backend, on_path="yes" if backend in hot_backends else "no",
                          syncs=counts["syncs"], sync_count=counts["sync_count"],
                          host_mirror=counts["host-mirror"], capture_only=counts["capture-only"],
                          cannot_tell=counts["cannot-tell"]))
        for err in c.errors:
            ev.append(note(f"not scanned: {err}"))

        if hot:
            status = Status.FAIL
        elif cold or disagreements:
            status = Status.WARN
        else:
            status = Status.OK
        named = []
        for s in hot + [s for s in cold if s.kind == "repeat_interleave"] + cold:
            label = f"{s.function} ({s.kind})"
            if label not in named:
                named.append(label)
        total = sum(s.syncs for s in syncing)
        summary = (f"{len(syncing)} sync sites ({total} syncs if each runs once) in metadata "
                   f"builders; {len(hot)} on the {scope}")
        if named:
            summary += ": " + ", ".join(named[:6]) + (" ..." if len(named) > 6 else "")
        hint = None
        if syncing:
            hint = ("run `diag fix list` for `repeat-interleave-output-size`; other sites need "
                    "a host-side count in SGLang (see README 'Fixes')")
        return self.finding(status, summary, evidence=ev, hint=hint)

    def _measured(self, ctx: Context, c, ev: list) -> list[str]:
        """Run the real DSV4 HIP builder alone; append its counts; return disagreements."""
        from diag.platform import gpu_possible
        from diag.probes import builder_harness as h
        from diag.probes.sync_counter import gpu_available

        if not ctx.target.file(h.DSV4_FILE).is_file():
            ev.append(note(f"not executed: {h.DSV4_FILE.rsplit('/', 1)[-1]} is not in this "
                           f"release"))
            return []
        static = [s for s in c.sites if s.function == f"{h.DSV4_CLASS}.{h.ATTACH}"]
        modes = ["gpu", "cpu"] if gpu_possible() and gpu_available() else ["cpu"]
        out: list[str] = []
        reused: list[str] = []
        reused_at: set[str] = set()
        # loaded before this probe: a fix may have patched it, so measure it live
        fresh = not h.loaded(ctx.target, h.DSV4_FILE, h.DSV4_CLASS)
        for path in h.PATHS:
            got = {}
            for mode in modes:
                m, when = _measure(ctx, path, mode, fresh)
                if when:
                    reused.append(f"{path} ({mode})")
                    reused_at.add(when)
                if not m.executed:
                    ev.append(note(f"{h.ATTACH} ({path}, {mode}) not executed: {m.error}"))
                    continue
                got[mode] = m.syncs
                ev.append(metric(f"measured syncs per call: {h.ATTACH} ({path})", m.syncs,
                                 "syncs", 0, f"{mode}, real code of sglang {ctx.target.version}"
                                 f", batch 64" + (f"; at {', '.join(sorted(set(m.sites)))}"
                                                  if m.sites else "")))
            if len(set(got.values())) > 1:
                out.append(f"{path}: gpu {got.get('gpu')} != cpu {got.get('cpu')}")
                ev.append(note(f"disagreement on {path}: GPU counted {got.get('gpu')}, the CPU "
                               f"counter {got.get('cpu')}"))
            if got and max(got.values()) > 0 and not any(
                    s.verdict in ("syncs", "cannot-tell") for s in static):
                out.append(f"{path}: measured syncs the census did not find")
                ev.append(note(f"disagreement on {path}: measured {max(got.values())} syncs, "
                               f"the census found no sync site in {h.ATTACH}"))
        if reused:
            ev.append(note(f"measured counts of {', '.join(reused)} reused from the diag cache "
                           f"(measured {', '.join(sorted(reused_at))} on this machine with the "
                           f"same torch, builder source and diag code); DIAG_NO_CACHE=1 "
                           f"measures again"))
        return out


def _measure(ctx: Context, path: str, mode: str, fresh: bool) -> tuple[Any, str | None]:
    """`builder_harness.measure`, its CPU counts reused from the disk cache (diag.cache).

    A CPU count is a function of the builder's source, the harness and counter code, the
    inputs (fixed seed) and the local torch: all in the key. Measured afresh when the builder
    was already loaded in this process before the probe (`fresh` False: a fix may have patched
    it) and always on the GPU.
    """
    from dataclasses import asdict

    from diag import cache
    from diag.probes import builder_harness as h

    target = ctx.target
    digest = None
    if mode == "cpu" and fresh:
        try:
            import diag.probes.sync_counter  # noqa: F401  (its source is part of the key)

            digest = cache.files_key([target.file(h.DSV4_FILE)], path, mode, TIMEOUT_S,
                                     cache.torch_fingerprint(), cache.code_fingerprint(
                                         "diag.probes.builder_harness", "diag.probes.sync_counter"))
        except Exception:  # no torch, unreadable file: measure (and report) as before
            digest = None
    if digest is not None:
        hit = cache.load("builder_syncs", digest)
        if hit is not None:
            try:
                m = h.Measurement(**hit["value"])
            except TypeError:
                m = None
            if m is not None and m.executed:
                return m, str(hit.get("stored_at") or "earlier")
    m = h.measure(target, path, mode, timeout=TIMEOUT_S)
    if digest is not None and m.executed:
        cache.store("builder_syncs", digest, asdict(m))
    return m, None
