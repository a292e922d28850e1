"""GPU fast paths in the census (probes/metadata_syncs/census/fast_paths.py).

Read by hand (pip download sglang==X --no-deps), not from running diag: QSA's graph replay
returns through `_can_replay_with_gpu_kernels` before its host fallback (0.5.23
qwen_sparse_attn_backend.py:1015-1027, predicate :1060-1069, qsa/graph_metadata.py:150-155;
0.5.21 :929-941, :974-983, graph_metadata.py:156-161). The predicate needs the pool to be a
QSATokenToKVPool; the backend reads `self.token_to_kv_pool.qsa_compress_ratio` (0.5.23 :559,
0.5.21 :505), which only QSATokenToKVPool sets (0.5.23 mem_cache/qsa_kv_pool.py:142, 0.5.21
:115). So `seq_lens[:bs].cpu()` (0.5.23 :1031, 0.5.21 :945) cannot run on a GPU, and the
layout's repeat_interleave (0.5.23 :455, 0.5.21 :401) runs only under capture.
"""

from __future__ import annotations

import shutil

import pytest

from diag.probes.metadata_syncs.census.count import census
from diag.probes.metadata_syncs.census.fast_paths import gpu_true_methods
from diag.probes.source import Modules, parse_file
from diag.target import Target

pytestmark = pytest.mark.release
QSA = "srt/layers/attention/qwen_sparse_attn_backend.py"
GM = "srt/layers/attention/qsa/graph_metadata.py"
POOL = "srt/mem_cache/qsa_kv_pool.py"
# release -> (predicate line, helper line, the builder's pool read, fallback .cpu(), layout RI)
HAND = {"0.5.23": (1060, 150, 559, 1031, 455), "0.5.21": (974, 156, 505, 945, 401)}


def _methods(t: Target) -> dict[str, str]:
    return gpu_true_methods(parse_file(t.file(QSA)), f"sglang/{QSA}", Modules(t))


@pytest.mark.parametrize("version", sorted(HAND))
def test_the_replay_fast_path_is_read_true_on_a_gpu(release, version):
    pred, helper, read, _, _ = HAND[version]
    why = _methods(release(version))["_can_replay_with_gpu_kernels"]
    assert f"qwen_sparse_attn_backend.py:{pred})" in why
    assert f"qsa/graph_metadata.py:{helper} `supports_graph_metadata_kernels`" in why
    assert f"qwen_sparse_attn_backend.py:{read} reads `self.token_to_kv_pool.qsa_compress_ratio`" \
        in why and "only QSATokenToKVPool sets" in why


@pytest.mark.parametrize("version", sorted(HAND))
def test_the_host_fallback_is_unreachable_and_the_layout_capture_only(release, version):
    _, _, _, cpu, ri = HAND[version]
    sites = {(s.line, s.kind): s for s in census(release(version)).sites
             if s.file == f"sglang/{QSA}"}
    assert sites[(cpu, "cpu")].verdict == "unreachable"
    assert "after the GPU fast path" in sites[(cpu, "cpu")].why
    assert (sites[(ri, "repeat_interleave")].verdict,
            sites[(ri, "repeat_interleave")].path_class) == ("capture-only", "capture-only")


def _copy(release, tmp_path) -> Target:
    """The three files the reading needs, from 0.5.23, in a tree of their own."""
    src = release("0.5.23")
    for rel in (QSA, GM, POOL):
        dst = tmp_path / "sglang" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src.file(rel), dst)
    return Target(tmp_path, "0.5.23", "path")


def test_a_second_pool_that_sets_the_attribute_leaves_it_undecided(release, tmp_path):
    """The pool's class is proven only while one class sets the attributes the backend reads:
    a second pool class with the same attributes (QSATokenToKVPool under another name)."""
    t = _copy(release, tmp_path)
    assert "_can_replay_with_gpu_kernels" in _methods(t)
    text = t.file(POOL).read_text()
    assert text.count("class QSATokenToKVPool(") == 1
    (t.file("srt/mem_cache") / "other_pool.py").write_text(
        text.replace("class QSATokenToKVPool(", "class OtherPool("))
    assert _methods(t) == {}
    site = [s for s in census(t, use_cache=False).sites
            if (s.line, s.kind) == (HAND["0.5.23"][3], "cpu")]
    assert [s.verdict for s in site] == ["syncs"]  # both ways again: counted, with its guard


def test_a_predicate_with_another_test_leaves_it_undecided(release, tmp_path):
    t = _copy(release, tmp_path)
    path = t.file(QSA)
    text = path.read_text()
    old = "        return seq_lens.is_cuda and supports_graph_metadata_kernels("
    assert text.count(old) == 1
    path.write_text(text.replace(old, "        return seq_lens.is_cuda and self.fast_ok and "
                                      "supports_graph_metadata_kernels("))
    assert _methods(t) == {}
