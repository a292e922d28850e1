"""The on-disk result cache (diag.cache): a cached answer equals a fresh one, and any change to
an input file invalidates it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from diag.probes.metadata_syncs.census.count import census
from diag.probes.profiler_teardown.stops import locate_stops
from diag.target import from_path

BUILDER = '''
class StandInBackend:
    def init_forward_metadata(self, forward_batch):
        n = forward_batch.seq_lens.max().item()
        return n
'''


@pytest.fixture()
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DIAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DIAG_NO_CACHE", raising=False)
    return tmp_path / "cache"


def _tree(tmp_path: Path) -> Path:
    """A stand-in SGLang tree: one builder file with one `.item()` sync."""
    d = tmp_path / "standin" / "sglang" / "srt" / "layers" / "attention"
    d.mkdir(parents=True)
    (d / "standin_backend.py").write_text(BUILDER)
    return tmp_path / "standin"


def _entries(cache: Path, kind: str) -> list[Path]:
    return sorted((cache / "results" / kind).glob("*.json"))


def test_census_cached_equals_fresh_and_edit_invalidates(tmp_path, tmp_cache):
    t = from_path(_tree(tmp_path))
    first = census(t)
    assert len(first.syncing()) == 1 and len(_entries(tmp_cache, "census")) == 1
    again = census(t)
    assert again.to_dict() == first.to_dict() == census(t, use_cache=False).to_dict()
    f = t.file("srt/layers/attention/standin_backend.py")
    f.write_text(BUILDER.replace("        return n", "        x = forward_batch.seq_lens.tolist()\n"
                                 "        return n, x"))
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    edited = census(t)
    assert len(edited.syncing()) == 2, "an edited file must be scanned again"
    assert len(_entries(tmp_cache, "census")) == 2


def test_corrupt_entry_is_a_miss(tmp_path, tmp_cache):
    t = from_path(_tree(tmp_path))
    census(t)
    (entry,) = _entries(tmp_cache, "census")
    entry.write_text("{not json")
    assert len(census(t).syncing()) == 1
    assert json.loads(entry.read_text())["value"]["files"] == 1  # rewritten


def _findings(t, env: dict[str, str]) -> list[dict]:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "diag.cli", "diagnose", "--sglang", str(t.root),
                           "--platform", "hip", "--json"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)["findings"]


def _same(fs: list[dict]) -> list:
    """Everything but the notes and the measured collect time."""
    return [(f["probe"], f["status"], f["summary"],
             [e for e in f["evidence"] if e.get("kind") != "note"
              and e.get("metric") != "collect_time"]) for f in fs]


def _reuse_notes(fs: list[dict]) -> list[str]:
    return [str(e) for f in fs for e in f["evidence"] if "reused from the diag cache" in str(e)]


@pytest.mark.release
@pytest.mark.slow
def test_diagnose_same_findings_cold_and_warm(release, tmp_cache):
    """0.5.23 in fresh processes: the cold run (measures, stores) and the warm run (reuses)
    give the same statuses, summaries, counts and locations; only the warm run says it
    reused measurements, for both measured builder paths and the profiler check."""
    t = release("0.5.23")
    env = {"DIAG_CACHE_DIR": str(tmp_cache)}
    cold = _findings(t, env)
    warm = _findings(t, env)
    assert _same(cold) == _same(warm)
    assert not _reuse_notes(cold)
    notes = _reuse_notes(warm)
    assert len(notes) == 2 and "draft-extend (cpu), target-extend (cpu)" in notes[0], notes
    measured = [e["value"] for f in warm for e in f["evidence"]
                if str(e.get("metric", "")).startswith("measured syncs")]
    assert measured == [0, 0]  # draft-extend, target-extend: test_syncs_harness.EXPECTED
    assert _entries(tmp_cache, "census") and _entries(tmp_cache, "profiler_stops")
    assert locate_stops(t) == locate_stops(t)
