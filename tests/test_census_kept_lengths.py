"""census.kept_lengths on damaged copies of 0.5.23: a class that opts out of the host lengths, or
decides it at start, or a release without the relay, leaves aiter's mirror guard to the
configuration (the real release's reading, with its `file:line`s, is in
tests/test_census_param_mirror.py).

0.5.23 aiter_backend.py:2974 `torch.max(seq_lens).item()` runs only in the `else` of `if
seq_lens_cpu is not None` (:2970-2971); `class AiterAttnBackend(AttentionBackend):` sets no
`needs_cpu_seq_lens`, the base's `needs_cpu_seq_lens: bool = True` (base_attn_backend.py:163).
"""

from __future__ import annotations

import shutil

import pytest

from diag.context import SpecConfig
from diag.probes.metadata_syncs.census.count import census
from diag.probes.metadata_syncs.census_config import decide
from diag.target import Target
from tests.conftest import release_target

pytestmark = pytest.mark.release
AITER = "sglang/srt/layers/attention/aiter_backend.py"
BASE = "sglang/srt/layers/attention/base_attn_backend.py"
RELAY = "sglang/srt/managers/overlap_utils.py"
SCHEDULE = "sglang/srt/managers/schedule_batch.py"
CLASS = "class AiterAttnBackend(AttentionBackend):\n"


def _copy(tmp_path, rels: tuple[str, ...]) -> Target:
    src = release_target("0.5.23").root
    for rel in rels:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, tmp_path / rel)
    return Target(root=tmp_path, version="0.5.23", origin="path")


def _statuses(t: Target) -> set[str]:
    [s] = [s for s in census(t, use_cache=False).sites
           if s.file == AITER and s.line == 2974 and s.backend == "AiterAttnBackend"]
    return {decide(s, SpecConfig(), m, "0.5.23", "hip").status for m in
            ("target-verify", "decode", "draft-extend", "idle")}


def test_the_copy_as_released_keeps_them(tmp_path):
    t = _copy(tmp_path, (AITER, BASE, RELAY, SCHEDULE))
    assert _statuses(t) == {"unreachable"}


@pytest.mark.parametrize("line", ["    needs_cpu_seq_lens: bool = False\n",
                                  "    needs_cpu_seq_lens = bool(os.environ.get('X'))\n"])
def test_a_class_that_opts_out_or_decides_at_start_is_left_to_the_configuration(tmp_path,
                                                                                  line):
    t = _copy(tmp_path, (AITER, BASE, RELAY, SCHEDULE))
    path = t.root / AITER
    text = path.read_text()
    assert text.count(CLASS) == 1
    path.write_text(text.replace(CLASS, CLASS + line))  # :2974 moves one line down
    [s] = [s for s in census(t, use_cache=False).sites
           if s.file == AITER and s.line == 2975 and s.backend == "AiterAttnBackend"]
    assert {decide(s, SpecConfig(), m, "0.5.23", "hip").status
            for m in ("target-verify", "decode", "draft-extend")} == {"depends"}


def test_without_the_relay_nothing_is_decided(tmp_path):
    t = _copy(tmp_path, (AITER, BASE, SCHEDULE))  # no managers/overlap_utils.py
    assert _statuses(t) == {"depends"}
