"""Objects a backend holds whose class lives in another attention module (census/objects.py,
census/reach.py `foreign_class`). Expected sites from the release sources, file:line."""

from __future__ import annotations

import pytest

from diag.probes.metadata_syncs.census.count import census

pytestmark = pytest.mark.release
A = "sglang/srt/layers/attention/"
LA = A + "local_attention.py"


def test_the_local_attention_builder_is_followed_into_its_module(release):
    """0.5.23 flashattention_backend.py:241 `self.local_attn_builder =
    self._maybe_init_local_attn_builder(model_runner)`, a factory returning None or
    `LocalAttentionMetadataBuilder(...)` (:383-397) of local_attention.py. Its `build` (:96),
    called at :3403, copies `cu_seqlens_q.cpu()` / `cache_seqlens_int32.cpu()` down (:118-119)
    and two numpy results up without non_blocking (:125-126); `update_for_replay` (:168),
    called at :3148 on the decode replay path, reads `seqlens.max().item()` (:186), copies down
    (:196-197) and up (:204-205). In 0.5.19 the same code sat in flashattention_backend.py."""
    c = census(release("0.5.23"))
    got = {(s.line, s.kind): (s.verdict, s.backend) for s in c.sites if s.file == LA
           and s.verdict == "syncs"}
    assert got == {(n, k): ("syncs", "FlashAttentionBackend") for n, k in (
        (118, "cpu"), (119, "cpu"), (125, "h2d"), (126, "h2d"), (186, "item"), (196, "cpu"),
        (197, "cpu"), (204, "h2d"), (205, "h2d"))}
    [b] = [s for s in c.sites if (s.file, s.line, s.kind) == (LA, 125, "h2d")]
    assert b.callers[0].startswith(A + "flashattention_backend.py:3403 ")
    # build_for_capture (:132) runs while a graph is captured only
    assert {s.verdict for s in c.sites if s.file == LA and 132 < s.line < 168} == {
        "capture-only", "host-mirror"}


def test_a_backend_held_by_another_backend_is_left_to_its_own_module(release):
    """0.5.19 minicpm/backend.py:137 holds a `FlashAttentionBackend` and calls its
    init_forward_metadata (:389): FlashAttentionBackend's sites are its module's, read with its
    own class's facts (its `self.speculative_num_draft_tokens` is a server argument), not
    again as MiniCPM's helper."""
    c = census(release("0.5.19"))
    assert not [s for s in c.sites if s.file == A + "flashattention_backend.py"
                and s.backend == "MiniCPMSparseBackend"]
    assert [s for s in c.sites if s.file == A + "flashattention_backend.py"
            and s.backend == "FlashAttentionBackend"]
