"""diag: diagnostics, fixes and before/after timings for SGLang speculative decoding on AMD GPUs.

Installed, `diag` is the only top-level package: the checkout's `probes/`, `fixes/` and `tui/`
folders are `diag.probes`, `diag.fixes` and `diag.tui` (setuptools `package-dir`). In a source
checkout used without installing (`PYTHONPATH=<checkout>`, as engine children may be started),
the same names resolve through `__path__`, so both layouts import alike.
"""

import os as _os

__version__ = "0.1.0"

_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(_os.path.dirname(__file__), "probes")) and all(
        _os.path.isfile(_os.path.join(_root, sub, "__init__.py")) for sub in ("probes", "fixes", "tui")
) and _os.path.isfile(_os.path.join(_root, "pyproject.toml")):
    __path__.append(_root)  # noqa: F821  (a package's __path__)
del _os, _root
