"""census.batch_fields: the ForwardBatch fields a target-verify step leaves None, read from each
release's `ForwardBatch.init_new`; and what that does to a builder's branch on one.

Expected values come from reading the releases (`file:line` below), not from running diag."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from diag.probes.metadata_syncs.census.batch_fields import REL, none_on_verify
from diag.probes.source import Modules

pytestmark = pytest.mark.release

BOTH = {"extend_seq_lens", "extend_prefix_lens"}


@pytest.mark.parametrize("version, where", [
    # `if ret.forward_mode.is_decode() or ret.forward_mode.is_target_verify():` ... `else:`
    # `ret.extend_seq_lens = torch.tensor(...)`; the dataclass field `= None`
    ("0.5.9", "forward_batch_info.py:483-489, default :283"),
    ("0.5.17", "forward_batch_info.py:902-920, default :532"),
    ("0.5.21", "forward_batch_info.py:1103-1122, default :631"),
    ("0.5.23", "forward_batch_info.py:1226-1245, default :666"),
])
def test_init_new_leaves_extend_lengths_none_on_verify(release, version, where):
    assert none_on_verify(Modules(release(version))) == BOTH, where


def _tree_with(tmp_path, text: str) -> Modules:
    """A tree holding only forward_batch_info.py with `text` (Modules reads nothing else)."""
    path = tmp_path / "sglang" / REL
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return Modules(SimpleNamespace(root=tmp_path))  # type: ignore[arg-type]


def test_a_release_that_sets_them_on_verify_gives_nothing(release, tmp_path):
    """The same 0.5.23 source with target-verify moved out of the test: init_new now sets both
    fields on a verify batch, so no field is left None (the reading decides, not a list)."""
    src = release("0.5.23").file(REL).read_text()
    test = "if ret.forward_mode.is_decode() or ret.forward_mode.is_target_verify():"
    assert src.count(test) == 1  # 0.5.23 forward_batch_info.py:1226
    mods = _tree_with(tmp_path, src.replace(test, "if ret.forward_mode.is_decode():"))
    assert none_on_verify(mods) == frozenset()


def test_no_forward_batch_module_gives_nothing(tmp_path):
    assert none_on_verify(Modules(SimpleNamespace(root=tmp_path))) == frozenset()  # type: ignore[arg-type]
    assert none_on_verify(None) == frozenset()


def test_qsa_verify_rows_are_draft_extend_only(release):
    """0.5.23 qwen_sparse_attn_backend.py:339-350: `extend_seq_lens = getattr(forward_batch,
    "extend_seq_lens", None)`; `if extend_seq_lens is not None:` ... `.item()` (:344) and
    `repeat_interleave` without output_size (:350), reached from the speculative-paged branch
    (target-verify or draft-extend v2, :282/:626). On target-verify the field is None."""
    from diag.probes.metadata_syncs.census.count import census

    got = {(s.line, s.kind): (s.syncs, s.paths) for s in census(release("0.5.23")).sites
           if s.file.endswith("qwen_sparse_attn_backend.py") and s.line in (344, 350)}
    assert got == {(344, "item"): (1, ("draft-extend",)),
                   (350, "repeat_interleave"): (2, ("draft-extend",))}


@pytest.mark.parametrize("version, fields", [
    ("0.5.13", set()),
    ("0.5.14", {"mamba_track_mask", "mamba_track_seqlens"}),
    ("0.5.19", {"mamba_track_mask", "mamba_track_seqlens"}),
    ("0.5.23", {"mamba_track_mask", "mamba_track_seqlens", "mamba_track_seqlens_cpu",
                "mamba_prefill_track_mask_cpu"})])
def test_the_verify_preparation_clears_the_mamba_track_fields(release, version, fields):
    """Read by hand: `prepare_mamba_track_for_verify` (speculative/spec_utils.py; 0.5.14 :573,
    0.5.19 :769-795 with `batch.mamba_track_mask = None` at :793, 0.5.23 :937 and the two _cpu
    fields beside it), called from eagle_utils.py (0.5.19 :554, 0.5.23 :372) before the verify
    ForwardBatch is built from the batch; 0.5.13 has no such function."""
    from diag.probes.metadata_syncs.census.batch_fields import cleared_for_verify

    assert set(cleared_for_verify(Modules(release(version)))) == fields


def test_the_mask_test_decides_the_any_on_target_verify(release):
    """0.5.19 hybrid_linear_attn_backend.py:137-140 `bool(forward_batch.mamba_track_mask is not
    None and forward_batch.mamba_track_mask.any())`: the `.any()` (1 sync) runs where the mask
    is set: not on target-verify (cleared above), nor draft-extend (census.wrapped)."""
    from diag.probes.metadata_syncs.census.count import census

    at = [s for s in census(release("0.5.19")).sites
          if s.file.endswith("/hybrid_linear_attn_backend.py") and s.line == 137]
    assert at and all(s.syncs == 1 and "target-extend" in s.paths
                      and "target-verify" not in s.paths and "draft-extend" not in s.paths
                      for s in at)


@pytest.mark.parametrize("version, decided, where", [
    # no speculative/eagle_worker_common.py: the draft extend is built elsewhere, not read
    ("0.5.15", False, "speculative/ has no eagle_worker_common.py"),
    # `prepare_for_draft_extend`: `batch.prefix_lens = (batch.seq_lens - front_offset)...` on
    # the GPU-only path, `[max(int(x) - front_offset, 0) for x in batch.seq_lens_cpu.tolist()]`
    # on the host path, then `ForwardMode.DRAFT_EXTEND_V2`
    ("0.5.17", True, "eagle_worker_common.py:105, 158, 163-164, 176"),
    ("0.5.21", True, "eagle_worker_common.py:106, 159, 164-165, 177"),
    ("0.5.23", True, "eagle_worker_common.py:112, 183, 188-190, 201"),
])
def test_draft_extend_prefix_lengths_are_the_committed_ones(release, version, decided, where):
    from diag.probes.metadata_syncs.census.batch_fields import prefix_on_draft_extend

    assert prefix_on_draft_extend(Modules(release(version))) is decided, where


def test_a_draft_extend_with_zero_prefixes_decides_nothing(release, tmp_path):
    """The same 0.5.23 preparation with the host path's prefix list made of zeros: the test
    `any(extend_prefix_lens_cpu)` could be false on draft-extend, so it is not decided."""
    from diag.probes.metadata_syncs.census.batch_fields import (
        DRAFT_EXTEND_REL,
        prefix_on_draft_extend,
    )

    src = release("0.5.23").file(DRAFT_EXTEND_REL).read_text()
    host = "max(int(x) - front_offset, 0) for x in batch.seq_lens_cpu.tolist()"
    assert src.count(host) == 1  # 0.5.23 eagle_worker_common.py:189
    path = tmp_path / "sglang" / DRAFT_EXTEND_REL
    path.parent.mkdir(parents=True)
    path.write_text(src.replace(host, "0 for _ in range(bs)"))
    assert prefix_on_draft_extend(Modules(SimpleNamespace(root=tmp_path))) is False  # type: ignore[arg-type]
    assert prefix_on_draft_extend(None) is False


@pytest.mark.parametrize("version, line", [("0.5.19", 1020), ("0.5.23", 1029)])
def test_flashinfer_mla_ragged_prefix_sum_is_not_on_draft_extend(release, version, line):
    """flashinfer MLA's `paged_kernel_lens.sum().item()` under `if use_ragged:` (0.5.23
    flashinfer_mla_backend.py:1027-1029, 0.5.19 :1018-1020): `use_ragged` needs `not
    any(forward_batch.extend_prefix_lens_cpu)` (0.5.23 :449-453, 0.5.19 :454-458), false on a
    draft-extend step (above); target-verify passes `use_ragged=False` (0.5.23 :447)."""
    from diag.probes.metadata_syncs.census.count import census

    at = [s for s in census(release(version)).sites
          if s.file.endswith("/flashinfer_mla_backend.py") and s.line == line]
    assert at and all(s.kind == "item" and s.syncs == 1 and s.verdict == "syncs"
                      and set(s.paths) == {"target-extend", "other"} for s in at), \
        [(s.kind, s.verdict, s.paths) for s in at]


@pytest.mark.parametrize("version, fields, where", [
    # a live batch turned IDLE: `batch.prepare_for_idle()` (speculative/eagle_worker.py:915)
    ("0.5.9", set(), "eagle_worker.py:915"),
    # `idle_batch = ScheduleBatch.init_new([], ...)`; `idle_batch.prepare_for_idle()`; the field
    # `mamba_track_mask: torch.Tensor = None`; ForwardBatch.init_new's
    # `mamba_track_mask=batch.mamba_track_mask`
    ("0.5.14", {"mamba_track_mask"},
     "dp_attn.py:304-313, schedule_batch.py:1759, forward_batch_info.py:682"),
    ("0.5.19", {"mamba_track_mask"},
     "dp_attn.py:586-595, schedule_batch.py:2232, forward_batch_info.py:792"),
    # and the draft's idle batch of a prefill (speculative/eagle_worker_v2.py:1619-1628)
    ("0.5.23", {"mamba_track_mask"},
     "dp_attn.py:811-820, schedule_batch.py:2564, forward_batch_info.py:1061"),
])
def test_an_idle_batch_leaves_the_track_mask_none(release, version, fields, where):
    from diag.probes.metadata_syncs.census.batch_fields import none_on_idle

    assert set(none_on_idle(Modules(release(version)))) == fields, where


def test_an_idle_batch_made_from_a_live_one_decides_nothing(release, tmp_path):
    """The 0.5.23 sources with the scheduler's idle batch made from a live one (the rest of the
    tree copied as it is): the mask may then be the live batch's, so nothing is decided."""
    import shutil

    from diag.probes.metadata_syncs.census.batch_fields import (
        SCHEDULE_REL,
        idle_maker_files,
        none_on_idle,
    )

    src = release("0.5.23").root / "sglang"
    dst = tmp_path / "sglang"
    for path in [src / SCHEDULE_REL, src / REL] + idle_maker_files(src):
        (dst / path.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dst / path.relative_to(src))
    assert none_on_idle(Modules(SimpleNamespace(root=tmp_path))) == {"mamba_track_mask"}  # type: ignore[arg-type]
    dp = dst / "srt/managers/scheduler_components/dp_attn.py"
    made = "idle_batch = ScheduleBatch.init_new("
    assert dp.read_text().count(made) == 1  # 0.5.23 dp_attn.py:811
    dp.write_text(dp.read_text().replace(made, "idle_batch = self.running_batch\n        _ = ("))
    assert none_on_idle(Modules(SimpleNamespace(root=tmp_path))) == frozenset()  # type: ignore[arg-type]
