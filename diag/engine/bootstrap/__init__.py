"""The bootstrap directory `diag run` puts first on PYTHONPATH (holds only `sitecustomize`)."""

from __future__ import annotations

from pathlib import Path


def directory() -> Path:
    """The folder to put first on PYTHONPATH: its `sitecustomize` starts the agent."""
    return Path(__file__).resolve().parent


def home() -> Path:
    """The folder from which `import diag` works (site-packages, or a source checkout's root)."""
    from diag.home import home as _home

    return _home()
