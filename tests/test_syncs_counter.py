"""The sync counter on CPU with real torch: what it flags, what it does not, attribution."""

from __future__ import annotations

import sys
import types
import warnings

import pytest
import torch

from diag import telemetry
from diag.probes.metadata_syncs.sync_counter import (
    DeviceTags,
    builder_patch,
    count_syncs,
    counted,
    gpu_available,
    tags_by_name,
)


def _dev(*ts):
    return DeviceTags(device=ts)


def test_repeat_interleave_without_output_size_is_two_syncs():
    reps = torch.tensor([1, 2, 3])
    with count_syncs("cpu", _dev(reps)) as rep:
        out = torch.repeat_interleave(torch.arange(3), reps)
    assert rep.count == 2
    assert out.tolist() == [0, 1, 1, 2, 2, 2]
    assert {e.op for e in rep.events} == {"repeat_interleave without output_size"}


def test_repeat_interleave_with_output_size_is_none():
    reps = torch.tensor([1, 2, 3])
    with count_syncs("cpu", _dev(reps)) as rep:
        torch.repeat_interleave(torch.arange(3), reps, output_size=6)
        reps.repeat_interleave(2)  # int repeats: no read-back
    assert rep.count == 0


def test_host_reads_masks_and_dynamic_shapes():
    x = torch.tensor([3, 0, 5])
    with count_syncs("cpu", _dev(x)) as rep:
        x.sum().item()  # 1
        x.tolist()  # 1
        x.cpu()  # 1
        bool(x[0])  # 1
        int(x[1])  # 1
        x[x > 1]  # bool mask: 1
        x[torch.tensor([0, 2])]  # integer index: 0
        x.nonzero()  # 1
        torch.cumsum(x, 0)  # 0
    assert rep.count == 7


def test_bincount_reads_min_and_max_minlength_or_not():
    """CUDA/HIP bincount reads min() (not for uint8) and max() back (SummaryOps.cu
    `_bincount_cuda_template`); its .tolist() is one more."""
    x = torch.tensor([0, 2, 2])
    with count_syncs("cpu", _dev(x)) as rep:
        torch.bincount(x, minlength=4).tolist()  # 2 + 1
        torch.bincount(x.to(torch.uint8))  # max only: 1
        torch.bincount(x[:0])  # empty: 0
    assert rep.count == 4
    assert [e.op for e in rep.events].count("bincount") == 3


def test_mask_assignment_of_one_host_element_is_masked_fill_not_a_sync():
    """`x[mask] = 0` goes to masked_fill_ in PyTorch's index_put (one mask, one host element,
    no accumulate): no nonzero, no sync. A tensor of values, or a device value, syncs."""
    x = torch.tensor([3, 0, 5])
    with count_syncs("cpu", _dev(x)) as rep:
        x[x > 1] = 0  # masked_fill_: 0
        x.index_put_((x > 1,), torch.tensor(1))  # host 0-dim value: 0
    assert rep.count == 0
    y = torch.tensor([3, 0, 5])
    with count_syncs("cpu", _dev(y)) as rep:
        y[y > 1] = torch.tensor([7, 8])  # two values: nonzero on the mask: 1
        y.index_put_((y > 7,), torch.tensor(1), accumulate=True)  # accumulate: 1
    assert rep.count == 2
    z, v = torch.tensor([3, 0, 5]), torch.tensor(1)
    with count_syncs("cpu", _dev(z, v)) as rep:
        z[z > 1] = v  # device value: 1
    assert rep.count == 1


def test_host_mirrors_and_untagged_tensors_are_not_syncs():
    dev = torch.tensor([1, 2])
    host = torch.tensor([1, 2])
    with count_syncs("cpu", DeviceTags(device=[dev], host=[host])) as rep:
        host.sum().item()
        host.tolist()
        torch.repeat_interleave(torch.arange(2), host)
        torch.tensor([4]).item()  # untagged: host by default
    assert rep.count == 0
    everything = DeviceTags(unknown="device")
    with count_syncs("cpu", everything) as rep2:
        torch.tensor([4]).sum().item()
    assert rep2.count == 1


