"""Probe registry: one line per probe, `id -> "module:Class"`, imported only when run."""

from __future__ import annotations

import importlib

from diag.probes.base import Probe

REGISTRY: dict[str, str] = {
    "draft-extend-graph": "diag.probes.draft_extend_graph:DraftExtendGraphProbe",
    "metadata-syncs": "diag.probes.metadata_syncs:MetadataSyncsProbe",
    "profiler-teardown": "diag.probes.profiler_teardown:ProfilerTeardownProbe",
}


def get(probe_id: str) -> Probe:
    try:
        path = REGISTRY[probe_id]
    except KeyError:
        raise KeyError(f"unknown probe {probe_id!r} (known: {', '.join(REGISTRY)})") from None
    module, cls = path.split(":")
    return getattr(importlib.import_module(module), cls)()


def all_ids() -> list[str]:
    return list(REGISTRY)
