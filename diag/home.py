"""Where `import diag` works: what a child interpreter needs on PYTHONPATH to import diag.

Never `diag/` itself: that folder holds `platform.py`, which would shadow the standard library's
`platform` in the child (and break torch's import there).
"""

from __future__ import annotations

from pathlib import Path


def home() -> Path:
    """The folder holding the `diag` package: site-packages, or a source checkout's root."""
    import diag

    return Path(diag.__file__).resolve().parent.parent
