"""Counting: the census of a release (`census`: every module under
sglang/srt/layers/attention, cached on disk) and of one file or source (`scan_file`,
`scan_source`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from diag.probes.gate import SPEC_INFO_FILE, ragged_algorithms
from diag.probes.metadata_syncs.census import kept_lengths, switches
from diag.probes.metadata_syncs.census.batch_fields import (
    DRAFT_EXTEND_REL,
    SCHEDULE_REL,
    VERIFY_RELS,
    idle_maker_files,
)
from diag.probes.metadata_syncs.census.batch_fields import REL as BATCH_REL
from diag.probes.metadata_syncs.census.guards import RAGGED_FACT
from diag.probes.metadata_syncs.census.reach import _analyse
from diag.probes.metadata_syncs.census.scopes import BUILDERS, SCOPES, Scope
from diag.probes.metadata_syncs.census.sites import ATTENTION_DIR, HELPER_DIRS, Census, Site
from diag.probes.metadata_syncs.census.wrapped import DRAFT_UTILS_REL
from diag.probes.source import (
    Modules,
    classes_defined,
    gc_paused,
    parse_text,
)
from diag.target import Target

# The census's own modules: their sources are part of its cache key.
CENSUS_MODULES = tuple(f"diag.probes.metadata_syncs.census.{m}" for m in
                       ("sites", "paths", "guards", "kinds", "scan", "objects", "draft_steps",
                        "flags", "switches", "reach", "count", "fast_paths", "batch_fields",
                        "wrapped", "scopes", "kept_lengths", "formulas"))


def scan_file(path: Path, rel: str) -> tuple[list[str], list[Site], list[Site]]:
    return scan_source(path.read_text(encoding="utf-8", errors="replace"), path, rel)


def scan_source(source: str, path: Path, rel: str | Any, modules: Modules | None = None,
                scope: Scope = BUILDERS) -> tuple[list[str], list[Site], list[Site]]:
    """`scan_file` of a file already read; `rel` may be a callable that gives it (only a file
    that can define a builder needs its relative path). A file none of whose lines could define
    a seed has none (`_builders` starts from seeds only): it is not parsed."""
    if not scope.seed_text.search(source):
        return [], [], []
    tree = parse_text(source, str(path))
    names, scans = _analyse(tree, rel() if callable(rel) else rel, modules, scope)
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


def census(target: Target, use_cache: bool = True, scope: str = "builders",
           classes: frozenset[str] | None = None) -> Census:
    """Scan every module under sglang/srt/layers/attention (raises FileNotFoundError if absent)
    from the seeds of `scope` (census.scopes: the metadata builders, or the attention forward);
    with `classes`, only the modules that define one of them (their helpers elsewhere are
    followed as ever): the forward of the backends a configuration runs, not of all 60.

    The result is cached on disk (diag.cache), keyed by every scanned file's path, size, mtime
    and content hash and by this module's source: a cached census is the one a scan would give.
    """
    from diag import cache

    base = target.file(ATTENTION_DIR)
    if not base.is_dir():
        raise FileNotFoundError(f"{target.relpath(base)} not found")
    every = paths = sorted(base.rglob("*.py"))
    if classes is not None:  # each file read once: does it define one of them
        paths = list(classes_defined(every, classes))
    digest = None
    if use_cache:
        try:
            # the pools' modules too: census.fast_paths reads which pool class sets what
            pools = target.file("srt/mem_cache")
            batch = target.file(BATCH_REL)  # census.batch_fields reads ForwardBatch.init_new
            # ... and the verify preparation; census.wrapped reads a file under attention/
            # ... and the algorithms with a ragged verify layout (`_fill_ragged`), and the
            # draft-extend preparation (batch_fields.prefix_on_draft_extend), and what makes an
            # IDLE batch (batch_fields.none_on_idle), and the arch tests and boolean switches
            # (census.switches), and the host-lengths relay (census.kept_lengths)
            # ... and the helper packages whose functions the builders' calls are followed into
            helpers = [f for d in HELPER_DIRS if target.file(d).is_dir()
                       for f in sorted(target.file(d).rglob("*.py"))]
            extra = helpers + [f for f in [batch] + [target.file(r) for r in (
                *VERIFY_RELS, SPEC_INFO_FILE, DRAFT_EXTEND_REL, SCHEDULE_REL, DRAFT_UTILS_REL,
                *switches.UTILS_FILES, switches.ENVIRON_FILE, kept_lengths.RELAY)]
                if f.is_file()] \
                + idle_maker_files(target.file("srt").parent)
            digest = cache.files_key(every + (sorted(pools.rglob("*.py")) if pools.is_dir()
                                              else []) + extra,
                                     str(target.root), cache.code_fingerprint(
                *CENSUS_MODULES, "diag.probes.source",  # the parse core is part of the census
                "diag.probes.backends", "diag.probes.gate"),  # ... and the class/gate readers
                *([sorted(classes)] if classes is not None else []))
        except OSError:
            digest = None
    if digest is not None:
        hit = cache.load(_cache_name(scope), digest)
        if hit is not None:
            try:
                return Census.from_dict(hit["value"])
            except (KeyError, TypeError, ValueError):
                pass
    with gc_paused():
        modules = Modules(target)  # helpers in other attention modules, parsed once for all
        out = kept_lengths.fill(target, switches.fill(target, _fill_ragged(
            target, _scan_all(target, paths, SCOPES[scope], modules))), modules)
    if digest is not None:
        cache.store(_cache_name(scope), digest, out.to_dict())
    return out


def _fill_ragged(target: Target, out: Census) -> Census:
    """Each ragged-layout guard (`guards.RAGGED_FACT`) gets the release's algorithms whose
    verify input may carry one, with where that is said (`gate.ragged_algorithms`); a release
    without `supports_ragged_verify` leaves it undecided."""
    if not any(g[0] == RAGGED_FACT for s in out.sites for g in s.guards):
        return out
    got = ragged_algorithms(target)
    if got is None:
        return out
    algos, line = got
    value = (tuple(sorted(algos)), f"{target.relpath(target.file(SPEC_INFO_FILE))}:{line}")
    out.sites = [replace(s, guards=tuple((g[0], g[1], value, *g[3:]) if g[0] == RAGGED_FACT
                                         else g for g in s.guards))
                 if any(g[0] == RAGGED_FACT for g in s.guards) else s for s in out.sites]
    return out


def _cache_name(scope: str) -> str:
    return "census" if scope == "builders" else f"census-{scope}"


def _scan_all(target: Target, paths: list[Path], scope: Scope = BUILDERS,
              modules: Modules | None = None) -> Census:
    out = Census(str(target.root))
    modules = modules if modules is not None else Modules(target)
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
            names, sites, with_os = scan_source(source, path, rel_of, modules, scope)
        except (SyntaxError, ValueError, RecursionError) as e:
            out.errors.append(f"{rel_of()}: {type(e).__name__}: {e}")
            continue
        if names:
            out.builders[rel_of()] = names
        out.sites.extend(sites)
        out.with_output_size.extend(with_os)
    return out
