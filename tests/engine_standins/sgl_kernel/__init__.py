"""Stand-in for `sgl_kernel`'s CPU operators, so the real SGLang server runs here (engine tests).

Why a stand-in: SGLang on CPU (`SGLANG_USE_CPU_ENGINE=1`) imports `*_cpu` operators from
`sgl_kernel` when its modules load, and no CPU build of `sgl_kernel`/`sglang-kernel` is on the
registries reachable here (`sglang-kernel` 0.4.10 is a CUDA wheel that needs torch 2.14.1 and has
no source release). Each operator the engine calls on the paths the tests run (the `intel_amx`
attention backend, a Llama target and an EAGLE draft, topk 1) is written in plain torch, ported
from the reference beside its call site in the release (the Triton kernel or the torch-native
method the CPU branch replaces; `OPERATORS` names each one). Every other name raises
NotImplementedError naming itself when called, so a path these ports do not cover fails loudly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__version__ = "0.0.0+standin"
STANDIN = True


def _not_implemented(name: str):
    def raiser(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel stand-in: {name} is not implemented (tests/engine_standins)")

    raiser.__name__ = name
    return raiser


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return _not_implemented(name)


# ---------------------------------------------------------------- dense layers
def convert_weight_packed(weight: torch.Tensor) -> torch.Tensor:
    """srt/layers/amx_utils.py: the real one packs to VNNI; the stand-in's layout is the plain one."""
    return weight.contiguous().clone()


def weight_packed_linear(mat1, mat2, bias, is_vnni: bool) -> torch.Tensor:
    """srt/layers/quantization/unquant.py (`F.linear` on the other branch); mat2 is unpacked here."""
    return F.linear(mat1, mat2, bias)


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * weight.float()).to(x.dtype)


def rmsnorm_cpu(x, weight, eps: float) -> torch.Tensor:
    """srt/layers/layernorm.py RMSNorm.forward_native."""
    return _rms(x, weight, eps)


def fused_add_rmsnorm_cpu(x, residual, weight, eps: float) -> None:
    """In place, as forward_native with a residual: residual += x; x = rmsnorm(residual)."""
    residual.add_(x)
    x.copy_(_rms(residual, weight, eps))


