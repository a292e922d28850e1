"""The sgl_kernel stand-in (tests/engine_standins/sgl_kernel): what it implements, and a check
that it computes what SGLang's own torch path computes.

Why a stand-in at all: SGLang on CPU imports `*_cpu` operators from `sgl_kernel`, and no CPU build
of `sgl_kernel`/`sglang-kernel` is on the registries reachable here (`sglang-kernel` 0.4.10 is a
CUDA wheel needing torch 2.14.1, with no source release), so none of these can be the real one.

The check (`engine` lane): the same plain (non-speculative) server, same random 2-layer Llama,
greedy, once with `--attention-backend intel_amx` (every layer goes through the stand-in:
weight_packed_linear, rmsnorm, silu_and_mul, rotary, extend/decode attention, store_cache) and
once with `torch_native` (SGLang's own torch code, `srt/layers/attention/torch_native_backend.py`,
no sgl_kernel call): the tokens must be equal.
"""

from __future__ import annotations

import concurrent.futures
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "engine_standins"))

import engine_models  # noqa: E402
import engine_server  # noqa: E402
import sgl_kernel as standin  # noqa: E402

# Every operator the 0.5.23 engine calls on the lane's paths (with SGLANG_USE_CPU_ENGINE=1, read
# at srt/utils/common.py:222, modules load `*_cpu` operators from sgl_kernel; plus
# copy_all_layer_kv_cache_cpu, which the KV pool's warm-up calls), with where 0.5.23 calls it.
CALLED = {
    "convert_weight_packed": "srt/layers/amx_utils.py (packing at load)",
    "weight_packed_linear": "srt/layers/quantization/unquant.py (every linear layer)",
    "rmsnorm_cpu": "srt/layers/layernorm.py RMSNorm.forward_cpu",
    "fused_add_rmsnorm_cpu": "srt/layers/layernorm.py RMSNorm.forward_cpu",
    "silu_and_mul_cpu": "srt/layers/activation.py SiluAndMul.forward_cpu",
    "rotary_embedding_cpu": "srt/layers/rotary_embedding/base.py forward_cpu",
    "decode_attention_cpu": "srt/layers/attention/intel_amx_backend.py forward_decode",
    "extend_attention_cpu": "srt/layers/attention/intel_amx_backend.py forward_extend",
    "store_cache_cpu": "srt/mem_cache/memory_pool.py (KV write)",
    "init_cpu_threads_env": "srt/distributed/bootstrap.py _init_cpu_threads_env",
    "initialize": "srt/distributed/bootstrap.py _init_cpu_threads_env",
    # --tp 2 (tests/test_engine_tp2.py): is_shm_available (srt/utils/common.py:4528) holds once
    # bootstrap.py:288 sets LOCAL_SIZE, so the collectives go through these
    "shm_allreduce": "srt/distributed/parallel_state.py:697 GroupCoordinator.all_reduce",
    "shm_allgather": "srt/distributed/parallel_state.py:1427 GroupCoordinator.all_gather",
    "copy_all_layer_kv_cache_cpu": "kernels/ops/kvcache/cache_move.py (KV pool warm-up)",
    "assign_req_to_token_pool_cpu": "srt/mem_cache/allocation.py assign_req_to_token_pool_func",
    "assign_extend_cache_locs_cpu": "kernels/ops/speculative/cache_locs.py",
    "assign_draft_cache_locs_contiguous_cpu": "kernels/ops/speculative/cache_locs.py",
    "build_draft_decode_metadata_cpu": "intel_amx_backend.py IntelAMXMultiStepDraftBackend",
    "fill_bonus_tokens_cpu": "kernels/ops/speculative/eagle.py fill_bonus_tokens_func",
    "fill_accept_out_cache_loc_cpu": "kernels/ops/speculative/eagle.py",
    "build_tree_kernel_efficient_cpu": "kernels/ops/speculative/spec_tree.py",
    "verify_tree_greedy_cpu": "kernels/ops/speculative/spec_tree.py verify_tree_greedy_func",
}


def test_standin_implements_exactly_the_called_operators():
    assert set(standin.OPERATORS) == set(CALLED)
    for name, ref in standin.OPERATORS.items():
        assert ref, f"{name} names no reference"
    for name in standin._TORCH_OPS:  # registered where the engine looks for them
        assert hasattr(torch.ops.sgl_kernel, name), name


