"""Shared test set-up: real SGLang releases (downloaded once with pip, cached), GPU marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from diag.target import Target

# The releases the suite runs against (SGLANG.md): one before #29202, the first with it, the one
# that added DSA to the gate, and the newest. Others are fetched by tests that need them.
RELEASES = ("0.5.9", "0.5.12.post1", "0.5.17", "0.5.18", "0.5.19", "0.5.23")
NEWEST = "0.5.23"

# Keep the cache across CI runs on the same machine; tests never write into it by hand.
os.environ.setdefault("DIAG_CACHE_DIR", str(Path.home() / ".cache" / "diag"))


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a GPU (CUDA or ROCm torch with a device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


_targets: dict[str, Target] = {}


def release_target(version: str) -> Target:
    """A real SGLang release tree (pip download sglang==X --no-deps, unpacked, cached)."""
    from diag.target import from_release

    if version not in _targets:
        _targets[version] = from_release(version)
    return _targets[version]


@pytest.fixture(scope="session")
def release():
    """`release("0.5.17")` → Target of that real release."""
    return release_target
