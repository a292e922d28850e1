"""Pure-torch stand-in for `sgl_kernel.flash_attn` (FlashAttention 3), for SGLang 0.5.22's
`--attention-backend fa3` (srt/layers/attention/flashattention_backend.py) on a GPU where no
sglang-kernel wheel fits the installed torch.

SGLang's backend code (metadata builders, CUDA-graph capture and replay) runs unmodified; only the
FA3 kernels are replaced. Served, on a Llama (MHA/GQA) target with an EAGLE draft, topk 1, page
size 1, no sliding window, no local attention (every other feature raises NotImplementedError
naming its argument rather than computing something else):
- `flash_attn_with_kvcache`: paged KV cache read through `page_table` + `cache_seqlens`, q either
  (batch, seqlen_q, nheads, d) or varlen (total_q, nheads, d) with `cu_seqlens_q` +
  `max_seqlen_q`; causal (bottom-right aligned), GQA, `window_size`, `softcap`,
  `return_softmax_lse`, `out=`. Prefill/extend, decode, target-verify, draft-decode and
  draft-extend all come here.
- `flash_attn_varlen_func`: contiguous varlen K/V (or a paged cache with `page_table` +
  `seqused_k`); not on this path (the backend uses it for MLA or embedding models), kept correct.
- `get_scheduler_metadata`: returns None; the backend treats None as "no precomputed schedule"
  (flashattention_backend.py: `if sched is not None`, `metadata.scheduler_metadata is not None`).

CUDA-graph capture safety (the point of this module): `flash_attn_with_kvcache` never reads the
device from the host (no .item()/.tolist()/.cpu(), no nonzero, no boolean-mask indexing, no
repeat_interleave) and every shape comes from argument shapes or Python ints: the key axis is
page_table.shape[1] * page_size (pages gathered through page_table, positions >= cache_seqlens
masked), varlen q is laid out per sequence as (batch, max_seqlen_q) slots gathered from
`cu_seqlens_q`, and each query token finds its slot again by torch.searchsorted. Rows with no
visible key (e.g. padding rows of a graph-sized batch, tokens past cu_seqlens_q[-1]) give zeros and
lse -inf (FA3 writes zeros; its lse there is +inf without split-KV and -inf with it; -inf is
log(0), which merge_state gives zero weight). Queries past max_seqlen_q in their sequence are not
computed (zeros), as FA3 sizes its grid by max_seqlen_q.

Cost: float32 math, online softmax over chunks of pages. Per chunk of Lc keys it holds the
gathered K and V, batch * Lc * nheads_k * (d + dv) floats, and the scores,
batch * nheads * max_seqlen_q * Lc floats (a few copies); Lc is chosen so that this stays under
CHUNK_BYTES (SGLK_STANDIN_FA3_CHUNK_MB, default 256 MiB). Every call still reads all
page_table.shape[1] pages of every row (a decode graph's table is context_len / page_size wide),
so the time grows with the context length, not with the tokens really cached.
"""
from __future__ import annotations

import os

import torch

from . import _counted

CHUNK_BYTES = int(float(os.environ.get("SGLK_STANDIN_FA3_CHUNK_MB", "256")) * (1 << 20))

_NEG_INF = float("-inf")


def _not_implemented(fn, **features):
    for name, val in features.items():
        if val is not None and val is not False:
            raise NotImplementedError(
                f"sgl_kernel stand-in (CUDA): {fn} with {name}={_short(val)} is not implemented")


def _short(val):
    if isinstance(val, torch.Tensor):
        return f"<tensor {tuple(val.shape)}>"
    return repr(val)


def _out_dtype(q):
    return q.dtype if q.dtype in (torch.float16, torch.bfloat16, torch.float32) else torch.bfloat16


def _window(window_size):
    if window_size is None:
        return -1, -1
    left, right = int(window_size[0]), int(window_size[1])
    return left, right


