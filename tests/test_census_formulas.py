"""census.formulas: an argument's truth read per call into its function, against 0.5.23
deepseek_v4_backend_hip_radix.py READ BY HAND (the real site is in tests/groundtruth/
hand_census.json and census_0_5_23.json), and on damaged copies of it.

`_attach_unified_kv_prefill_meta` (:2700) calls `torch.repeat_interleave(..., output_size=
num_tokens if exact_num_tokens else None)` (:2723-2727). Its caller `init_forward_metadata_prefill`
(:1160) passes `exact_num_tokens=exact_num_tokens or host_proves_exact_num_tokens` (:1236), with
`host_proves_exact_num_tokens = (need_compress and not attach_decode_streams and
extend_seq_lens_cpu is not None and sum(extend_seq_lens_cpu) == num_tokens)` (:1221-1226). The
prefill call (:2221) passes `num_tokens=sum(extend_seq_lens_cpu)` (:2227), `exact_num_tokens=
is_draft` (:2233), `need_compress=not is_draft` (:2231), no `attach_decode_streams` (default
False, :1174), after `assert ... and extend_seq_lens_cpu is not None` (:2212-2217): exact on
every mode it serves. Target-verify's call (:1411) passes `attach_decode_streams=True` (:1425)
and `exact_num_tokens and self.is_dspark` (:1410): the sync stays there.
"""

from __future__ import annotations

import shutil

import pytest

from diag.probes.metadata_syncs.census.count import census
from diag.target import Target
from tests.conftest import release_target

pytestmark = pytest.mark.release
HIP = "sglang/srt/layers/attention/deepseek_v4_backend_hip_radix.py"
GATE = "sglang/srt/layers/attention/dsv4/unified_kv_gate.py"
ASSERT = "            and extend_seq_lens_cpu is not None\n        )\n        is_draft = ("


def _paths(t: Target, line: int = 2723) -> set[tuple[str, ...]]:
    return {s.paths for s in census(t, use_cache=False).sites
            if s.file == HIP and s.line == line and s.kind == "repeat_interleave"
            and s.verdict == "syncs"}


def _copy(tmp_path, edit) -> Target:
    src = release_target("0.5.23").root
    for rel in (HIP, GATE):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, tmp_path / rel)
    path = tmp_path / HIP
    path.write_text(edit(path.read_text()))
    return Target(root=tmp_path, version="0.5.23", origin="path")


def test_the_prefill_call_always_passes_the_size(tmp_path):
    assert _paths(_copy(tmp_path, lambda s: s)) == {("target-verify",)}


def test_without_the_assert_the_host_lengths_may_be_absent(tmp_path):
    """`extend_seq_lens_cpu is not None` no longer known at the call: on target-extend the
    argument may be false (is_draft false and no host lengths)."""
    def edit(s: str) -> str:
        assert s.count(ASSERT) == 1
        return s.replace(ASSERT, "            and True\n        )\n        is_draft = (")
    assert _paths(_copy(tmp_path, edit)) == {("target-extend", "target-verify", "other")}


def test_two_arguments_are_not_tied_where_they_come_from_different_tests(tmp_path):
    """`need_compress=not is_draft` replaced by a test of its own (one line for one: no line moves): the
    correlation that made the argument always true is gone."""
    def edit(s: str) -> str:
        old = "            need_compress=not is_draft,\n"
        assert s.count(old) == 1
        return s.replace(old, "            need_compress=self.is_dspark,\n")
    assert _paths(_copy(tmp_path, edit)) == {("target-extend", "target-verify", "other")}
