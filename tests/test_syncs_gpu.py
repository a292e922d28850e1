"""On a GPU: the CPU counter must agree with torch's sync debug mode; the bench's counts."""

from __future__ import annotations

import pytest
import torch

from diag.probes.metadata_syncs import builder_harness as h
from diag.probes.metadata_syncs.sync_counter import DeviceTags, count_syncs

pytestmark = [pytest.mark.gpu, pytest.mark.release]


def _same_lines_on_cpu_and_gpu(work):
    """Run `work` on a CUDA tensor (torch's sync debug mode) and on a CPU tensor tagged as a
    device tensor (the CPU counter); both must flag the same lines. Returns the CPU report."""
    g = torch.tensor([1, 2, 3], device="cuda")
    torch.cuda.synchronize()
    with count_syncs("gpu") as gpu:
        work(g)
    c = torch.tensor([1, 2, 3])
    with count_syncs("cpu", DeviceTags(device=[c])) as cpu:
        work(c)
    assert [e.line for e in cpu.events] == [e.line for e in gpu.events], (
        [(e.op, e.line) for e in cpu.events], [e.line for e in gpu.events])
    return cpu


def test_gpu_counts_repeat_interleave_two_then_zero():
    reps = torch.tensor([1, 2, 3], device="cuda")
    x = torch.arange(3, device="cuda")
    torch.cuda.synchronize()
    with count_syncs("gpu") as without:
        torch.repeat_interleave(x, reps)
    with count_syncs("gpu") as with_size:
        torch.repeat_interleave(x, reps, output_size=6)
    assert (without.count, with_size.count) == (2, 0)
    assert all(e.file == __file__ for e in without.events)
    assert torch.cuda.get_sync_debug_mode() == 0  # restored


def test_cpu_and_gpu_agree_on_small_ops():
    def work(t):
        t.sum().item()
        t.tolist()
        t[t > 1]
        t.nonzero()
        torch.repeat_interleave(torch.arange(3, device=t.device), t)
        torch.tensor([1, 2], device=t.device)
        torch.tensor([1, 2]).to(t.device)

    _same_lines_on_cpu_and_gpu(work)


def test_cpu_and_gpu_agree_on_mask_assignment():
    """`x[mask] = 0` is masked_fill_ (no sync); a device value needs the mask's indices (sync)."""

    def work(t):
        t[t > 1] = 0
        v = t[:1] + 4
        t[t > 0] = v

    cpu = _same_lines_on_cpu_and_gpu(work)
    assert len(cpu.events) == 1


@pytest.mark.parametrize("version", ["0.5.17", "0.5.18", "0.5.23"])
def test_cpu_count_equals_gpu_count_for_the_real_builder(release, version):
    t = release(version)
    for path in h.PATHS:
        gpu = h.measure(t, path, "gpu")
        cpu = h.measure(t, path, "cpu")
        assert gpu.executed and cpu.executed, (gpu.error, cpu.error)
        assert gpu.syncs == cpu.syncs, (path, gpu.sites, cpu.sites)
        print(f"{version} {path}: gpu {gpu.syncs} cpu {cpu.syncs}")


def test_patched_builder_equal_on_gpu(release):
    from diag.fixes import repeat_interleave_output_size as ri

    cls = h.dsv4_class(release("0.5.17"))
    expr = ri.host_count_expr("draft")
    inp = h.make_inputs(cls.__dict__[h.ATTACH], "draft-extend", 64, device="cuda")
    before = h.call(cls, inp)
    patch = ri.make_patch(cls.__module__, "draft")
    patch.apply()
    try:
        after = h.call(cls, inp, expr)
        m = h.measure(release("0.5.17"), "draft-extend", "gpu", patched_expr=expr, cls=cls)
    finally:
        patch.revert()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert m.syncs == 0


@pytest.mark.slow
def test_bench_on_gpu_counts_and_times(release):
    """The bench's counts and that it measured both sides; the time ratio itself is a bench
    figure (diag bench), not a test threshold."""
    from diag.fixes.bench_metadata import run

    release("0.5.17")
    res = run({"sglang": "0.5.17", "quick": True}, print)
    by = {r.metric: r for r in res.rows}
    syncs = by["syncs per call"]
    host = next(r for m, r in by.items() if m.startswith("host time per call behind"))
    guarded = next(r for m, r in by.items() if m.startswith("syncs per call, guarded"))
    assert (syncs.before.median, syncs.after.median) == (2, 0)
    assert 0 < guarded.after.median < 1  # the sampled guard syncs on some calls, not on all
    # before: one sample per repeat; after: every call of the series the guarded one shares
    assert host.before.n == 5 and host.after.n >= 5 and host.before.min > 0 and host.after.min > 0
    assert any("outputs identical before/after: yes" in n for n in res.notes)
    print(f"host before {host.before.median * 1e3:.3f} ms, after "
          f"{host.after.median * 1e3:.3f} ms, ratio {host.ratio:.3f}")


def test_blocking_host_to_device_copies_sync_and_non_blocking_pinned_ones_do_not():
    """The census's `h2d` kind (census/scan.py `_blocking_copy`) against torch's own debug mode:
    a copy up from host memory without `non_blocking=True` waits for the stream
    (`memcpy_and_sync`); a non-blocking copy from pinned memory does not."""
    host = torch.arange(4)
    pinned = torch.arange(4).pin_memory()
    torch.cuda.synchronize()
    with count_syncs("gpu") as blocking:
        torch.tensor([1, 2, 3], device="cuda")
        torch.as_tensor([1, 2, 3], device="cuda")
        host.to("cuda")
        host.cuda()
    dev = torch.arange(4, device="cuda")
    torch.cuda.synchronize()
    with count_syncs("gpu") as new_tensor:  # census/scan.py's new_tensor arm
        dev.new_tensor([7])
    with count_syncs("gpu") as non_blocking:
        pinned.to("cuda", non_blocking=True)
        pinned.cuda(non_blocking=True)
    with count_syncs("gpu") as scalar:  # a Python number: reported for the record
        torch.tensor(5, device="cuda")
    print(f"h2d: blocking {blocking.count}, non-blocking pinned {non_blocking.count}, "
          f"scalar {scalar.count}, new_tensor {new_tensor.count}")
    assert (blocking.count, non_blocking.count, new_tensor.count) == (4, 0, 1)


def test_a_zero_dim_device_index_syncs_once_on_both_counters():
    """The census's 0-dim index rule (census/scan.py `_zero_dim`, sglang 0.5.23
    torch_native_backend.py:138-139 `req_to_token[req_pool_idx, start_kv:end_kv]`): PyTorch
    reads a 0-dim device integer index back before the select; a 1-D index tensor does not."""

    def work(t):
        table = torch.arange(20, device=t.device).view(4, 5)
        table[t[1], 1:3]  # one read back
        table[t, 1:3]  # advanced indexing: none

    cpu = _same_lines_on_cpu_and_gpu(work)
    print(f"0-dim index: {cpu.count} sync(s), {[e.op for e in cpu.events]}")
    assert cpu.count == 1