def test_tags_propagate_through_ops_and_copies():
    dev = torch.tensor([1, 2, 3])
    with count_syncs("cpu", _dev(dev)) as rep:
        y = (dev * 2).to(torch.int64)  # still a device tensor
        y.max().item()  # 1
        h = y.cpu()  # 1 (device -> host)
        h.tolist()  # host now: 0
        back = torch.tensor([1, 2]).to(dev.device)  # blocking host -> device copy: 1
        back.sum().item()  # 1
        pinned = torch.tensor([1, 2], pin_memory=False).to(dev.device, non_blocking=True)  # 0
        pinned.tolist()  # 1
    assert rep.count == 5


def test_new_tensor_from_host_data_onto_a_device_tensor_is_a_blocking_copy():
    """`cu_seqlens_q.new_tensor([n])` (sglang 0.5.23 flashattention_backend.py:1764): a Python
    list onto the device tensor's device, the copy torch.tensor(data, device=d) makes."""
    dev = torch.tensor([0, 3, 7])
    host = torch.tensor([1])
    with count_syncs("cpu", _dev(dev)) as rep:
        up = dev.new_tensor([9])  # 1: host list -> device
        up.sum().item()  # 1: the new tensor is a device tensor
        host.new_tensor([2]).tolist()  # 0: a host tensor's new_tensor stays on the host
        with warnings.catch_warnings():  # torch suggests clone() for a tensor argument
            warnings.simplefilter("ignore", UserWarning)
            dev.new_tensor(dev)  # 0: already on the device
    assert rep.count == 2
    assert rep.events[0].op == "Tensor.new_tensor from host data (blocking copy)"


def test_attribution_names_the_caller_outside_torch():
    reps = torch.tensor([2, 2])

    def builder(r):
        return torch.repeat_interleave(torch.arange(2), r)  # the line reported

    line = builder.__code__.co_firstlineno + 1
    with count_syncs("cpu", _dev(reps)) as rep:
        builder(reps)
    assert rep.by_site() == {("builder", __file__, line): 2}


def test_tags_by_name_treats_cpu_suffix_as_host():
    seq_lens, seq_lens_cpu = torch.tensor([5, 6]), torch.tensor([5, 6])
    tags = tags_by_name({"seq_lens": seq_lens, "seq_lens_cpu": seq_lens_cpu, "n": 3})
    with count_syncs("cpu", tags) as rep:
        seq_lens_cpu.max().item()
        seq_lens.max().item()
    assert rep.count == 1


def test_counted_wrapper_records_each_call():
    def f(r):
        return torch.repeat_interleave(torch.arange(r.numel()), r)

    w = counted(f, mode="cpu", tags=lambda r: DeviceTags(device=[r]))
    w(torch.tensor([1, 1]))
    w(torch.tensor([2]))
    assert [r.count for r in w.reports] == [2, 2]


def test_bad_mode_is_an_error():
    with pytest.raises(ValueError):
        with count_syncs("tpu"):
            pass


@pytest.mark.skipif(gpu_available(), reason="checks the no-GPU path")
def test_gpu_mode_without_gpu_says_so():
    with pytest.raises(RuntimeError, match="needs a CUDA/ROCm"):
        with count_syncs("gpu"):
            pass


def test_builder_patch_wraps_reverts_and_passes_through_without_sink():
    """Stand-in module (`_diag_standin_builders`): a builder the patch wraps and restores."""
    mod = types.ModuleType("_diag_standin_builders")

    class Backend:
        def init_forward_metadata(self, x):
            return x + 1

    mod.Backend = Backend
    sys.modules[mod.__name__] = mod
    original = Backend.__dict__["init_forward_metadata"]
    events = []
    try:
        patch = builder_patch({mod.__name__: ["Backend.init_forward_metadata"]})
        patch.apply()
        assert Backend.__dict__["init_forward_metadata"] is not original
        assert Backend().init_forward_metadata(1) == 2  # no sink: straight through
        telemetry.add_sink(events.append)
        try:
            assert Backend().init_forward_metadata(2) == 3
        finally:
            telemetry.remove_sink(events.append)
        if gpu_available():
            assert events and events[0]["kind"] == "syncs" and events[0]["count"] == 0
        else:
            assert events == []  # nothing to count without a device: nothing emitted
        patch.revert()
        assert Backend.__dict__["init_forward_metadata"] is original
    finally:
        sys.modules.pop(mod.__name__, None)
