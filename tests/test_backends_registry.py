"""The one backend registry (probes.backends): the classes per phase as the release builds them,
the model family's pick between MLA and MHA, and its cache (one read per tree and platform,
read again when a file it reads changes)."""

from __future__ import annotations

import os
import shutil

import pytest

from diag.probes import backends, gate
from tests.conftest import release_target


@pytest.mark.parametrize("mla, want", [
    # 0.5.23 attention_registry.py:69 / :77, speculative/draft_utils.py:234/245 and :444/:453
    (False, {"target-verify": ["FlashInferAttnBackend"],
             "draft-decode": ["FlashInferMultiStepDraftBackend"],
             "draft-extend": ["FlashInferAttnBackend"]}),
    (True, {"target-verify": ["FlashInferMLAAttnBackend"],
            "draft-decode": ["FlashInferMLAMultiStepDraftBackend"],
            "draft-extend": ["FlashInferMLAAttnBackend"]}),
])
def test_classes_for_each_phase_follow_the_model_attention(mla, want):
    t = release_target("0.5.23")
    got = {p: backends.classes_for(t, "cuda", "flashinfer", p, mla=mla) for p in want}
    assert got == want


def test_unknown_model_keeps_both_classes_and_unknown_name_builds_nothing():
    t = release_target("0.5.23")
    assert set(backends.classes_for(t, "cuda", "flashinfer", "draft-extend")) == {
        "FlashInferAttnBackend", "FlashInferMLAAttnBackend"}
    assert backends.classes_for(t, "cuda", "no-such-backend", "draft-extend") == []


def test_map_is_read_once_and_shared_with_the_gate():
    t = release_target("0.5.23")
    a = backends.backend_map(t, "hip")
    b = gate.backend_map(t, "hip")  # the gate's name is the same registry
    assert a is not b and a.keys() == b.keys()
    assert all(a[k] is b[k] for k in a)  # the cached infos, not a second read


def test_edited_tree_is_read_again(tmp_path):
    """A tree edited in place (a new factory entry) is not answered from the cache."""
    real = release_target("0.5.23").root
    root = tmp_path / "t"
    shutil.copytree(real / "sglang/srt/speculative", root / "sglang/srt/speculative")
    shutil.copytree(real / "sglang/srt/layers/attention",
                    root / "sglang/srt/layers/attention")
    for p in ("sglang/srt/server_args.py", "sglang/srt/arg_groups"):
        (root / p).symlink_to(real / p)
    from diag.target import Target

    t = Target(root=root, version="0.5.23", origin="path")
    before = backends.backend_map(t, "cuda")
    assert before["triton"].draft_extend_classes == ["TritonAttnBackend"]
    f = root / "sglang/srt/speculative/draft_utils.py"
    text = f.read_text()
    f.write_text(text.replace('TritonAttnBackend(self.draft_model_runner, skip_prefill=False)',
                              'WaveAttnBackend(self.draft_model_runner, skip_prefill=False)', 1))
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    after = backends.backend_map(t, "cuda")
    assert after["triton"].draft_extend_classes == ["WaveAttnBackend"]
