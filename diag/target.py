"""The SGLang under diagnosis, located without importing sglang."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from diag import releases
from diag.errors import EXIT_USAGE, TargetError, echo


@dataclass(frozen=True)
class Target:
    """A directory that holds the `sglang` package, with its release version."""

    root: Path  # the directory containing the `sglang/` package
    version: str | None
    origin: str  # "importable" | "path" | "release" | "default-release"

    @property
    def package(self) -> Path:
        return self.root / "sglang"

    @property
    def parsed_version(self) -> Version | None:
        try:
            return Version(self.version) if self.version else None
        except InvalidVersion:
            return None

    def file(self, rel: str) -> Path:
        """Path of `rel` under the sglang package (e.g. 'srt/speculative/eagle_worker_v2.py')."""
        return self.package / rel

    def source(self, rel: str) -> str | None:
        p = self.file(rel)
        return p.read_text(encoding="utf-8", errors="replace") if p.is_file() else None

    def relpath(self, path: Path | str) -> str:
        """A path as users see it: `sglang/...` relative to the root."""
        try:
            return str(_resolved(str(path)).relative_to(_resolved(str(self.root))))
        except (ValueError, RuntimeError, OSError):  # outside the root, or a symlink loop
            return os.path.relpath(path, self.root) if os.path.isabs(path) else str(path)

    def to_dict(self) -> dict:
        return {"root": str(self.root), "version": self.version, "origin": self.origin}

    def describe(self) -> str:
        return f"sglang {self.version or '(unknown version)'} at {self.package} [{self.origin}]"


def resolve(spec: str | None, log=None) -> Target:
    """`None` → importable sglang, else the pinned default release; a path; or a version."""
    if spec is None:
        found = find_importable()
        if found:
            return found
        if log:
            log(f"no sglang importable here: auditing release {releases.DEFAULT_RELEASE} "
                f"(pass --sglang PATH|VERSION to choose)")
        return from_release(releases.DEFAULT_RELEASE, origin="default-release", log=log)
    p = Path(spec).expanduser()
    if p.exists() or "/" in spec or spec.startswith("."):
        return from_path(p)
    if releases.looks_like_version(spec):
        return from_release(spec, log=log)
    raise TargetError(f"--sglang {echo(spec)} is neither an existing path nor a release version "
                      f"(e.g. {releases.DEFAULT_RELEASE})", exit_code=EXIT_USAGE)


def find_importable() -> Target | None:
    spec = importlib.util.find_spec("sglang")  # finds, does not import
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = Path(list(spec.submodule_search_locations)[0])
    if not (pkg / "srt").is_dir():
        return None
    return Target(pkg.parent, read_version(pkg.parent), "importable")


def from_path(path: Path) -> Target:
    if not path.exists():
        raise TargetError(f"{path}: no such file or directory")
    if (path / "sglang" / "srt").is_dir():
        root = path
    elif path.name == "sglang" and (path / "srt").is_dir():
        root = path.parent
    else:
        raise TargetError(f"{path}: not an SGLang tree (expected sglang/srt/ inside it)")
    return Target(root.resolve(), read_version(root), "path")


def from_release(version: str, origin: str = "release", log=None) -> Target:
    root = releases.fetch(version, log=log)
    return Target(root, read_version(root) or version, origin)


# What every supported release (0.5.9 - 0.5.23) has. A file that is missing, empty or does not
# parse is the probes' target error (named with its line); here: the package that is gone and
# the class that is gone from a file that is still there.
REQUIRED_DIRS = ("srt/speculative", "srt/layers/attention")
REQUIRED_CLASSES = {"srt/speculative/eagle_worker_v2.py": ("EagleDraftWorker", "EAGLEWorkerV2"),
                    "srt/speculative/draft_utils.py": ("DraftBackendFactory",)}
PROBE_CHECKED = ("srt/speculative/eagle_worker_v2.py",)  # missing: a finding, JSON still written


def check_tree(target: Target) -> None:
    """TargetError (exit 3) naming the path when the tree lacks what every release has; checked
    once, before the probes (which would otherwise read the gap as "not recognised")."""
    for rel in (*REQUIRED_DIRS, *REQUIRED_CLASSES):
        p = target.file(rel)
        if p.is_symlink() and not p.exists():  # exists() is False for a loop and a dead link
            raise TargetError(f"{p}: a symbolic link that leads nowhere (a loop, or its target "
                              "is gone): not a readable SGLang tree; fix the link or pass "
                              "--sglang VERSION")
    for rel in REQUIRED_DIRS:
        if not target.file(rel).is_dir():
            raise TargetError(f"{target.file(rel)}: missing: not a complete SGLang tree (every "
                              "release has this package); reinstall it or pass --sglang VERSION")
    for rel, classes in REQUIRED_CLASSES.items():
        text = target.source(rel)
        if text is None and rel not in PROBE_CHECKED:
            raise TargetError(f"{target.file(rel)}: missing: not a complete SGLang tree (every "
                              "release has it); reinstall it or pass --sglang VERSION")
        if not text or not text.strip():
            continue  # missing or empty: the probe's target error, with the file
        if not any(re.search(rf"^class {c}\b", text, re.M) for c in classes):
            raise TargetError(f"{target.file(rel)}: no class {' or '.join(classes)} in it: not a "
                              "complete SGLang tree; reinstall it or pass --sglang VERSION")


_VERSION_ASSIGN = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.M)


def read_version(root: Path) -> str | None:
    """From the dist-info METADATA beside the package, else `sglang/version.py`."""
    for meta in sorted(root.glob("sglang-*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    vfile = root / "sglang" / "version.py"
    if vfile.is_file():
        m = _VERSION_ASSIGN.search(vfile.read_text(errors="replace"))
        if m:
            return m.group(1)
    return None


@functools.lru_cache(maxsize=8192)
def _resolved(path: str) -> Path:
    """Path.resolve, once per path a run: every cited line resolves its file (250,000 calls in
    a 1,200-configuration audit)."""
    return Path(path).resolve()
