"""Counting: the census of a release (`census`: every module under
sglang/srt/layers/attention, cached on disk) and of one file or source (`scan_file`,
`scan_source`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from diag.probes.metadata_syncs.census.batch_fields import REL as BATCH_REL
from diag.probes.metadata_syncs.census.batch_fields import VERIFY_RELS
from diag.probes.metadata_syncs.census.reach import _analyse
from diag.probes.metadata_syncs.census.sites import ATTENTION_DIR, Census, Site
from diag.probes.source import (
    Modules,
    gc_paused,
    parse_text,
)
from diag.target import Target

# The census's own modules: their sources are part of its cache key.
CENSUS_MODULES = tuple(f"diag.probes.metadata_syncs.census.{m}" for m in
                       ("sites", "paths", "guards", "kinds", "scan", "objects", "draft_steps",
                                         "reach", "count", "fast_paths", "batch_fields",
                                         "wrapped"))

# A file none of whose lines could define a builder seed has no builders (`_builders` starts
# from seeds only): it is not parsed. A textual superset of the seed names, so nothing is missed.
_SEED_TEXT = re.compile(r"\bdef\s+(init_forward_metadata|_?(build|make|prepare|attach|compute)"
                        r"_\w*meta)")


def scan_file(path: Path, rel: str) -> tuple[list[str], list[Site], list[Site]]:
    return scan_source(path.read_text(encoding="utf-8", errors="replace"), path, rel)


def scan_source(source: str, path: Path, rel: str | Any, modules: Modules | None = None
                ) -> tuple[list[str], list[Site], list[Site]]:
    """`scan_file` of a file already read; `rel` may be a callable that gives it (only a file
    that can define a builder needs its relative path)."""
    if not _SEED_TEXT.search(source):
        return [], [], []
    tree = parse_text(source, str(path))
    names, scans = _analyse(tree, rel() if callable(rel) else rel, modules)
    sites, with_os = [], []
    seen: set[tuple[str, int, int, str]] = set()
    for scan in scans:
        # a helper reached from two backends is listed once per backend; every call on a line
        # is its own site (an outer host read keeps the inner `.cpu()` that syncs)
        for site in scan.sites:
            key = (site.backend, site.file, site.line, site.col, site.kind)
            if key not in seen:
                seen.add(key)
                sites.append(replace(site, callers=scan.chain) if scan.chain else site)
        with_os.extend(scan.with_os)
    return names, sites, with_os


def census(target: Target, use_cache: bool = True) -> Census:
    """Scan every module under sglang/srt/layers/attention (raises FileNotFoundError if absent).

    The result is cached on disk (diag.cache), keyed by every scanned file's path, size, mtime
    and content hash and by this module's source: a cached census is the one a scan would give.
    """
    from diag import cache

    base = target.file(ATTENTION_DIR)
    if not base.is_dir():
        raise FileNotFoundError(f"{target.relpath(base)} not found")
    paths = sorted(base.rglob("*.py"))
    digest = None
    if use_cache:
        try:
            # the pools' modules too: census.fast_paths reads which pool class sets what
            pools = target.file("srt/mem_cache")
            batch = target.file(BATCH_REL)  # census.batch_fields reads ForwardBatch.init_new
            # ... and the verify preparation; census.wrapped reads a file under attention/
            extra = [f for f in [batch] + [target.file(r) for r in VERIFY_RELS] if f.is_file()]
            digest = cache.files_key(paths + (sorted(pools.rglob("*.py")) if pools.is_dir()
                                              else []) + extra,
                                     str(target.root), cache.code_fingerprint(
                *CENSUS_MODULES, "diag.probes.source"))  # the parse core is part of the census
        except OSError:
            digest = None
    if digest is not None:
        hit = cache.load("census", digest)
        if hit is not None:
            try:
                return Census.from_dict(hit["value"])
            except (KeyError, TypeError, ValueError):
                pass
    with gc_paused():
        out = _scan_all(target, paths)
    if digest is not None:
        cache.store("census", digest, out.to_dict())
    return out


def _scan_all(target: Target, paths: list[Path]) -> Census:
    out = Census(str(target.root))
    modules = Modules(target)  # helpers in other attention modules, parsed once for all
    root = target.root.resolve()

    def relpath(path: Path) -> str:  # Target.relpath, with the root resolved once
        try:
            return str(path.resolve().relative_to(root))
        except ValueError:
            return str(path)

    for path in paths:
        out.files += 1
        source = path.read_text(encoding="utf-8", errors="replace")
        rel: list[str] = []  # computed for the files that can define a builder only

        def rel_of(path: Path = path, rel: list[str] = rel) -> str:
            if not rel:
                rel.append(relpath(path))
            return rel[0]

        try:
            names, sites, with_os = scan_source(source, path, rel_of, modules)
        except (SyntaxError, ValueError, RecursionError) as e:
            out.errors.append(f"{rel_of()}: {type(e).__name__}: {e}")
            continue
        if names:
            out.builders[rel_of()] = names
        out.sites.extend(sites)
        out.with_output_size.extend(with_os)
    return out
