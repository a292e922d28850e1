"""Blocking host-to-device copies (`h2d`) in the census, against rows read from the release
sources by hand (file:line below), and against what the live counter and torch agree on.

Why a sync: PyTorch's CUDA copy without `non_blocking=True` runs `memcpy_and_sync`, which waits
for the stream to drain (`c10/cuda/CUDAFunctions.h`; the sync debug mode reports it), so
`torch.tensor(host_list, device=d)` and `host_tensor.to(d)` stall the CPU like a read back.
The live counter counts both (`sync_counter`'s "blocking host->device copy"), and
`tests/test_syncs_gpu.py::test_cpu_and_gpu_agree_on_small_ops` checks on a GPU that torch's
debug mode flags the same lines; the census did not count them before: a live count could
exceed the static one on any path that copies a host list up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tests.test_syncs_hand_census as base
from diag.probes.backends import never_draft_extends
from diag.probes.metadata_syncs.census.count import census

pytestmark = pytest.mark.release
A = "sglang/srt/layers/attention/"


def _row(file: str, line: int, status: str, phases: list[str], syncs: int = 1) -> dict:
    return {"file": A + file, "line": line, "kind": "h2d", "syncs": syncs, "status": status,
            "phases": phases}


BUILDERS = {
    # DeepseekSparseAttnBackend.init_forward_metadata, the `elif
    # forward_batch.forward_mode.is_target_verify()` arm (0.5.23 dsa_backend.py:1168):
    # `torch.tensor(extend_seq_lens_cpu, dtype=torch.int32, device=device)` of the Python list
    # `[self.speculative_num_draft_tokens] * batch_size` (:1177), every eager target-verify
    # build; 0.5.19 the same arm (:835, the copy :848), 0.5.17 (:845)
    "0.5.23": [_row("dsa_backend.py", 1181, "live", ["target-verify"]),
               # aiter `_build_paged_kv_view` (:223), "the arithmetic runs on seq_lens_cpu so
               # it costs no device sync" (:229-231): `gather`, `page_indptr` and
               # `last_page_len` are host tensors (torch.zeros without a device :237-240,
               # from `seq_lens_cpu` :234), and `.to(device)` copies each up blocking (:246,
               # :248 twice). Its one caller is init_forward_metadata's extend arm (`else:`
               # :2518 after decode/idle :2065, draft-extend-v2 :2208, target-verify :2298),
               # under SGLANG_AITER_PAGED_PREFILL_ASM, gfx95, page size 64 (:2590-2603)
               _row("aiter_backend.py", 246, "live", ["target-extend", "other"]),
               _row("aiter_backend.py", 248, "live", ["target-extend", "other"]),
               # `torch.tensor(forward_batch.extend_seq_lens_cpu, dtype=torch.int32)`: no
               # device, a host tensor (:3451-3453)
               _row("aiter_backend.py", 3451, "lookalike", [], 0)],
    "0.5.19": [_row("dsa_backend.py", 848, "live", ["target-verify"])],
    "0.5.17": [_row("dsa_backend.py", 845, "live", ["target-verify"])],
}
FORWARD = {
    # QwenSparseAttnBackend.forward_extend's prefix path: `torch.tensor(sequence_lens,
    # dtype=torch.int32, device=q.device)` (:1540) of `[int(x) for x in
    # forward_batch.seq_lens_cpu]` (:1518), once per layer of an eager extend with a cached
    # prefix (the helper reader's row, tests/groundtruth/hand_read_brief.md rules)
    "0.5.23": [_row("qwen_sparse_attn_backend.py", 1540, "live", ["target-extend", "other"])],
}


@pytest.mark.parametrize("version", sorted(BUILDERS))
def test_builders_h2d_rows(release, version, monkeypatch):
    rows = BUILDERS[version]
    monkeypatch.setattr(base, "TRUTH", {"releases": {version: rows}})
    c = census(release(version))
    wrong = base.disagreements(c, version, never_draft_extends(release(version)))
    assert not wrong, "\n".join(wrong)


def test_aiter_paged_view_counts_each_copy(release):
    """Line 248 returns two copies (`page_indptr.to(device)`, `last_page_len.to(device)`): two
    sites of one sync each, none for `page_ids`, already on the device (a gather of the device
    `kv_indices`, :247)."""
    c = census(release("0.5.23"))
    at = sorted((s.line, s.col) for s in c.sites
                if s.file == A + "aiter_backend.py" and s.kind == "h2d" and s.line in (246, 247, 248))
    assert at == [(246, 27), (248, 11), (248, 45)]


@pytest.mark.parametrize(("version", "file", "line"), [
    # `lens_cpu.to(device=forward_batch.seq_lens.device, non_blocking=True)` of the host
    # `lens_cpu` in DotsSWAMLAAttnBackend._init_prefill_metadata: the same host tensor and
    # device as a blocking copy, but it does not wait
    ("0.5.23", "dots_hybrid_backend.py", 314), ("0.5.19", "dots_hybrid_backend.py", 310),
    # `delimiter_indices_cpu.to(device, non_blocking=True)`, _process_multi_item_scoring
    ("0.5.23", "flashinfer_backend.py", 676), ("0.5.19", "flashinfer_backend.py", 635)])
def test_non_blocking_copies_are_not_sites(release, version, file, line):
    c = census(release(version))
    assert any(s.file == A + file for s in c.sites)  # the builder is read
    assert not [s for s in c.sites if (s.file, s.line, s.kind) == (A + file, line, "h2d")]


def test_forward_h2d_rows(release, monkeypatch):
    rows = FORWARD["0.5.23"]
    monkeypatch.setattr(base, "TRUTH", {"releases": {"0.5.23": rows}})
    c = census(release("0.5.23"), scope="forward")
    wrong = base.disagreements(c, "0.5.23", never_draft_extends(release("0.5.23")))
    assert not wrong, "\n".join(wrong)


# ---- against an independent reader's h2d rows (tests/groundtruth/hand_h2d.json) ------------
HAND = json.loads((Path(__file__).parent / "groundtruth" / "hand_h2d.json").read_text())["rows"]
FA, LA = A + "flashattention_backend.py", A + "local_attention.py"
# (version or "*", file, line) -> why the census does not meet the reader's row yet
MISSES = {
    # the reader's NPU-only indexer rows (dsa_npu_indexer.py) and the arguments no caller passes
    # (0.5.19 dsa_indexer.py:1391 `cp_index`, 0.5.23 dsa_indexer_kpool.py:1442): the census
    # does not follow those calls, so lists them neither live nor unreachable
    ("0.5.19", A + "dsa/dsa_indexer.py", 1391): "not followed",
    ("0.5.23", A + "dsa/dsa_indexer_kpool.py", 1442): "not followed",
    **{(v, A + "dsa/dsa_npu_indexer.py", n): "not followed"
       for v, ns in (("0.5.19", (238, 288, 325, 328, 341, 344)),
                     ("0.5.23", (39, 272, 325, 343, 373, 376))) for n in ns},
}
# Where the two read a data fact differently (the census's rows are upper bounds there):
DIFFER = {
    # Llama 4 chunked attention, eager: the reader rules idle out (an empty batch fails on an
    # empty array before the copy, 0.5.19 flashattention_backend.py:3186); the census keeps it
    (FA, 3191): "idle", (FA, 3192): "idle",
    # the same copies in 0.5.23's LocalAttentionMetadataBuilder.build (local_attention.py:125,
    # :126; a bs-0 batch raises at cu_num_blocks[-1] of an empty array, :290, first)
    (LA, 125): "idle", (LA, 126): "idle",
    # multi-item scoring copies: the delimiter indices are set only for scoring batches, target
    # prefills (0.5.23 forward_batch_info.py:1328-1337); the census keeps every mode of the
    # builder's extend arm (draft-extend, other)
    (A + "flashinfer_backend.py", 685): "scoring", (A + "flashinfer_backend.py", 726): "scoring",
    # `cu_seqlens_q.new_tensor([num_padded_tokens])` (0.5.19 flashattention_backend.py:1540,
    # 0.5.23 :1764): the reader puts it on target extends only (the padding of the piecewise
    # CUDA graph, `extend_num_tokens < q.shape[0]`, 0.5.23 :1759-1762); the census does not
    # read that data test and keeps every extend-side mode of forward_extend
    (FA, 1540): "padding", (FA, 1764): "padding",
}


def _hand(version: str, forward: bool) -> list[dict]:
    out = []
    for r in HAND:
        if r["release"] != version or bool(r.get("forward_path")) != forward or \
                r.get("init_only") or (version, r["file"], r["line"]) in MISSES:
            continue
        why = DIFFER.get((r["file"], r["line"]))
        if why == "idle":
            r = r | {"phases": [*r["phases"], "idle"]}
        elif why == "scoring":
            r = r | {"phases": [*r["phases"], "draft-extend", "other"]}
        elif why == "padding":
            r = r | {"phases": [*r["phases"], "draft-extend", "target-verify", "other"]}
        out.append(r)
    return out


@pytest.mark.parametrize("forward", [False, True], ids=["builders", "forward"])
@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_census_meets_the_independent_h2d_rows(release, version, forward, monkeypatch):
    rows = _hand(version, forward)
    assert forward or sum(r["status"] == "live" for r in rows) >= 5
    monkeypatch.setattr(base, "TRUTH", {"releases": {version: rows}})
    c = census(release(version), scope="forward" if forward else "builders")
    wrong = base.disagreements(c, version, never_draft_extends(release(version)))
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_the_h2d_misses_are_still_missed(release, version, monkeypatch):
    never = never_draft_extends(release(version))
    for r in HAND:
        if r["release"] != version or (version, r["file"], r["line"]) not in MISSES:
            continue
        c = census(release(version), scope="forward" if r.get("forward_path") else "builders")
        monkeypatch.setattr(base, "TRUTH", {"releases": {version: [r]}})
        assert base.disagreements(c, version, never), (r["file"], r["line"], "now met")