def test_every_other_name_raises_naming_itself():
    with pytest.raises(NotImplementedError, match="fused_experts_cpu"):
        standin.fused_experts_cpu(torch.zeros(1))
    with pytest.raises(NotImplementedError, match="apply_rotary_pos_emb_cpu"):
        torch.ops.sgl_kernel.apply_rotary_pos_emb_cpu(torch.zeros(1))


def _collectives(rank: int, store: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        standin.initialize(2, rank)
        x = torch.full((2, 3), float(rank + 1))
        torch.ops.sgl_kernel.shm_allreduce(x, int(dist.ReduceOp.SUM))
        g = torch.ops.sgl_kernel.shm_allgather(torch.full((2, 1), float(rank)), -1)
        torch.save({"sum": x, "gather": g}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def test_shm_collectives_reduce_across_two_real_ranks(tmp_path):
    """Two processes in a real gloo group: the all-reduce sums in place (1 + 2 on every rank, as
    parallel_state.py's `torch.distributed.all_reduce` branch would) and the all-gather
    concatenates the ranks' tensors along `dim` in rank order (its `all_gather_single` branch)."""
    torch.multiprocessing.spawn(_collectives, args=(str(tmp_path / "store"), str(tmp_path / "o")),
                                nprocs=2)
    for rank in (0, 1):
        got = torch.load(tmp_path / f"o.{rank}")
        assert torch.equal(got["sum"], torch.full((2, 3), 3.0))
        assert torch.equal(got["gather"], torch.tensor([[0.0, 1.0], [0.0, 1.0]]))


def test_shm_collectives_refuse_a_world_other_than_the_tp_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 's'}", rank=0, world_size=1)
    try:
        standin.initialize(2, 0)  # a TP group of 2 in a world of 1: not what the stand-in covers
        with pytest.raises(NotImplementedError, match="world of 1 processes for a TP group of 2"):
            standin.shm_allreduce(torch.zeros(2), 0)
    finally:
        standin.initialize(1, 0)
        dist.destroy_process_group()


def test_verify_tree_greedy_accepts_the_matching_chain():
    # one request, a chain of 3 draft tokens (topk 1): candidates [root, a, b]; the target
    # predicts a after root, b after a, c after b -> both drafts accepted, bonus c.
    cand = torch.tensor([[7, 11, 12]])
    target = torch.tensor([[11, 12, 13]])
    idx = torch.tensor([[0, 1, 2]])
    nxt = torch.tensor([[1, 2, -1]])
    sib = torch.full((1, 3), -1)
    predicts = torch.zeros(3, dtype=torch.long)
    accept_index = torch.full((1, 3), -1)
    accept_num = torch.zeros(1, dtype=torch.long)
    standin.verify_tree_greedy_cpu(predicts, accept_index, accept_num, cand, idx, nxt, sib, target)
    assert accept_num.tolist() == [2]
    assert accept_index.tolist() == [[0, 1, 2]]
    assert predicts.tolist() == [11, 12, 13]


@pytest.fixture(scope="module")
def two_servers(release, tmp_path_factory):
    why = engine_server.missing_env()
    if why:
        pytest.skip(why)
    t = release("0.5.23")
    tmp = tmp_path_factory.mktemp("standin-check")
    made = engine_models.in_env(engine_server.VENV_PY, "make", tmp / "models", 0)
    target = Path(made["target"])
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futs = {b: pool.submit(engine_server.start, t.root, target, tmp / f"{b}.log",
                               attention=b) for b in ("intel_amx", "torch_native")}
        servers, errors = {}, []
        for b, f in futs.items():
            try:
                servers[b] = f.result()
            except Exception as e:  # noqa: PERF203
                errors.append(f"{b}: {e}")
    try:
        if errors:
            raise RuntimeError("; ".join(errors))
        yield servers
    finally:
        for s in servers.values():
            s.stop()


@pytest.mark.engine
@pytest.mark.release
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_standin_greedy_tokens_equal_torch_native(two_servers):
    amx, native = two_servers["intel_amx"], two_servers["torch_native"]
    code, body = amx.get("/server_info")
    assert code == 200 and '"attention_backend": "intel_amx"' in body.replace('":"', '": "')
    for prompt in ([5, 6, 7], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50], [300]):
        a = amx.generate(prompt, 24)["output_ids"]
        b = native.generate(prompt, 24)["output_ids"]
        assert a == b, (prompt, a, b)
        assert len(set(a)) > 1  # a real continuation, not one token repeated
