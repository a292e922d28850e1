"""The FA3 stand-in (tests/engine_standins_cuda/sgl_kernel/flash_attn.py) against a float64
reference written here, and its CUDA-graph capture safety.

Why a stand-in: the GPU lane runs the real, unmodified SGLang 0.5.22 server on an H200 with
`--attention-backend fa3` (srt/layers/attention/flashattention_backend.py), whose kernels come from
`sgl_kernel.flash_attn` (the sglang-kernel wheel). No sglang-kernel wheel fits the GPU machine's
torch 2.11, so the kernels are replaced by pure torch; the backend's own Python metadata code and
SGLang's CUDA-graph capture code run unmodified, only the kernel is replaced. That is only sound if
the stand-in computes FA3's attention for the argument shapes the backend passes (checked here
against an independent per-sequence loop in float64) and never reads the device from the host
(checked here by recording the aten ops it dispatches), since decode, target-verify, draft-decode
and draft-extend run it inside CUDA-graph capture.
"""

from __future__ import annotations

import importlib
import inspect
import math
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

STANDINS = Path(__file__).resolve().parent / "engine_standins_cuda"


@pytest.fixture(scope="module")
def standin():
    """The CUDA stand-in package and its flash_attn module, imported in isolation: another test
    module imports the CPU stand-in under the same name `sgl_kernel`, so sys.modules, sys.path and
    sys.meta_path are put back afterwards."""
    saved_mods = {n: m for n, m in sys.modules.items()
                  if n == "sgl_kernel" or n.startswith("sgl_kernel.")}
    for n in saved_mods:
        del sys.modules[n]
    saved_meta, saved_path = list(sys.meta_path), list(sys.path)
    sys.path.insert(0, str(STANDINS))
    try:
        pkg = importlib.import_module("sgl_kernel")
        fa = importlib.import_module("sgl_kernel.flash_attn")
        yield pkg, fa
    finally:
        for n in [n for n in sys.modules if n == "sgl_kernel" or n.startswith("sgl_kernel.")]:
            del sys.modules[n]
        sys.modules.update(saved_mods)
        sys.meta_path[:] = saved_meta
        sys.path[:] = saved_path


@pytest.fixture
def fa(standin):
    return standin[1]


# ------------------------------------------------------------------ inputs and reference
def make_case(seed, cache_lens, q_lens, *, page_size=1, h=4, hk=4, d=64, dv=None, dtype=torch.float32,
              extra_cols=3, spare_pages=7):
    """Random paged KV cache (pages scattered over the pool), page table with garbage past each
    sequence's pages, varlen q split by cu_seqlens_q."""
    g = torch.Generator().manual_seed(seed)
    dv = dv or d
    need = [math.ceil(n / page_size) for n in cache_lens]
    width = max(need + [1]) + extra_cols
    num_pages = sum(need) + spare_pages
    k_cache = torch.randn(num_pages, page_size, hk, d, generator=g).to(dtype)
    v_cache = torch.randn(num_pages, page_size, hk, dv, generator=g).to(dtype)
    perm = torch.randperm(num_pages, generator=g)
    page_table = torch.randint(0, num_pages, (len(cache_lens), width), generator=g, dtype=torch.int32)
    at = 0
    for b, n in enumerate(need):
        page_table[b, :n] = perm[at:at + n].to(torch.int32)
        at += n
    q = torch.randn(sum(q_lens), h, d, generator=g).to(dtype)
    cu = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(q_lens), 0)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, page_table=page_table,
                cache_seqlens=torch.tensor(cache_lens, dtype=torch.int32), cu_seqlens_q=cu,
                max_seqlen_q=max(q_lens))


