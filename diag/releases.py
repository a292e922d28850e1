"""SGLang release sources: `pip download sglang==X --no-deps` into a per-user cache, unpacked once."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

from packaging.version import InvalidVersion, Version

from diag.errors import TargetError

# The release `diag diagnose` audits when no sglang is importable and no --sglang is given.
DEFAULT_RELEASE = "0.5.23"

DOWNLOAD_TIMEOUT_S = 300
LOCAL_HINT = "pass --sglang PATH to audit an SGLang tree on disk"


def cache_root() -> Path:
    """`$DIAG_CACHE_DIR`, else `$XDG_CACHE_HOME/diag`, else `~/.cache/diag`."""
    env = os.environ.get("DIAG_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "diag"


def looks_like_version(text: str) -> bool:
    """A PEP 440 version that starts with a digit (`0.5.17`, `0.5.12.post1`, `0.0.0.999`)."""
    if not text[:1].isdigit():
        return False
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


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
        # -vv: pip logs why an index page could not be fetched only at debug level.
        cmd = [sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps",
               "--only-binary=:all:", "--python-version", "3.11",
               "--platform", "manylinux_2_34_x86_64", "--platform", "any",
               "--implementation", "cp", "-vv", "-d", str(dl)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise TargetError(f"downloading sglang=={version} did not finish in {e.timeout:g} s "
                              f"(a slow or unreachable package index); {LOCAL_HINT}") from None
        wheels = sorted(dl.glob("sglang-*.whl")) if dl.exists() else []
        if proc.returncode != 0 or not wheels:
            raise TargetError(download_failure(version, proc.stdout + "\n" + proc.stderr))
        unpack = Path(tmp) / "tree"
        try:
            with zipfile.ZipFile(wheels[0]) as zf:
                members = [m for m in zf.namelist() if _wanted(m)]
                zf.extractall(unpack, members)
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError) as e:
            # a wheel damaged in pip's cache or on the way (a bad CRC, cut short)
            raise TargetError(f"the downloaded wheel {wheels[0].name} is damaged ({e}): remove "
                              "it from pip's cache (pip cache remove sglang) and try again") \
                from None
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


_FETCH_FAILED = re.compile(r"^Could not fetch URL (\S+?): (.*?)(?: - skipping)?$", re.M)
_FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")
# What pip says about an index page it could not fetch when the index itself is out of reach
# (pip/_internal/index/collector.py: connection error, timed out, SSL); an HTTP 404 is not.
_UNREACHABLE = ("connection error", "timed out", "ssl", "proxy", "407", "500 ", "502 ", "503 ",
                "504 ")


def download_failure(version: str, output: str) -> str:
    """One line for a failed `pip download sglang==X`: the index could not be reached (with
    pip's cause), the release does not exist there, or pip's own last error."""
    m = _FROM_VERSIONS.search(output)
    listed = [v.strip() for v in m.group(1).split(",") if v.strip() != "none"] if m else []
    listed = [v for v in listed if v]
    if listed:  # an index answered with the releases it has: this one is not among them
        newest = sorted(listed, key=_sort_key)[-3:]
        return (f"no such release: sglang=={version} is not on the package index (its newest: "
                f"{', '.join(newest)}); {LOCAL_HINT}")
    for url, reason in _FETCH_FAILED.findall(output):
        if any(k in reason.lower() for k in _UNREACHABLE):
            return (f"cannot reach the package index ({url}: {_cause(reason)}); check pip's "
                    f"index and proxy settings (`pip config list`), or {LOCAL_HINT}")
    if m:
        return (f"no such release: the package index has no sglang wheel to download "
                f"(sglang=={version}: from versions: none); {LOCAL_HINT}")
    if "No module named pip" in output:
        return f"cannot download sglang=={version}: {sys.executable} has no pip; {LOCAL_HINT}"
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    why = (errors or lines or ["no wheel downloaded"])[-1]
    return f"cannot download sglang=={version}: {why[:300]}"


def _cause(reason: str) -> str:
    """pip's reason, short: `Connection refused`, `proxy: Connection refused`, `timed out`."""
    low = reason.lower()
    errno = _ERRNO.findall(reason)
    if errno:
        cause = errno[-1].strip()
    elif "timed out" in low:
        cause = "timed out"
    else:
        cause = reason.strip()[:200]
    return f"proxy: {cause}" if "proxyerror" in low or "proxy" in low and "connect" in low \
        else cause


def _sort_key(v: str) -> Version:
    try:
        return Version(v)
    except InvalidVersion:
        return Version("0")