def silu_and_mul_cpu(x) -> torch.Tensor:
    """srt/layers/activation.py SiluAndMul.forward_native."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def _rotate(x, cos, sin, neox: bool):
    cos = cos.unsqueeze(-2).to(x.dtype)
    sin = sin.unsqueeze(-2).to(x.dtype)
    if neox:
        x1, x2 = torch.chunk(x, 2, dim=-1)
    else:
        x1, x2 = x[..., ::2], x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if neox:
        return torch.cat((o1, o2), dim=-1)
    return torch.stack((o1, o2), dim=-1).flatten(-2)


def rotary_embedding_cpu(positions, query, key, head_size: int, cos_sin_cache, is_neox: bool):
    """srt/layers/rotary_embedding/base.py RotaryEmbedding.forward_native (new tensors back)."""
    positions = positions.flatten()
    n = positions.shape[0]
    rot = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)
    out = []
    for t in (query, key):
        v = t.reshape(n, -1, head_size)
        r = _rotate(v[..., :rot], cos, sin, is_neox)
        out.append(torch.cat((r, v[..., rot:]), dim=-1).reshape(t.shape))
    return out[0], out[1]


# ---------------------------------------------------------------- attention and KV cache
def _attend(q, k, v, sm_scale: float, logit_cap: float, mask: torch.Tensor | None):
    """q [Q, H, D], k/v [L, Hkv, D]: softmax attention as torch_native_backend's sdpa call."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * sm_scale
    if logit_cap and logit_cap > 0:
        s = logit_cap * torch.tanh(s / logit_cap)
    if mask is not None:
        s = s.masked_fill(~mask.unsqueeze(0), float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("hqk,khd->qhd", p, v.float())


def _check_plain(is_cross: bool, sinks, what: str) -> None:
    if is_cross or sinks is not None:
        raise NotImplementedError(f"sgl_kernel stand-in: {what} with cross-attention or sinks")


def decode_attention_cpu(query, k_cache, v_cache, k_scale: float, v_scale: float, output, key, value,
                         loc, attn_logits, req_to_token, req_pool_indices, seq_lens, sm_scale: float,
                         logit_cap: float, is_cross: bool, sliding_window: int, encoder_lens,
                         sinks) -> None:
    """srt/layers/attention/intel_amx_backend.py forward_decode: writes this step's K/V at `loc`
    (the kernel does it in-kernel), then attends over the request's row of req_to_token."""
    _check_plain(is_cross, sinks, "decode_attention_cpu")
    if key is not None and value is not None:
        k_cache[loc] = key.to(k_cache.dtype)
        v_cache[loc] = value.to(v_cache.dtype)
    for b in range(query.shape[0]):
        n = int(seq_lens[b])
        idx = req_to_token[req_pool_indices[b], :n].long()
        if sliding_window > 0:
            idx = idx[-sliding_window:]
        kk = k_cache[idx].float() * k_scale
        vv = v_cache[idx].float() * v_scale
        output[b] = _attend(query[b:b + 1], kk, vv, sm_scale, logit_cap, None)[0].to(output.dtype)


def extend_attention_cpu(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, k_scale: float,
                         v_scale: float, req_to_token, req_pool_indices, seq_lens, extend_seq_lens,
                         extend_start_loc, max_len_extend: int | None, sm_scale: float,
                         logit_cap: float, is_cross: bool, sliding_window: int, encoder_lens, sinks,
                         tree_mask, is_causal: bool) -> None:
    """intel_amx_backend.py forward_extend (K/V already in the cache): each request's new tokens
    attend to its prefix and, causally or through the verify tree mask (the FULL_MASK layout
    written by build_tree_kernel_efficient: one [extend, seq_len] block per request), to
    each other."""
    _check_plain(is_cross, sinks, "extend_attention_cpu")
    off = 0
    for b in range(seq_lens.shape[0]):
        n, e, s = int(seq_lens[b]), int(extend_seq_lens[b]), int(extend_start_loc[b])
        prefix = n - e
        idx = req_to_token[req_pool_indices[b], :n].long()
        kk = k_buffer[idx].float() * k_scale
        vv = v_buffer[idx].float() * v_scale
        qpos = torch.arange(prefix, n).unsqueeze(1)
        kpos = torch.arange(n).unsqueeze(0)
        if tree_mask is not None:
            mask = tree_mask.flatten()[off:off + e * n].view(e, n).bool()
            off += e * n
        elif is_causal:
            mask = kpos <= qpos
        else:
            mask = None
        if sliding_window > 0:
            win = kpos > qpos - sliding_window
            mask = win if mask is None else mask & win
        o = _attend(q_extend[s:s + e], kk, vv, sm_scale, logit_cap, mask)
        o_extend[s:s + e] = o.to(o_extend.dtype)


def store_cache_cpu(k, v, k_cache, v_cache, indices, row_dim: int) -> None:
    """srt/mem_cache/memory_pool.py: the naive path below the call, `k_cache[indices] = k`."""
    k_cache.view(-1, row_dim)[indices] = k.reshape(-1, row_dim).to(k_cache.dtype)
    v_cache.view(-1, row_dim)[indices] = v.reshape(-1, row_dim).to(v_cache.dtype)


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc) -> None:
    """kernels/ops/kvcache/cache_move.py `copy_all_layer_kv_cache_tiled` (Triton): in every
    buffer (given by address and row stride in bytes) copy rows src_loc -> tgt_loc, all reads
    before the writes. The buffers are reached through their addresses, as the kernel does."""
    import ctypes

    if tgt_loc.numel() == 0:
        return
    rows = int(torch.maximum(tgt_loc.max(), src_loc.max())) + 1
    tgt, src = tgt_loc.long(), src_loc.long()
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        raw = (ctypes.c_uint8 * (rows * stride)).from_address(ptr)
        view = torch.frombuffer(raw, dtype=torch.uint8).view(rows, stride)
        view[tgt] = view[src].clone()


def init_cpu_threads_env(cpu_ids: str | None) -> str:
    """srt/distributed/bootstrap.py: the real one binds OpenMP threads; nothing to bind here."""
    return f"stand-in: threads not bound ({cpu_ids})"


_SHM = {"size": 1, "rank": 0}


def initialize(size: int, rank: int) -> None:
    """srt/distributed/bootstrap.py `_init_cpu_threads_env`: the real one maps the /dev/shm
    segments its all-reduce uses; the stand-in collectives below need only the group's size."""
    _SHM.update(size=int(size), rank=int(rank))


def _world() -> int:
    """The stand-in collectives reduce over torch.distributed's default (gloo) group, which is
    the TP group only when the engine has no other parallelism (the tests' --tp 2 servers)."""
    import torch.distributed as dist

    world = dist.get_world_size()
    if world != _SHM["size"]:
        raise NotImplementedError(f"sgl_kernel stand-in: shm collectives over a world of {world} "
                                  f"processes for a TP group of {_SHM['size']}")
    return world


