"""Probe registry: one line per probe, `id -> "module:Class"`, imported only when used.

A probe declares everything the rest of diag needs about it on its class (`diag.probes.base.Probe`:
id, title, concern, the fixes that address it, an optional runtime counter); the command line,
the engine side and the TUI iterate over `specs()` and never name a probe id.
"""

from __future__ import annotations

import importlib

from diag.probes.base import Probe

REGISTRY: dict[str, str] = {
    "draft-extend-graph": "diag.probes.draft_extend_graph.probe:DraftExtendGraphProbe",
    "metadata-syncs": "diag.probes.metadata_syncs.probe:MetadataSyncsProbe",
    "profiler-teardown": "diag.probes.profiler_teardown.probe:ProfilerTeardownProbe",
}


def spec(probe_id: str) -> type[Probe]:
    """The probe's class: its declarations, without running anything."""
    try:
        path = REGISTRY[probe_id]
    except KeyError:
        raise KeyError(f"unknown probe {probe_id!r} (known: {', '.join(REGISTRY)})") from None
    module, cls = path.split(":")
    return getattr(importlib.import_module(module), cls)


def specs() -> list[type[Probe]]:
    """Every registered probe's class, in registry order."""
    return [spec(p) for p in REGISTRY]


def get(probe_id: str) -> Probe:
    return spec(probe_id)()


def all_ids() -> list[str]:
    return list(REGISTRY)


def with_counter() -> list[str]:
    """Ids of the probes that declare a runtime counter (what `diag run --probe` accepts)."""
    return [s.id for s in specs() if s.counter is not None]
