"""SGLang release sources: `pip download sglang==X --no-deps` into a per-user cache, unpacked once."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from diag.errors import TargetError

# The release `diag diagnose` audits when no sglang is importable and no --sglang is given.
DEFAULT_RELEASE = "0.5.23"

VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?([._-]?(post|rc|a|b|dev)\d+)*$")
DOWNLOAD_TIMEOUT_S = 300


def cache_root() -> Path:
    """`$DIAG_CACHE_DIR`, else `$XDG_CACHE_HOME/diag`, else `~/.cache/diag`."""
    env = os.environ.get("DIAG_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "diag"


def looks_like_version(text: str) -> bool:
    return bool(VERSION_RE.match(text))


def release_dir(version: str) -> Path:
    return cache_root() / "releases" / version


def cached(version: str) -> Path | None:
    d = release_dir(version)
    return d if (d / ".complete").exists() else None


def fetch(version: str, log=None) -> Path:
    """Return the unpacked tree of sglang==version, downloading it once."""
    if not looks_like_version(version):
        raise TargetError(f"not a release version: {version!r}")
    hit = cached(version)
    if hit:
        return hit
    dest = release_dir(version)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TargetError(f"cannot create the release cache {dest.parent}: {e.strerror} "
                          "(set DIAG_CACHE_DIR)") from None
    if log:
        log(f"downloading sglang=={version} (pip download --no-deps) into {dest.parent}")
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{version}-") as tmp:
        dl = Path(tmp) / "dl"
        # Only the sources are read, so ask for the wheel whatever this interpreter is.
        cmd = [sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps",
               "--only-binary=:all:", "--python-version", "3.11",
               "--platform", "manylinux_2_34_x86_64", "--platform", "any",
               "--implementation", "cp", "-q", "-d", str(dl)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise TargetError(f"downloading sglang=={version} timed out after {e.timeout}s") from e
        wheels = sorted(dl.glob("sglang-*.whl")) if dl.exists() else []
        if proc.returncode != 0 or not wheels:
            why = _last_error_line(proc.stderr) or "no wheel downloaded"
            raise TargetError(f"cannot download sglang=={version}: {why}")
        unpack = Path(tmp) / "tree"
        with zipfile.ZipFile(wheels[0]) as zf:
            members = [m for m in zf.namelist() if _wanted(m)]
            zf.extractall(unpack, members)
        (unpack / ".complete").write_text(wheels[0].name + "\n")
        if cached(version):  # another diag process finished the same download first
            return dest
        if dest.exists():  # a half-written tree from an interrupted run
            shutil.rmtree(dest, ignore_errors=True)
        try:
            os.replace(unpack, dest)
        except OSError as e:
            if cached(version):  # lost the race to another diag process: its tree is complete
                return dest
            raise TargetError(f"cannot unpack sglang=={version} into {dest}: {e.strerror}") \
                from None
    return dest


def _wanted(member: str) -> bool:
    # Python sources and metadata only: compiled extensions are never read.
    return member.endswith((".py", "METADATA", "entry_points.txt", "RECORD")) or member.endswith("/")


def _last_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or [""])[-1]  # e.g. "No module named pip" has no ERROR prefix