def shm_allreduce(data: torch.Tensor, reduce_op: int) -> None:
    """srt/distributed/parallel_state.py GroupCoordinator.all_reduce: the branch beside it
    (`torch.distributed.all_reduce(input_, group=self.device_group)`), in place, sum only."""
    import torch.distributed as dist

    if reduce_op != 0:  # REDUCE_OP_SUM in parallel_state.py
        raise NotImplementedError(f"sgl_kernel stand-in: shm_allreduce with reduce_op {reduce_op}")
    _world()
    dist.all_reduce(data)


def shm_allgather(data: torch.Tensor, dim: int) -> torch.Tensor:
    """parallel_state.py GroupCoordinator.all_gather: the branch beside it (`all_gather_single`
    into a [world * n, ...] tensor), concatenated along `dim` as that method reshapes it."""
    import torch.distributed as dist

    parts = [torch.empty_like(data) for _ in range(_world())]
    dist.all_gather(parts, data.contiguous())
    return torch.cat(parts, dim=dim)


# ---------------------------------------------------------------- speculative decoding (Triton refs)
def _segments(start_offset, end_offset):
    off = 0
    for i in range(start_offset.shape[0]):
        a, b = int(start_offset[i]), int(end_offset[i])
        yield i, a, b, off
        off += b - a


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset,
                                 out_cache_loc, pool_len: int) -> None:
    """srt/mem_cache/allocation.py `assign_req_to_token_pool` (Triton)."""
    for i, a, b, off in _segments(start_offset, end_offset):
        req_to_token[int(req_pool_indices[i]), a:b] = out_cache_loc[off:off + b - a].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset,
                                 out_cache_loc, pool_len: int) -> None:
    """kernels/ops/speculative/cache_locs.py `assign_extend_cache_locs` (Triton)."""
    for i, a, b, off in _segments(start_offset, end_offset):
        out_cache_loc[off:off + b - a] = req_to_token[int(req_pool_indices[i]), a:b].to(out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, out_cache_loc,
                                           pool_len: int, topk: int, num_cols: int) -> None:
    """cache_locs.py `assign_draft_cache_locs_contiguous` (Triton), without positions."""
    n = topk * num_cols
    for i in range(seq_lens.shape[0]):
        s = int(seq_lens[i])
        row = req_to_token[int(req_pool_indices[i]), s:s + n]
        out_cache_loc[i * n:(i + 1) * n] = row.to(out_cache_loc.dtype)


def build_draft_decode_metadata_cpu(req_to_token, req_pool_indices, seq_lens, topk: int,
                                    num_steps: int, pool_len: int) -> torch.Tensor:
    """intel_amx_backend.py IntelAMXMultiStepDraftBackend: one req_to_token row per candidate,
    the request's prefix then that candidate's draft slots (laid out [topk, num_steps] from
    seq_len on, as assign_draft_cache_locs_contiguous hands them out)."""
    bs = seq_lens.shape[0]
    out = torch.zeros((bs * topk, pool_len), dtype=req_to_token.dtype, device=req_to_token.device)
    for b in range(bs):
        s = int(seq_lens[b])
        src = req_to_token[int(req_pool_indices[b])]
        for j in range(topk):
            r = out[b * topk + j]
            r[:s] = src[:s]
            r[s:s + num_steps] = src[s + j * num_steps:s + (j + 1) * num_steps]
    return out


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride: int) -> None:
    """kernels/ops/speculative/eagle.py `fill_bonus_tokens` (Triton)."""
    flat = accept_tokens.flatten()
    for i in range(accept_lens.shape[0]):
        bonus_tokens[i] = flat[accept_stride * i + int(accept_lens[i]) - 1]


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc) -> None:
    """eagle.py `fill_accept_out_cache_loc` (Triton): pack the accepted slots in order."""
    ai = accept_index.flatten()
    kept = ai[ai != -1].long()
    accept_out_cache_loc[:kept.numel()] = out_cache_loc[kept].to(accept_out_cache_loc.dtype)


