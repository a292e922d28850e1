"""Where `import diag` works: what a child interpreter needs on PYTHONPATH to import diag.

Never `diag/` itself: its modules would become top-level names in the child, where one named like
a standard library module would shadow it (a `diag/platform.py` once broke torch's import there).
"""

from __future__ import annotations

from pathlib import Path


def home() -> Path:
    """The folder holding the `diag` package: site-packages, or a source checkout's root."""
    import diag

    return Path(diag.__file__).resolve().parent.parent