def reference(q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, *, scale=None,
              causal=True, window=(-1, -1), softcap=0.0):
    """Per sequence and head, in float64: keys gathered through page_table, bottom-right causal
    mask, optional window and softcap. Returns out (total_q, h, dv), lse (h, total_q)."""
    total, h, d = q.shape
    ps, hk, dv = k_cache.shape[1], k_cache.shape[2], v_cache.shape[-1]
    scale = d ** -0.5 if scale is None else scale
    out = torch.zeros(total, h, dv, dtype=torch.float64)
    lse = torch.full((h, total), float("-inf"), dtype=torch.float64)
    for b in range(cu_seqlens_q.numel() - 1):
        s, e = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        lq, lk = e - s, int(cache_seqlens[b])
        keys = [(int(page_table[b, j // ps]), j % ps) for j in range(lk)]
        K = torch.stack([k_cache[p, o] for p, o in keys]).double() if keys else torch.zeros(0, hk, d, dtype=torch.float64)
        V = torch.stack([v_cache[p, o] for p, o in keys]).double() if keys else torch.zeros(0, hk, dv, dtype=torch.float64)
        for i in range(lq):
            pos = lk - lq + i
            allowed = [j for j in range(lk)
                       if (not causal or j <= pos)
                       and (window[0] < 0 or j >= pos - window[0])
                       and (window[1] < 0 or j <= pos + window[1])]
            if not allowed:
                continue
            for hh in range(h):
                kh = hh // (h // hk)
                sc = (K[allowed, kh] @ q[s + i, hh].double()) * scale
                if softcap > 0:
                    sc = torch.tanh(sc / softcap) * softcap
                lse[hh, s + i] = torch.logsumexp(sc, 0)
                out[s + i, hh] = torch.softmax(sc, 0) @ V[allowed, kh]
    return out, lse


def rel_err(a, ref):
    return ((a.double() - ref).norm() / ref.norm()).item()


TOL = {torch.float32: 1e-3, torch.bfloat16: 2e-2}


def run(fa, case, **kw):
    return fa.flash_attn_with_kvcache(
        q=case["q"], k_cache=case["k_cache"], v_cache=case["v_cache"],
        page_table=case["page_table"], cache_seqlens=case["cache_seqlens"],
        cu_seqlens_q=case["cu_seqlens_q"], max_seqlen_q=case["max_seqlen_q"], **kw)


def ref_of(case, **kw):
    return reference(case["q"], case["k_cache"], case["v_cache"], case["page_table"],
                     case["cache_seqlens"], case["cu_seqlens_q"], **kw)


# ------------------------------------------------------------------ accuracy
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("bs", [1, 5, 32])
def test_decode_one_query_per_sequence_matches_reference(fa, bs, page_size, dtype):
    lens = [int(x) for x in torch.randint(1, 70, (bs,), generator=torch.Generator().manual_seed(bs))]
    case = make_case(100 * bs + page_size, lens, [1] * bs, page_size=page_size, dtype=dtype)
    out = run(fa, case, causal=True)
    ref, _ = ref_of(case)
    assert out.dtype == dtype and out.shape == case["q"].shape
    assert rel_err(out, ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batched_4d_query_matches_reference_and_lse_is_batch_heads_seqlen(fa, dtype):
    case = make_case(7, [9, 40, 3], [2, 2, 2], page_size=16, dtype=dtype)
    q4 = case["q"].view(3, 2, 4, 64)
    out, lse = fa.flash_attn_with_kvcache(q4, case["k_cache"], case["v_cache"],
                                          cache_seqlens=case["cache_seqlens"],
                                          page_table=case["page_table"], causal=True,
                                          return_softmax_lse=True)
    ref, ref_lse = ref_of(case)
    assert out.shape == q4.shape and lse.shape == (3, 4, 2) and lse.dtype == torch.float32
    assert rel_err(out.reshape(6, 4, 64), ref) < TOL[dtype]
    assert torch.allclose(lse.permute(0, 2, 1).reshape(6, 4).t().double(), ref_lse, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("page_size", [1, 16])
def test_three_draft_tokens_varlen_causal_matches_reference(fa, page_size, dtype):
    """Target-verify shape: 3 tokens a sequence, keys = prefix + the 3 drafts, causal."""
    lens = [3, 17, 64, 5, 33, 100]
    case = make_case(11 + page_size, lens, [3] * len(lens), page_size=page_size, dtype=dtype)
    out = run(fa, case, causal=True)
    ref, _ = ref_of(case)
    assert rel_err(out, ref) < TOL[dtype]


def test_draft_extend_uneven_accept_lengths_match_reference(fa):
    """Draft-extend (v2): tokens a sequence vary (accepted 1..3), max_seqlen_q the static 3."""
    case = make_case(12, [8, 30, 4, 51], [1, 3, 2, 3], page_size=1)
    case["max_seqlen_q"] = 3
    out = run(fa, case, causal=True)
    ref, _ = ref_of(case)
    assert rel_err(out, ref) < TOL[torch.float32]


@pytest.mark.parametrize("h,hk", [(8, 2), (4, 1), (6, 3)])
def test_gqa_query_heads_share_their_kv_head(fa, h, hk):
    case = make_case(13 + h, [12, 40, 7], [3, 3, 3], page_size=16, h=h, hk=hk)
    out = run(fa, case, causal=True)
    ref, _ = ref_of(case)
    assert rel_err(out, ref) < TOL[torch.float32]


def test_gqa_differs_from_using_the_wrong_kv_head(fa):
    """The GQA check can fail: mapping query head i to kv head i % hk instead gives other values."""
    case = make_case(14, [25, 40], [3, 3], h=4, hk=2)
    ref, _ = ref_of(case)
    swapped = dict(case, k_cache=case["k_cache"].flip(2), v_cache=case["v_cache"].flip(2))
    assert rel_err(run(fa, swapped, causal=True), ref) > 0.1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_return_softmax_lse_gives_heads_by_tokens_float32(fa, dtype):
    case = make_case(15, [10, 3, 66], [3, 3, 3], page_size=16, dtype=dtype)
    out, lse = run(fa, case, causal=True, return_softmax_lse=True)
    ref, ref_lse = ref_of(case)
    assert lse.shape == (4, 9) and lse.dtype == torch.float32
    assert rel_err(out, ref) < TOL[dtype]
    assert torch.allclose(lse.double(), ref_lse, atol=1e-3, rtol=1e-4)
    # the backend's own unpacking: `o, softmax_lse, *_ = result; softmax_lse.T.contiguous()`
    o, softmax_lse, *_ = run(fa, case, causal=True, return_softmax_lse=True)
    assert softmax_lse.T.contiguous().shape == (9, 4)


def test_out_is_written_in_place_and_returned(fa):
    case = make_case(16, [5, 20], [3, 3])
    buf = torch.full((6, 4 * 64), float("nan"))  # forward_batch._attn_output, viewed per head
    out_view = buf.view(-1, 4, 64)
    res = run(fa, case, causal=True, out=out_view)
    ref, _ = ref_of(case)
    assert res.data_ptr() == buf.data_ptr()
    assert rel_err(buf.view(6, 4, 64), ref) < TOL[torch.float32]
    res2, lse = run(fa, case, causal=True, out=out_view, return_softmax_lse=True)
    assert res2.data_ptr() == buf.data_ptr() and lse.shape == (4, 6)


def test_padding_rows_of_a_graph_sized_batch_are_zero_and_finite(fa):
    """A replay of a graph captured for 4 sequences x 3 tokens with 2 real sequences: padded
    sequences have cache_seqlens 1 and page-table row 0 (their rows are computed, finite), and q
    rows past cu_seqlens_q[-1] belong to no sequence (zeros, lse -inf). Stale slots past each
    sequence's keys hold NaN/inf: they must not leak in."""
    case = make_case(17, [9, 21, 1, 1], [3, 3, 3, 3], page_size=1)
    case["page_table"][2:] = 0                    # padded sequences read the padding slot 0
    used = {0} | {int(p) for b, n in enumerate([9, 21]) for p in case["page_table"][b, :n]}
    stale = [p for p in range(case["k_cache"].shape[0]) if p not in used]
    case["k_cache"][stale] = float("nan")
    case["v_cache"][stale] = float("inf")
    for b, n in enumerate([9, 21]):               # garbage columns point at the poisoned slots
        case["page_table"][b, n:] = stale[b]
    case["page_table"][0, -1] = 10 ** 6           # out of range: must not crash either
    ref, ref_lse = ref_of(case)
    case["cu_seqlens_q"] = torch.tensor([0, 3, 6, 9, 9], dtype=torch.int32)  # 3 tokens unowned
    out, lse = run(fa, case, causal=True, return_softmax_lse=True)
    assert torch.isfinite(out).all()
    assert rel_err(out[:6], ref[:6]) < TOL[torch.float32]
    assert torch.allclose(lse[:, :6].double(), ref_lse[:, :6], atol=1e-3)
    assert (out[9:] == 0).all() and torch.isneginf(lse[:, 9:]).all()
    # sequence 2 (1 key, 3 queries, causal): only its last query sees a key
    assert (out[6:8] == 0).all() and torch.isneginf(lse[:, 6:8]).all()
    assert rel_err(out[8], ref[8]) < TOL[torch.float32]


@pytest.mark.parametrize("window", [(4, 0), (10, -1), (0, 0)])
def test_sliding_window_matches_reference(fa, window):
    case = make_case(18 + window[0], [30, 12, 50], [3, 3, 3], page_size=16)
    out = run(fa, case, causal=True, window_size=window)
    ref, _ = ref_of(case, window=window)
    assert rel_err(out, ref) < TOL[torch.float32]
    full, _ = ref_of(case)
    assert rel_err(full, ref) > 0.05  # the window changes the answer here


def test_non_causal_with_right_window_matches_reference(fa):
    case = make_case(19, [30, 12], [3, 3])
    out = run(fa, case, causal=False, window_size=(5, 1))
    ref, _ = ref_of(case, causal=False, window=(5, 1))
    assert rel_err(out, ref) < TOL[torch.float32]


def test_softcap_and_softmax_scale_match_reference(fa):
    case = make_case(20, [30, 12, 44], [3, 3, 3])
    case["q"] = case["q"] * 4
    out = run(fa, case, causal=True, softcap=5.0, softmax_scale=0.3)
    ref, _ = ref_of(case, softcap=5.0, scale=0.3)
    assert rel_err(out, ref) < TOL[torch.float32]
    plain, _ = ref_of(case, scale=0.3)
    assert rel_err(plain, ref) > 0.05


def test_key_chunks_give_the_same_attention(fa, monkeypatch):
    """A wide page table read in several chunks (online softmax across them)."""
    case = make_case(21, [5, 200, 130], [3, 3, 3], page_size=16, extra_cols=20)
    ref, ref_lse = ref_of(case)
    monkeypatch.setattr(fa, "CHUNK_BYTES", 1)  # one page a chunk
    out, lse = run(fa, case, causal=True, return_softmax_lse=True)
    assert rel_err(out, ref) < TOL[torch.float32]
    assert torch.allclose(lse.double(), ref_lse, atol=1e-3)


def test_unpaged_cache_one_row_per_sequence(fa):
    g = torch.Generator().manual_seed(22)
    k_cache, v_cache = torch.randn(3, 40, 2, 32, generator=g), torch.randn(3, 40, 2, 32, generator=g)
    q = torch.randn(3, 1, 4, 32, generator=g)
    lens = torch.tensor([40, 7, 19], dtype=torch.int32)
    out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, causal=True)
    ref, _ = reference(q.view(3, 4, 32), k_cache.view(120, 1, 2, 32), v_cache.view(120, 1, 2, 32),
                       (torch.arange(40).view(1, 40) + 40 * torch.arange(3).view(3, 1)).int(),
                       lens, torch.arange(4, dtype=torch.int32))
    assert rel_err(out.view(3, 4, 32), ref) < TOL[torch.float32]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_varlen_func_prefill_with_prefix_matches_reference(fa, dtype):
    """flash_attn_varlen_func with contiguous K/V (keys = cached prefix + new tokens), causal."""
    g = torch.Generator().manual_seed(23)
    q_lens, k_lens = [5, 1, 12], [9, 1, 30]
    h, hk, d = 4, 2, 64
    q = torch.randn(sum(q_lens), h, d, generator=g).to(dtype)
    k = torch.randn(sum(k_lens), hk, d, generator=g).to(dtype)
    v = torch.randn(sum(k_lens), hk, d, generator=g).to(dtype)
    cu_q = torch.tensor([0, 5, 6, 18], dtype=torch.int32)
    cu_k = torch.tensor([0, 9, 10, 40], dtype=torch.int32)
    out, lse = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_seqlen_q=12, max_seqlen_k=30,
                                         causal=True, return_softmax_lse=True)
    pt = torch.zeros(3, 30, dtype=torch.int32)
    for b in range(3):
        pt[b, :k_lens[b]] = torch.arange(int(cu_k[b]), int(cu_k[b + 1]))
    ref, ref_lse = reference(q, k.unsqueeze(1), v.unsqueeze(1), pt, torch.tensor(k_lens), cu_q)
    assert rel_err(out, ref) < TOL[dtype] and lse.shape == (4, 18)
    assert torch.allclose(lse.double(), ref_lse, atol=2e-2 if dtype == torch.bfloat16 else 1e-3)
    again = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, causal=True)  # maxima read from device
    assert torch.equal(again, out)


def test_varlen_func_paged_with_seqused_k_matches_kvcache(fa):
    case = make_case(24, [8, 31], [3, 3], page_size=16)
    out = fa.flash_attn_varlen_func(case["q"], case["k_cache"], case["v_cache"],
                                    case["cu_seqlens_q"], None, max_seqlen_q=3,
                                    seqused_k=case["cache_seqlens"], page_table=case["page_table"],
                                    causal=True)
    ref, _ = ref_of(case)
    assert rel_err(out, ref) < TOL[torch.float32]


# ------------------------------------------------------------------ interface
# SGLang 0.5.22 kernels/ops/attention/flash_attention_v3.py (flash_attn_with_kvcache) passes
# these to sgl_kernel.flash_attn.flash_attn_with_kvcache positionally, in this order, then
# sm_margin, only_qv, return_softmax_lse, sinks and out by keyword.
V3_POSITIONAL = ["q", "k_cache", "v_cache", "k", "v", "qv", "rotary_cos", "rotary_sin",
                 "cache_seqlens", "cache_batch_idx", "cache_leftpad", "page_table", "cu_seqlens_q",
                 "cu_seqlens_k_new", "max_seqlen_q", "rotary_seqlens", "q_descale", "k_descale",
                 "v_descale", "softmax_scale", "causal", "window_size", "attention_chunk",
                 "softcap", "rotary_interleaved", "scheduler_metadata", "num_splits", "pack_gqa"]
V3_KEYWORDS = ["sm_margin", "only_qv", "return_softmax_lse", "sinks", "out"]
# ... and flash_attn_varlen_func all by keyword
V3_VARLEN_KEYWORDS = ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k",
                      "seqused_q", "seqused_k", "page_table", "softmax_scale", "causal", "qv",
                      "q_descale", "k_descale", "v_descale", "window_size", "attention_chunk",
                      "softcap", "num_splits", "pack_gqa", "only_qv", "sm_margin",
                      "return_softmax_lse", "sinks", "out"]


def test_signatures_take_sglang_0_5_22_wrappers_arguments(fa):
    kv = list(inspect.signature(fa.flash_attn_with_kvcache).parameters)
    assert kv[:len(V3_POSITIONAL)] == V3_POSITIONAL
    assert set(V3_KEYWORDS) <= set(kv)
    assert set(V3_VARLEN_KEYWORDS) <= set(inspect.signature(fa.flash_attn_varlen_func).parameters)


def test_positional_call_as_the_v3_wrapper_makes_it(fa):
    case = make_case(25, [6, 19], [3, 3])
    args = dict.fromkeys(V3_POSITIONAL)
    args.update(q=case["q"], k_cache=case["k_cache"], v_cache=case["v_cache"],
                cache_seqlens=case["cache_seqlens"], page_table=case["page_table"],
                cu_seqlens_q=case["cu_seqlens_q"], cu_seqlens_k_new=torch.zeros(3, dtype=torch.int32),
                max_seqlen_q=3, causal=True, window_size=(-1, -1), softcap=0.0,
                rotary_interleaved=True, num_splits=0, scheduler_metadata=None)
    out = torch.empty(6, 4, 64)
    res, lse = fa.flash_attn_with_kvcache(*[args[n] for n in V3_POSITIONAL], sm_margin=0,
                                          only_qv=False, return_softmax_lse=True, sinks=None, out=out)
    ref, _ = ref_of(case)
    assert res is out and rel_err(out, ref) < TOL[torch.float32]


@pytest.mark.parametrize("name", ["k", "v", "qv", "rotary_cos", "rotary_sin", "rotary_seqlens",
                                  "cache_batch_idx", "cache_leftpad", "q_descale", "k_descale",
                                  "v_descale", "sinks"])
def test_unused_features_raise_naming_the_argument(fa, name):
    case = make_case(26, [6], [1])
    with pytest.raises(NotImplementedError, match=rf"with {name}="):
        run(fa, case, causal=True, **{name: torch.ones(1)})


def test_only_qv_and_attention_chunk_raise(fa):
    case = make_case(27, [6], [1])
    with pytest.raises(NotImplementedError, match="only_qv"):
        run(fa, case, only_qv=True)
    with pytest.raises(NotImplementedError, match="attention_chunk"):
        run(fa, case, attention_chunk=128)
    with pytest.raises(NotImplementedError, match="seqused_q"):
        fa.flash_attn_varlen_func(case["q"], case["q"], case["q"], case["cu_seqlens_q"],
                                  case["cu_seqlens_q"], seqused_q=torch.ones(1, dtype=torch.int32))


def test_get_scheduler_metadata_returns_none_as_the_backend_tolerates(fa):
    # flashattention_backend.py (0.5.22) _compute_scheduler_metadata's keywords
    assert fa.get_scheduler_metadata(
        batch_size=2, max_seqlen_q=1, max_seqlen_k=64, num_heads=4, num_heads_k=4, headdim=64,
        cache_seqlens=torch.ones(2, dtype=torch.int32), qkv_dtype=torch.bfloat16,
        cu_seqlens_q=torch.arange(3, dtype=torch.int32), page_size=1, causal=True,
        has_softcap=False, num_splits=0) is None


def test_real_file_wins_over_the_raiser_submodules(standin, monkeypatch):
    pkg, fa = standin
    assert Path(fa.__file__).resolve() == STANDINS / "sgl_kernel" / "flash_attn.py"
    assert not pkg._real_submodule("kvcacheio")
    # permissive mode (every sgl_kernel.<sub> a raiser module) still loads the file
    monkeypatch.setenv("SGLK_STANDIN_PERMISSIVE", "1")
    monkeypatch.delitem(sys.modules, "sgl_kernel.flash_attn")
    again = importlib.import_module("sgl_kernel.flash_attn")
    assert Path(again.__file__).resolve() == STANDINS / "sgl_kernel" / "flash_attn.py"
    assert type(importlib.import_module("sgl_kernel.kvcacheio")).__name__ == "_SubModule"
    monkeypatch.setitem(sys.modules, "sgl_kernel.flash_attn", fa)
    assert pkg.merge_state_v2.__qualname__ == "sgl_kernel.merge_state_v2"  # import-only raiser
    with pytest.raises(NotImplementedError, match="merge_state_v2"):
        pkg.merge_state_v2(None, None, None, None)


def test_0_5_22_module_level_sgl_kernel_imports_resolve(standin):
    """0.5.22's srt/layers/quantization/gguf.py:44-45 (imported by quantization/__init__.py:22 in
    every server) imports these on CUDA; they resolve to raisers (never called for a Llama)."""
    pkg, _ = standin
    assert pkg.moe_align_block_size.__qualname__ == "sgl_kernel.moe_align_block_size"
    quant = importlib.import_module("sgl_kernel.quantization")
    with pytest.raises(NotImplementedError, match="ggml_moe_get_block_size"):
        quant.ggml_moe_get_block_size(1)


def test_calls_are_recorded_also_during_capture(standin, monkeypatch):
    pkg, fa = standin
    name = "flash_attn.flash_attn_with_kvcache"
    before, captured = pkg._CALLED.get(name, 0), pkg._CAPTURED.get(name, 0)
    case = make_case(28, [6], [1])
    run(fa, case, causal=True)
    assert pkg._CALLED[name] == before + 1
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    run(fa, case, causal=True)
    assert pkg._CAPTURED[name] == captured + 1
    fa.get_scheduler_metadata(batch_size=1)
    assert pkg._CALLED["flash_attn.get_scheduler_metadata"] >= 1


# ------------------------------------------------------------------ capture safety
class OpRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        res = func(*args, **kwargs)
        outs = res if isinstance(res, (tuple, list)) else (res,)
        shapes = tuple(tuple(o.shape) for o in outs if isinstance(o, torch.Tensor))
        self.ops.append((func, args, kwargs, shapes))
        return res


_SYNCING = {"aten::_local_scalar_dense", "aten::item", "aten::nonzero", "aten::masked_select",
            "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive"}
_INDEXING = {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_",
             "aten::_unsafe_index", "aten::_unsafe_index_put"}


def _arg(func, args, kwargs, name):
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            return kwargs.get(name, args[i] if i < len(args) else None)
    return None


def host_reads(ops):
    """Each recorded op that reads the device from the host or sizes its output by values."""
    bad = []
    for func, args, kwargs, _ in ops:
        name = func._schema.name
        if name in _SYNCING:
            bad.append(name)
        elif name == "aten::repeat_interleave" and _arg(func, args, kwargs, "output_size") is None:
            bad.append(name + " without output_size")
        elif name in _INDEXING:
            idx = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in idx or ()):
                bad.append(name + " with a bool index")
    return bad


def _captured_calls(fa, case):
    out = torch.empty_like(case["q"])
    run(fa, case, causal=True)                                            # decode / verify
    run(fa, case, causal=True, return_softmax_lse=True, out=out)          # lse + out=
    run(fa, dict(case, max_seqlen_q=None), causal=True, window_size=(4, 0), softcap=30.0)


def test_recorder_catches_host_reads():
    """The detector itself: each forbidden pattern is reported."""
    x = torch.randn(8)
    with OpRecorder() as rec:
        x.sum().item()
        _ = x[x > 0]
        torch.nonzero(x)
        torch.repeat_interleave(x, torch.full((8,), 2))
        torch.masked_select(x, x > 0)
    bad = host_reads(rec.ops)
    assert "aten::_local_scalar_dense" in bad
    assert "aten::nonzero" in bad
    assert "aten::masked_select" in bad
    assert "aten::repeat_interleave without output_size" in bad
    assert "aten::index with a bool index" in bad
    with OpRecorder() as rec:
        torch.repeat_interleave(x, torch.full((8,), 2), output_size=16)  # capture-safe form
    assert host_reads(rec.ops) == []


@pytest.mark.parametrize("page_size", [1, 16])
def test_kvcache_path_never_reads_the_device_from_the_host(fa, page_size):
    case = make_case(29, [9, 40, 1, 1], [3, 3, 3, 3], page_size=page_size, h=8, hk=2)
    with OpRecorder() as rec:
        _captured_calls(fa, case)
    assert rec.ops, "nothing recorded"
    assert host_reads(rec.ops) == []


def test_kvcache_path_shapes_do_not_depend_on_values(fa):
    """The same ops with the same shapes whatever the lengths, tables and token split hold (a
    graph captured once replays any of them)."""
    a = make_case(30, [9, 40, 1, 2], [3, 3, 3, 3], page_size=16)
    g = torch.Generator().manual_seed(31)
    b = dict(a, cache_seqlens=torch.tensor([60, 2, 33, 17], dtype=torch.int32),
             cu_seqlens_q=torch.tensor([0, 1, 4, 6, 9], dtype=torch.int32),
             page_table=torch.randint(0, a["k_cache"].shape[0], a["page_table"].shape, generator=g,
                                      dtype=torch.int32),
             q=torch.randn(a["q"].shape, generator=g))
    traces = []
    for case in (a, b):
        with OpRecorder() as rec:
            run(fa, case, causal=True, return_softmax_lse=True)
        traces.append([(f._schema.name, shapes) for f, _, _, shapes in rec.ops])
    assert traces[0] == traces[1]