def _attend(qp, qlen, klen, k_pages, v_pages, page_table, scale, causal, window, softcap):
    """Attention of padded queries over paged keys.

    qp (B, Mq, h, d); qlen, klen (B,) int64 (queries / keys of each sequence); k_pages
    (num_pages, page_size, hk, d), v_pages (num_pages, page_size, hk, dv); page_table (B, P).
    Query slot i of sequence b sits at key position klen[b] - qlen[b] + i (bottom-right aligned)
    and is computed only when i < qlen[b]. Returns out (B, Mq, h, dv) and lse (B, Mq, h), float32.
    """
    B, Mq, h, d = qp.shape
    num_pages, ps, hk, _ = k_pages.shape
    dv = v_pages.shape[-1]
    if h % hk:
        raise ValueError(f"nheads ({h}) must be a multiple of nheads_k ({hk})")
    g = h // hk
    P = page_table.shape[1]
    dev = qp.device
    wl, wr = window

    qf = qp.float().reshape(B, Mq, hk, g, d).permute(0, 2, 1, 3, 4).reshape(B, hk, Mq * g, d)
    i = torch.arange(Mq, device=dev)
    diag = (klen - qlen).view(B, 1) + i.view(1, Mq)             # (B, Mq)
    row_ok = i.view(1, Mq) < qlen.view(B, 1)                     # (B, Mq)

    m = torch.full((B, hk, Mq * g), _NEG_INF, device=dev)
    lsum = torch.zeros((B, hk, Mq * g), device=dev)
    acc = torch.zeros((B, hk, Mq * g, dv), device=dev)

    per_key = 4 * B * (hk * (d + dv) * 2 + 3 * h * Mq)
    pages_per_chunk = max(1, CHUNK_BYTES // max(1, per_key * ps))
    for p0 in range(0, P, pages_per_chunk):
        pt = page_table[:, p0:p0 + pages_per_chunk].long().clamp(0, num_pages - 1)
        c = pt.shape[1]
        lc = c * ps
        j = p0 * ps + torch.arange(lc, device=dev)               # key positions of this chunk
        key_ok = j.view(1, lc) < klen.view(B, 1)                 # (B, lc)
        kc = k_pages[pt].reshape(B, lc, hk, d).float()
        vc = v_pages[pt].reshape(B, lc, hk, dv).float()
        # keys past cache_seqlens may hold anything (stale or never-written slots): keep 0 * v finite
        vc = torch.where(key_ok.view(B, lc, 1, 1), vc, 0.0)
        s = torch.matmul(qf, kc.permute(0, 2, 3, 1)) * scale    # (B, hk, Mq*g, lc)
        if softcap > 0:
            s = torch.tanh(s / softcap) * softcap
        ok = key_ok.view(B, 1, lc) & row_ok.view(B, Mq, 1)      # (B, Mq, lc)
        jj = j.view(1, 1, lc)
        dd = diag.view(B, Mq, 1)
        if causal:
            ok = ok & (jj <= dd)
        if wl >= 0:
            ok = ok & (jj >= dd - wl)
        if wr >= 0:
            ok = ok & (jj <= dd + wr)
        ok = ok.view(B, 1, Mq, 1, lc).expand(B, 1, Mq, g, lc).reshape(B, 1, Mq * g, lc)
        s = torch.where(ok, s, _NEG_INF)
        m_new = torch.maximum(m, s.amax(dim=-1))
        m_safe = torch.where(m_new == _NEG_INF, 0.0, m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe.unsqueeze(-1))
        lsum = lsum * alpha + p.sum(dim=-1)
        acc = acc * alpha.unsqueeze(-1) + torch.matmul(p, vc.permute(0, 2, 1, 3))
        m = m_new

    seen = lsum > 0
    out = acc / torch.where(seen, lsum, 1.0).unsqueeze(-1)
    m_safe = torch.where(seen, m, 0.0)
    lse = torch.where(seen, m_safe + torch.log(torch.where(seen, lsum, 1.0)), _NEG_INF)
    out = out.reshape(B, hk, Mq, g, dv).permute(0, 2, 1, 3, 4).reshape(B, Mq, h, dv)
    lse = lse.reshape(B, hk, Mq, g).permute(0, 2, 1, 3).reshape(B, Mq, h)
    return out, lse


def _varlen_attend(q, cu_seqlens_q, max_seqlen_q, klen, k_pages, v_pages, page_table, scale,
                   causal, window, softcap):
    """q (total_q, h, d) varlen by cu_seqlens_q (B + 1); returns out (total_q, h, dv) float32 and
    lse (h, total_q). Static shapes: B from cu_seqlens_q, Mq from max_seqlen_q (a Python int)."""
    total, h, _ = q.shape
    dv = v_pages.shape[-1]
    dev = q.device
    B = cu_seqlens_q.shape[0] - 1
    if total == 0 or B <= 0:
        return (torch.zeros((total, h, dv), device=dev),
                torch.full((h, total), _NEG_INF, device=dev))
    if isinstance(max_seqlen_q, int) and max_seqlen_q > 0:
        Mq = min(max_seqlen_q, total)
    else:  # unknown (None or a tensor): every sequence may hold every token
        Mq = total
    cu = cu_seqlens_q.long()
    starts = cu[:-1]
    qlen = cu[1:] - starts
    slot_tok = (starts.view(B, 1) + torch.arange(Mq, device=dev).view(1, Mq)).clamp(0, total - 1)
    qp = q[slot_tok]                                             # (B, Mq, h, d)
    out_p, lse_p = _attend(qp, qlen, klen, k_pages, v_pages, page_table, scale, causal, window,
                           softcap)
    tok = torch.arange(total, device=dev)
    b = torch.searchsorted(cu, tok, right=True) - 1              # sequence of each token
    in_batch = (b >= 0) & (b < B)
    bc = b.clamp(0, B - 1)
    pos = tok - cu[bc]                                           # its index within the sequence
    ok = in_batch & (pos >= 0) & (pos < Mq)
    flat = bc * Mq + pos.clamp(0, Mq - 1)
    out = torch.where(ok.view(total, 1, 1), out_p.reshape(B * Mq, h, dv)[flat], 0.0)
    lse = torch.where(ok.view(total, 1), lse_p.reshape(B * Mq, h)[flat], _NEG_INF)
    return out, lse.t()


def _finish(res, lse, q, out, return_softmax_lse):
    res = res.to(_out_dtype(q))
    if out is not None:
        out.copy_(res.reshape(out.shape))
        res = out
    return (res, lse) if return_softmax_lse else res


def _paged_attention(fn, q, k_pages, v_pages, page_table, cache_seqlens, cu_seqlens_q,
                     max_seqlen_q, softmax_scale, causal, window_size, softcap, return_softmax_lse,
                     out):
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    window = _window(window_size)
    softcap = float(softcap or 0.0)
    num_rows = page_table.shape[0]
    if cu_seqlens_q is not None:
        if q.dim() != 3:
            raise ValueError(f"{fn}: varlen q must be (total_q, nheads, headdim), got {tuple(q.shape)}")
        B = cu_seqlens_q.shape[0] - 1
    else:
        if q.dim() != 4:
            raise ValueError(f"{fn}: q must be (batch, seqlen, nheads, headdim) without cu_seqlens_q, "
                             f"got {tuple(q.shape)}")
        B = q.shape[0]
    if num_rows < B:
        raise ValueError(f"{fn}: page_table has {num_rows} rows for a batch of {B}")
    page_table = page_table[:B]
    keys = page_table.shape[1] * k_pages.shape[1]
    if cache_seqlens is None:
        klen = torch.full((B,), keys, dtype=torch.long, device=q.device)
    elif isinstance(cache_seqlens, int):
        klen = torch.full((B,), cache_seqlens, dtype=torch.long, device=q.device)
    else:
        klen = cache_seqlens[:B].long()
    if cu_seqlens_q is not None:
        res, lse = _varlen_attend(q, cu_seqlens_q, max_seqlen_q, klen, k_pages, v_pages,
                                  page_table, softmax_scale, causal, window, softcap)
    else:
        Sq = q.shape[1]
        qlen = torch.full((B,), Sq, dtype=torch.long, device=q.device)
        res, lse = _attend(q, qlen, klen, k_pages, v_pages, page_table, softmax_scale, causal,
                           window, softcap)
        lse = lse.permute(0, 2, 1)                               # (B, h, Sq), as FA3
    return _finish(res, lse, q, out, return_softmax_lse)


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    qv=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    page_table=None,
    cu_seqlens_q=None,
    cu_seqlens_k_new=None,
    max_seqlen_q=None,
    rotary_seqlens=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    attention_chunk=None,
    softcap=0.0,
    rotary_interleaved=True,
    scheduler_metadata=None,
    num_splits=0,
    pack_gqa=None,
    sm_margin=0,
    only_qv=False,
    return_softmax_lse=False,
    sinks=None,
    out=None,
):
    """FA3 attention of q over a (paged) KV cache; the argument order is sgl-kernel's (SGLang
    0.5.22 kernels/ops/attention/flash_attention_v3.py passes the first 28 positionally).

    Returns out ((total_q, nheads, dv) for varlen q, else (batch, seqlen_q, nheads, dv)), or
    (out, softmax_lse) with lse float32 of shape (nheads, total_q) / (batch, nheads, seqlen_q).
    Ignored (scheduling hints only): scheduler_metadata, num_splits, pack_gqa, sm_margin,
    rotary_interleaved, and cu_seqlens_k_new (it only describes k/v, which must be None here).
    """
    _not_implemented(
        "flash_attn_with_kvcache", k=k, v=v, qv=qv, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        rotary_seqlens=rotary_seqlens, cache_batch_idx=cache_batch_idx,
        cache_leftpad=cache_leftpad, q_descale=q_descale, k_descale=k_descale,
        v_descale=v_descale, sinks=sinks, only_qv=only_qv or None,
        attention_chunk=attention_chunk or None)
    if page_table is None:  # (batch_cache, seqlen_cache, hk, d): one page per batch row
        B = cu_seqlens_q.shape[0] - 1 if cu_seqlens_q is not None else q.shape[0]
        page_table = torch.arange(B, dtype=torch.int32, device=q.device).view(B, 1)
    return _paged_attention("flash_attn_with_kvcache", q, k_cache, v_cache, page_table,
                            cache_seqlens, cu_seqlens_q, max_seqlen_q, softmax_scale, causal,
                            window_size, softcap, return_softmax_lse, out)


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q=None,
    max_seqlen_k=None,
    seqused_q=None,
    seqused_k=None,
    page_table=None,
    softmax_scale=None,
    causal=False,
    qv=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    window_size=(-1, -1),
    attention_chunk=0,
    softcap=0.0,
    num_splits=1,
    pack_gqa=None,
    only_qv=False,
    sm_margin=0,
    return_softmax_lse=False,
    sinks=None,
    out=None,
):
    """FA3 varlen attention: q (total_q, nheads, d) and k/v (total_k, nheads_k, d) split by
    cu_seqlens_q / cu_seqlens_k (seqused_k, when given, the keys used of each sequence), or k/v a
    paged cache read through page_table with seqused_k. Returns out (total_q, nheads, dv), or
    (out, lse (nheads, total_q)). Not captured in CUDA graphs by SGLang: without max_seqlen_k
    (contiguous k) it reads the longest sequence from the device."""
    _not_implemented(
        "flash_attn_varlen_func", seqused_q=seqused_q, qv=qv, q_descale=q_descale,
        k_descale=k_descale, v_descale=v_descale, sinks=sinks, only_qv=only_qv or None,
        attention_chunk=attention_chunk or None)
    if q.dim() != 3:
        raise ValueError(f"flash_attn_varlen_func: q must be (total_q, nheads, headdim), got {tuple(q.shape)}")
    if page_table is not None:
        if seqused_k is None:
            raise ValueError("flash_attn_varlen_func: a paged KV cache (page_table) needs seqused_k")
        return _paged_attention("flash_attn_varlen_func", q, k, v, page_table, seqused_k,
                                cu_seqlens_q, max_seqlen_q, softmax_scale, causal, window_size,
                                softcap, return_softmax_lse, out)
    total_k = k.shape[0]
    cuk = cu_seqlens_k.long()
    B = cu_seqlens_q.shape[0] - 1
    klen = seqused_k[:B].long() if seqused_k is not None else cuk[1:B + 1] - cuk[:B]
    if isinstance(max_seqlen_k, int) and max_seqlen_k >= 0:
        mk = max_seqlen_k
    else:
        mk = int(klen.max().item()) if B > 0 else 0
    if max_seqlen_q is None or isinstance(max_seqlen_q, torch.Tensor):
        cq = cu_seqlens_q.long()
        max_seqlen_q = int((cq[1:] - cq[:-1]).max().item()) if B > 0 else 0
    # each key its own page: page b, j = the key at cu_seqlens_k[b] + j
    idx = (cuk[:B].view(B, 1) + torch.arange(mk, device=q.device).view(1, mk))
    idx = idx.clamp(0, max(total_k - 1, 0))
    return _paged_attention("flash_attn_varlen_func", q, k.unsqueeze(1), v.unsqueeze(1), idx, klen,
                            cu_seqlens_q, max_seqlen_q, softmax_scale, causal, window_size, softcap,
                            return_softmax_lse, out)


def get_scheduler_metadata(*args, **kwargs):
    """FA3's precomputed split-KV schedule. The stand-in schedules nothing: None, which
    flashattention_backend.py (0.5.22) takes as "not applicable" at every use."""
    return None


flash_attn_with_kvcache = _counted(flash_attn_with_kvcache, "flash_attn.flash_attn_with_kvcache")
flash_attn_varlen_func = _counted(flash_attn_varlen_func, "flash_attn.flash_attn_varlen_func")
get_scheduler_metadata = _counted(get_scheduler_metadata, "flash_attn.get_scheduler_metadata")
