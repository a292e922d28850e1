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


# --- IDLE for a class that opts out: the relay never sees an IDLE batch's speculative input
DSA = "sglang/srt/layers/attention/dsa_backend.py"
DP_ATTN = "sglang/srt/managers/scheduler_components/dp_attn.py"


@pytest.mark.parametrize(("version", "line", "test", "relay"), [
    # 0.5.23 dsa_backend.py:1115 `int(forward_batch.seq_lens.max().item())` in the `else` of
    # `if forward_batch.seq_lens_cpu is not None:` (:1107); DSA opts out
    # (`needs_cpu_seq_lens = False`, :505). IDLE: dp_attn.py:810-821 `ScheduleBatch.init_new([],
    # ...)` then `prepare_for_idle()`, which sets `self.seq_lens_cpu = torch.empty(0, ...)`
    # (schedule_batch.py:3606); the relay returns at overlap_utils.py:593-595 (`draft_input =
    # batch.spec_info`, `if draft_input is None: return`) before it drops the copy (:615).
    ("0.5.23", 1115, 1107, "overlap_utils.py:594"),
    # 0.5.19 dsa_backend.py:797 in the `else` of :789; prepare_for_idle :3181; the relay's
    # return overlap_utils.py:519-521, its drop :539
    ("0.5.19", 797, 789, "overlap_utils.py:520"),
])
def test_an_opted_out_class_keeps_the_copy_on_idle_only(version, line, test, relay):
    t = release_target(version)
    [s] = [s for s in census(t, use_cache=False).sites
           if s.file == DSA and s.line == line and s.backend == "DeepseekSparseAttnBackend"]
    got = {m: decide(s, SpecConfig(), m, version, "hip")
           for m in ("target-verify", "decode", "draft-extend", "idle")}
    assert got["idle"].status == "unreachable"
    assert relay in got["idle"].reason and f"dsa_backend.py:{test}" in got["idle"].reason
    # the relayed modes stay with the overlap scheduler's configuration
    assert {got[m].status for m in ("target-verify", "decode", "draft-extend")} == {"depends"}


def test_the_copy_with_its_idle_maker_decides_idle(tmp_path):
    """The control for the two below: the same files as released."""
    t = _copy(tmp_path, (DSA, BASE, RELAY, SCHEDULE, DP_ATTN))
    [s] = [s for s in census(t, use_cache=False).sites
           if s.file == DSA and s.line == 1115 and s.backend == "DeepseekSparseAttnBackend"]
    assert decide(s, SpecConfig(), "idle", "0.5.23", "hip").status == "unreachable"


def test_an_idle_batch_not_made_fresh_decides_nothing(tmp_path):
    """A `prepare_for_idle()` on a batch not made right before by `ScheduleBatch.init_new` (a
    live batch turned IDLE, which may carry the relayed input) leaves IDLE undecided."""
    t = _copy(tmp_path, (DSA, BASE, RELAY, SCHEDULE, DP_ATTN))
    path = t.root / DP_ATTN
    text = path.read_text()
    made = "        idle_batch = ScheduleBatch.init_new(\n"
    assert text.count(made) == 1
    path.write_text(text.replace(made, "        idle_batch = self.running_batch\n"
                                       "        _unused = ScheduleBatch.init_new(\n"))
    [s] = [s for s in census(t, use_cache=False).sites
           if s.file == DSA and s.line == 1115 and s.backend == "DeepseekSparseAttnBackend"]
    assert decide(s, SpecConfig(), "idle", "0.5.23", "hip").status == "depends"


def test_a_relay_without_the_early_return_decides_nothing_on_idle(tmp_path):
    t = _copy(tmp_path, (DSA, BASE, RELAY, SCHEDULE, DP_ATTN))
    path = t.root / RELAY
    text = path.read_text()
    ret = "        draft_input = batch.spec_info\n        if draft_input is None:\n            return\n"
    assert text.count(ret) >= 1
    path.write_text(text.replace(ret, "        draft_input = batch.spec_info\n"))
    [s] = [s for s in census(t, use_cache=False).sites
           if s.file == DSA and s.line == 1115 and s.backend == "DeepseekSparseAttnBackend"]
    assert decide(s, SpecConfig(), "idle", "0.5.23", "hip").status == "depends"