def build_tree_kernel_efficient_cpu(parent_list, selected_index, verified_seq_len, tree_mask,
                                    positions, retrieve_index, retrieve_next_token,
                                    retrieve_next_sibling, topk: int, depth: int,
                                    draft_token_num: int, tree_mask_mode) -> None:
    """kernels/ops/speculative/spec_tree.py `sgl_build_tree_kernel_efficient_triton`, line by line."""
    mode = int(tree_mask_mode)
    if mode == 2:
        raise NotImplementedError("sgl_kernel stand-in: build_tree QLEN_ONLY_BITPACKING")
    d = draft_token_num
    pl = parent_list.reshape(parent_list.shape[0], -1) if parent_list.dim() > 1 else parent_list.view(1, -1)
    sel = selected_index.reshape(selected_index.shape[0], -1)
    tm = tree_mask.view(-1)
    prefix_sum = 0
    for b in range(verified_seq_len.shape[0]):
        seq_len = int(verified_seq_len[b])
        seq_tree_idx = d * d * b + prefix_sum * d
        prefix_sum += seq_len
        positions[b * d] = seq_len
        for i in range(d - 1, 0, -1):
            retrieve_index[b, i] = b * d + i
            parent_tb_idx = int(sel[b, i - 1]) // topk
            parent_position, found = 0, parent_tb_idx == 0
            if not found:
                parent_token_idx = int(pl[b, parent_tb_idx])
                for pp in range(d - 1):
                    if int(sel[b, pp]) == parent_token_idx:
                        parent_position, found = pp + 1, True
                        break
            if found:
                next_tok = int(retrieve_next_token[b, parent_position])
                retrieve_next_token[b, parent_position] = i
                if next_tok != -1:
                    retrieve_next_sibling[b, i] = next_tok
        retrieve_index[b, 0] = b * d
        for x in range(d):
            if mode == 0:
                t = seq_tree_idx + (seq_len + d) * x + seq_len + 1
            else:
                t = d * d * b + d * x + 1
            tm[t - 1] = True
            tm[t:t + d - 1] = False
            if x > 0:
                cur, position = x - 1, 0
                for _ in range(depth):
                    position += 1
                    tm[t + cur] = True
                    parent_tb_idx = int(sel[b, cur]) // topk
                    if parent_tb_idx == 0:
                        break
                    parent_token_idx = int(pl[b, parent_tb_idx])
                    hit = [cp for cp in range(d - 1) if int(sel[b, cp]) == parent_token_idx]
                    if not hit:
                        break
                    cur = hit[0]
                positions[b * d + x] = position + seq_len


def verify_tree_greedy_cpu(predicts, accept_index, accept_token_num, candidates, retrive_index,
                           retrive_next_token, retrive_next_sibling, target_predict) -> None:
    """spec_tree.py `verify_tree_greedy_kernel_triton`, one request at a time."""
    ns = accept_index.shape[1]
    tp = target_predict.flatten()
    for bx in range(candidates.shape[0]):
        last = int(retrive_index[bx, 0])
        accept_index[bx, 0] = last
        num_accept, cur = 0, 0
        for _ in range(1, ns):
            cur = int(retrive_next_token[bx, cur])
            target = int(tp[last])
            matched = False
            while cur != -1:
                if int(candidates[bx, cur]) == target:
                    predicts[last] = target
                    num_accept += 1
                    last = int(retrive_index[bx, cur])
                    accept_index[bx, num_accept] = last
                    matched = True
                    break
                cur = int(retrive_next_sibling[bx, cur])
            if not matched:
                break
        accept_token_num[bx] = num_accept
        predicts[last] = tp[last]


# ---------------------------------------------------------------- registration under torch.ops.sgl_kernel
# The engine calls these through torch.ops.sgl_kernel (schemas as the call sites pass arguments).
_TORCH_OPS = {
    "convert_weight_packed": "(Tensor weight) -> Tensor",
    "weight_packed_linear": "(Tensor mat1, Tensor mat2, Tensor? bias, bool is_vnni) -> Tensor",
    "rmsnorm_cpu": "(Tensor input, Tensor weight, float eps) -> Tensor",
    "fused_add_rmsnorm_cpu": "(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps) -> ()",
    "silu_and_mul_cpu": "(Tensor input) -> Tensor",
    "rotary_embedding_cpu": ("(Tensor positions, Tensor query, Tensor key, int head_size, "
                             "Tensor cos_sin_cache, bool is_neox) -> (Tensor, Tensor)"),
    "decode_attention_cpu": (
        "(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, float k_scale, float v_scale, "
        "Tensor(c!) output, Tensor? key, Tensor? value, Tensor loc, Tensor(d!) attn_logits, "
        "Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, float sm_scale, "
        "float logit_cap, bool is_cross, int sliding_window, Tensor? encoder_lens, "
        "Tensor? sinks) -> ()"),
    "extend_attention_cpu": (
        "(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, "
        "Tensor k_buffer, Tensor v_buffer, float k_scale, float v_scale, Tensor req_to_token, "
        "Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, "
        "Tensor extend_start_loc, int? max_len_extend, float sm_scale, float logit_cap, "
        "bool is_cross, int sliding_window, Tensor? encoder_lens, Tensor? sinks, "
        "Tensor? tree_mask, bool is_causal) -> ()"),
    "store_cache_cpu": ("(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, "
                        "Tensor indices, int row_dim) -> ()"),
    "init_cpu_threads_env": "(str? cpu_ids) -> str",
    "initialize": "(int size, int rank) -> ()",
    "shm_allreduce": "(Tensor(a!) data, int reduce_op) -> ()",
    "shm_allgather": "(Tensor data, int dim) -> Tensor",
}

