"""Helpers for the tests of damaged SGLang trees: a linked copy of a real release with one file
replaced (the cached release is never written), and `diag` run on it as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DIAG = [sys.executable, "-m", "diag"]


def copy_with(real: Path, root: Path, rel: str, text: str) -> Path:
    """`real` under `root`: every entry linked, but the folders on the way to `rel` made and
    `rel` itself a new file with `text`."""
    parts = Path(rel).parts
    src, dst = real, root
    for i, name in enumerate(parts):
        dst.mkdir(exist_ok=True)
        for child in src.iterdir():
            if child.name != name:
                (dst / child.name).symlink_to(child)
        src, dst = src / name, dst / name
        if i == len(parts) - 1:
            dst.write_text(text)
    return root


def diag(*args: str) -> subprocess.CompletedProcess:
    """`diag ARGS` in a subprocess, text wide enough that no line of interest wraps."""
    return subprocess.run([*DIAG, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "400"})
