"""On-disk cache of derived results (the sync census, runtime check results), as JSON.

Why: `diag diagnose` re-derives the same answers from the same inputs on every run (an AST scan
of ~140 release files; checks whose answer depends only on the local torch and diag's code).
Each entry is keyed by a digest of everything the result derives from: the input files (path,
size, mtime and sha256 of the content), diag's own code that computes it (sha256 of those
modules' sources), and versions (torch, Python). Any change gives a new key; stale entries are
simply never read again. A broken or unreadable entry is a miss, never an error.
`DIAG_NO_CACHE=1` disables reading (results are still computed and stored).
Entries live under `diag.releases.cache_root()/results/<kind>/<digest>.json`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from diag.releases import cache_root

FORMAT = 1


def enabled() -> bool:
    return os.environ.get("DIAG_NO_CACHE", "").strip().lower() in ("", "0", "false", "no")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_fingerprint(path: Path) -> list[Any]:
    """[path, size, mtime_ns, sha256 of content] of one input file."""
    st = path.stat()
    return [str(path), st.st_size, st.st_mtime_ns, _sha(path.read_bytes())]


def code_fingerprint(*modules: str) -> list[Any]:
    """sha256 of the sources of diag's own modules that compute a result (by module name)."""
    out = []
    for name in modules:
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None)
        out.append([name, _sha(Path(path).read_bytes()) if path else None])
    return out


def torch_fingerprint() -> list[Any]:
    """The local torch (version and where it lives) and Python, for runtime results.

    Read without importing torch (seconds): the package's location from its import spec, the
    version and build from its `version.py` (content hash, size, mtime). A torch that is already
    imported is fingerprinted the same way, so both give one key. Raises ImportError when there
    is no torch to import.
    """
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise ImportError("no torch")
    pkg = Path(spec.origin).parent
    return [file_fingerprint(pkg / "version.py"), str(pkg), sys.version]


def key(*parts: Any) -> str:
    return _sha(json.dumps([FORMAT, *parts], sort_keys=True, default=str).encode())


def _entry(kind: str, digest: str) -> Path:
    return cache_root() / "results" / kind / f"{digest}.json"


def load(kind: str, digest: str) -> dict[str, Any] | None:
    """The stored entry (`value`, `stored_at`), or None (absent, unreadable, or disabled)."""
    if not enabled():
        return None
    try:
        doc = json.loads(_entry(kind, digest).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != digest or "value" not in doc:
        return None
    return doc


def store(kind: str, digest: str, value: Any) -> None:
    """Write the entry atomically (temp file + rename); failures are ignored (cache only)."""
    path = _entry(kind, digest)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"key": digest, "stored_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "value": value}
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return


def files_key(paths: Iterable[Path], *parts: Any) -> str:
    return key([file_fingerprint(p) for p in paths], *parts)