# Every operator the stand-in implements, with the reference it is ported from (tests list them).
OPERATORS = {name: globals()[name].__doc__.splitlines()[0] for name in (
    *_TORCH_OPS,
    "assign_req_to_token_pool_cpu", "assign_extend_cache_locs_cpu",
    "assign_draft_cache_locs_contiguous_cpu", "build_draft_decode_metadata_cpu",
    "copy_all_layer_kv_cache_cpu", "fill_bonus_tokens_cpu", "fill_accept_out_cache_loc_cpu", "build_tree_kernel_efficient_cpu",
    "verify_tree_greedy_cpu",
)}


# Read from torch.ops.sgl_kernel when a module loads, never called on the tests' paths: each
# raises NotImplementedError naming itself if it ever is.
IMPORT_ONLY = ("apply_rotary_pos_emb_cpu", "flash_attn_varlen_func", "conv3d_embed_cpu",
               "fused_sigmoid_gating_delta_rule_update_cpu", "fused_gdn_gating_cpu")


# Releases before the KV-scale arguments (0.5.17, 0.5.18, 0.5.19: intel_amx_backend.py passes
# no k_scale/v_scale, and extend has no is_causal) call the attention operators with this ABI.
_OLD_ATTENTION = {
    "decode_attention_cpu": (
        "(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor(c!) output, Tensor? key, "
        "Tensor? value, Tensor loc, Tensor(d!) attn_logits, Tensor req_to_token, "
        "Tensor req_pool_indices, Tensor seq_lens, float sm_scale, float logit_cap, "
        "bool is_cross, int sliding_window, Tensor? encoder_lens, Tensor? sinks) -> ()"),
    "extend_attention_cpu": (
        "(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, "
        "Tensor k_buffer, Tensor v_buffer, Tensor req_to_token, Tensor req_pool_indices, "
        "Tensor seq_lens, Tensor extend_seq_lens, Tensor extend_start_loc, int? max_len_extend, "
        "float sm_scale, float logit_cap, bool is_cross, int sliding_window, "
        "Tensor? encoder_lens, Tensor? sinks, Tensor? tree_mask) -> ()"),
}


def _old_decode(q, kc, vc, o, k, v, loc, logits, r2t, rpi, sl, sm, cap, cross, win, enc, sinks):
    decode_attention_cpu(q, kc, vc, 1.0, 1.0, o, k, v, loc, logits, r2t, rpi, sl, sm, cap, cross,
                         win, enc, sinks)


def _old_extend(q, k, v, o, kb, vb, r2t, rpi, sl, el, es, mx, sm, cap, cross, win, enc, sinks,
                tree_mask):
    extend_attention_cpu(q, k, v, o, kb, vb, 1.0, 1.0, r2t, rpi, sl, el, es, mx, sm, cap, cross,
                         win, enc, sinks, tree_mask, True)


def _old_abi() -> bool:
    """Whether the installed SGLang's intel_amx backend calls the attention operators without
    KV scales (read from its source; sglang is being imported, so it is not imported here)."""
    try:
        import importlib.util
        import os

        spec = importlib.util.find_spec("sglang")
        root = list(spec.submodule_search_locations)[0]
        path = os.path.join(root, "srt", "layers", "attention", "intel_amx_backend.py")
        with open(path, encoding="utf-8") as fh:
            return "key_scale" not in fh.read()
    except Exception:
        return False


def _register() -> None:
    if hasattr(torch.ops.sgl_kernel, "convert_weight_packed"):
        return
    for name in IMPORT_ONLY:
        setattr(torch.ops.sgl_kernel, name, _not_implemented(name))
    global _LIB
    _LIB = torch.library.Library("sgl_kernel", "DEF")  # noqa: PLW0603 (kept alive with the module)
    old = _old_abi()
    for name, schema in _TORCH_OPS.items():
        fn = globals()[name]
        if old and name in _OLD_ATTENTION:
            schema = _OLD_ATTENTION[name]
            fn = _old_decode if name == "decode_attention_cpu" else _old_extend
        _LIB.define(name + schema)
        _LIB.impl(name, fn, "CompositeImplicitAutograd")


_register()
