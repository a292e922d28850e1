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
