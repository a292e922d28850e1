"""The census's readings of code shapes, on stand-in builders (named so: not SGLang code).

Each stand-in is the smallest shape of a behaviour issue 21 names; line numbers are the
stand-in's own."""

from __future__ import annotations

from pathlib import Path

from diag.probes.metadata_syncs.census.count import scan_source

REL = "sglang/srt/layers/attention/standin_backend.py"


def _sites(src: str) -> dict[tuple[int, str], tuple[str, str, int]]:
    _, sites, _ = scan_source(src, Path("standin_backend.py"), REL)
    return {(s.line, s.kind): (s.verdict, s.path_class, s.syncs) for s in sites}


STANDIN_FALLBACK = """\
class StandInBackend:
    def init_forward_metadata(self, forward_batch):
        self._verify(forward_batch.seq_lens, forward_batch.seq_lens_cpu.tolist())

    def _verify(self, seq_lens, seq_lens_cpu=None):
        if seq_lens_cpu is None:
            seq_lens_cpu = seq_lens.tolist()
        return seq_lens_cpu
"""


def test_host_mirror_fallback_is_unreachable_when_every_caller_passes_host():
    got = _sites(STANDIN_FALLBACK)
    assert got[(7, "tolist")][0] == "unreachable"  # every caller passes `.tolist()` (3)
    assert got[(3, "tolist")][0] == "host-mirror"


STANDIN_SIZES = """\
import torch


class StandInBackend:
    def init_forward_metadata(self, forward_batch):
        cu = torch.cumsum(forward_batch.seq_lens, dim=0)
        idx = torch.empty(cu[-1], dtype=torch.int64, device="cuda")
        head = forward_batch.positions[: cu[0]]
        kept = forward_batch.positions[forward_batch.seq_lens > 0]
        ok = torch.bincount(forward_batch.req_pool_indices).nonzero()
        mask_cpu = torch.full((4,), 1)
        host = mask_cpu[1:].nonzero()
        n = forward_batch.seq_lens_cpu.cpu().sum()
        return idx, head, kept, ok, host, n
"""


def test_sizes_slices_masks_and_data_dependent_ops():
    got = _sites(STANDIN_SIZES)
    assert got[(7, "size")] == ("syncs", "per-step", 1)  # torch.empty(cu[-1])
    assert got[(8, "slice-bound")] == ("syncs", "per-step", 1)  # x[: cu[0]]
    assert got[(9, "bool-mask")] == ("syncs", "per-step", 1)  # x[seq_lens > 0]
    # two data-dependent ops on one line: two sites
    assert got[(10, "bincount")][0] == "syncs" and got[(10, "nonzero")][0] == "syncs"
    # torch.full without device= is a host tensor, and so are its derivatives
    assert got[(12, "nonzero")][0] == "host-mirror"
    assert got[(13, "cpu")][0] == "host-mirror"


STANDIN_GRAPH = """\
class StandInBackend:
    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        if in_capture:
            self.n = forward_batch.seq_lens.sum().item()
        return forward_batch.seq_lens.max().item()
"""


def test_graph_entry_points_reach_graph_modes_and_capture_is_not_per_step():
    _, sites, _ = scan_source(STANDIN_GRAPH, Path("standin_backend.py"), REL)
    by_line = {s.line: s for s in sites}
    assert by_line[4].verdict == "capture-only"
    assert set(by_line[5].paths) == {"decode", "idle", "target-verify", "draft-extend"}


STANDIN_GUARDS = """\
class StandInBackend:
    def __init__(self):
        self.dcp_size = 1

    def init_forward_metadata(self, forward_batch):
        if self.dcp_size > 1:
            self._sharded(forward_batch.seq_lens)
        for layer in range(3):
            forward_batch.seq_lens.sum().item()
        if self.is_npu:
            pass
        self._build_npu_meta(forward_batch.seq_lens)

    def _sharded(self, lens):
        return lens.sum().item()

    def forward_extend(self, forward_batch):
        if self.is_npu:
            self._build_npu_meta(forward_batch.seq_lens)

    def _build_npu_meta(self, lens):
        return lens.max().item()
"""


def test_guards_on_the_way_to_a_site():
    """A helper gets the tests around its calls (dcp_size at 6); a loop body is marked; a
    named builder called from a builder (12) and from forward_extend (19, under is_npu at 18) keeps
    only what both calls share (nothing)."""
    _, sites, _ = scan_source(STANDIN_GUARDS, Path("standin_backend.py"), REL)
    g = {s.line: [x[:3] for x in s.guards] for s in sites}
    assert g[15] == [("dcp_size", ">", 1)]
    assert g[9] == [("data:loop", "true", None)]
    assert g[22] == []


def test_a_named_builder_only_forward_calls_keeps_its_callers_tests():
    src = STANDIN_GUARDS.replace("        self._build_npu_meta(forward_batch.seq_lens)\n\n",
                                 "\n", 1)
    _, sites, _ = scan_source(src, Path("standin_backend.py"), REL)
    [s] = [s for s in sites if s.function.endswith("_build_npu_meta")]
    assert [x[:3] for x in s.guards] == [("platform", "==", "npu")]


STANDIN_INTS = """\
import torch


class StandInBackend:
    def init_forward_metadata(self, forward_batch):
        sl = forward_batch.seq_lens
        cu = torch.cumsum(sl, dim=0)
        for i in range(cu[-1]):
            pass
        if sl.max() > 4:
            pass
        x = forward_batch.positions
        x[cu[0]:] = 0
        y = x.new_zeros(sl.sum())
        z = x[: sl.sum()]
        w = torch.bincount(sl, minlength=4).tolist()
        if forward_batch.seq_lens is None or sl.shape[0] > 2:
            pass
        return y, z, w
"""


def test_device_scalars_wherever_python_needs_an_int():
    """Issue 38: range bounds, comparisons a branch reads, store slices, reductions as sizes
    and slice bounds; bincount counts PyTorch's two reads (min, max), its .tolist() a third."""
    got = _sites(STANDIN_INTS)
    assert got[(8, "size")] == ("syncs", "per-step", 1)  # range(cu[-1])
    assert got[(10, "bool()")] == ("syncs", "per-step", 1)  # if sl.max() > 4
    assert got[(13, "slice-bound")] == ("syncs", "per-step", 1)  # x[cu[0]:] = 0
    assert got[(14, "size")] == ("syncs", "per-step", 1)  # new_zeros(sl.sum())
    assert got[(15, "slice-bound")] == ("syncs", "per-step", 1)  # x[: sl.sum()]
    assert got[(16, "bincount")] == ("syncs", "per-step", 2)
    assert got[(16, "tolist")] == ("syncs", "per-step", 1)
    assert not [k for k in got if k[0] == 17]  # `is None`, a shape: nothing read


STANDIN_CONTRADICTION = """\
class StandInBackend:
    def init_forward_metadata(self, forward_batch):
        sl = forward_batch.seq_lens
        if not self.use_mirror:
            if self.use_mirror:
                a = sl.tolist()
            b = sl.tolist()
        if forward_batch.encoder_lens is None:
            return
        if forward_batch.encoder_lens is None:
            c = sl.tolist()
        if forward_batch.encoder_lens is not None and self.flag:
            d = sl.tolist() if not self.flag else None
        self.use_mirror = True
        if self.use_mirror:
            e = sl.tolist()
"""


def test_a_test_the_enclosing_branches_decided_cannot_run():
    got = _sites(STANDIN_CONTRADICTION)
    assert got[(6, "tolist")][0] == "unreachable"  # `if a:` under `if not a:`
    assert got[(7, "tolist")][0] == "syncs"
    assert got[(11, "tolist")][0] == "unreachable"  # after `if x is None: return`
    assert got[(13, "tolist")][0] == "unreachable"  # `not flag` under `... and flag`
    assert got[(16, "tolist")][0] == "syncs"  # rebound in between: nothing known


STANDIN_CONDITIONAL_SIZE = """\
import torch


class StandInBackend:
    def init_forward_metadata(self, forward_batch):
        if forward_batch.forward_mode.is_draft_extend_v2():
            self._meta(forward_batch.extend_seq_lens, 8, exact=True)
        elif forward_batch.forward_mode.is_target_verify():
            self._meta(forward_batch.extend_seq_lens, 8, exact=False)

    def _meta(self, lens: torch.Tensor, n, exact=True):
        return torch.repeat_interleave(lens, lens, output_size=n if exact else None)
"""


def test_a_conditional_output_size_syncs_where_it_is_none():
    _, sites, _ = scan_source(STANDIN_CONDITIONAL_SIZE, Path("s.py"), REL)
    [s] = [s for s in sites if s.kind == "repeat_interleave"]
    assert (s.verdict, s.syncs, s.paths) == ("syncs", 2, ("target-verify",))


# The shapes of the 2026-12-06 readings, each after a release site read by hand:
# - an assignment in the other arm of an `if` does not reach a use (0.5.23 wave_backend.py:229
#   in the decode arm vs :272 in the target-verify arm); assignments in both arms of an `if`
#   the use follows reach it, and where one arm's value is unknown the known one decides
#   (0.5.23 flashinfer_backend.py:1791 / :1810, used at :1816);
# - `torch.cat` of host parts is host (0.5.23 hybrid_linear_attn_backend.py:605-609);
# - `a, b = self.helper()` takes item i of the tuple the helper returns (0.5.23
#   aiter_backend.py:3518-3543, the buffers of :958-975);
# - a factory with `**self.cuda_..._kwargs` is on the device (0.5.19
#   deepseek_v4_backend_hip_radix.py:442, :1589, :1643);
# - a helper that picks a member under a forward-mode test is read as that test (0.5.23
#   dsa_backend.py:4108-4125, used at :1141 and :1341).
STANDIN_REACHING = """\
import torch
from sglang.srt.model_executor.forward_batch_info import ForwardMode


class StandInBackend:
    def __init__(self, device):
        self.kv_indptr = torch.zeros((9,), device=device)
        self.cuda_kw = {"device": device, "dtype": torch.int32}

    def init_forward_metadata(self, forward_batch, kv_indptr: torch.Tensor, spec_info):
        if forward_batch.forward_mode.is_decode_or_idle():
            kv_indptr = spec_info.kv_indptr
        elif forward_batch.forward_mode.is_target_verify():
            kv_indices = torch.empty(kv_indptr[-1])
        if spec_info is None:
            kv_indptr = kv_indptr[:4]
        else:
            kv_indptr = spec_info.kv_indptr
        x = kv_indptr[: kv_indptr[-1]]
        mask = forward_batch.seq_lens_cpu == 0
        mask = torch.cat([mask, torch.zeros((2,), dtype=torch.bool)])
        n = mask.cpu()
        a, b = self._buffers()
        m = int(b[-1].item())
        pad = torch.empty(3, **self.cuda_kw)
        p = pad[-1].item()
        method = self._pick(forward_batch.forward_mode)
        if method == Pick.RAGGED:
            r = torch.repeat_interleave(forward_batch.seq_lens, forward_batch.extend_seq_lens)
        return kv_indices, x, n, m, p, r

    def _buffers(self):
        first = torch.empty(4, device=self.device)
        second = torch.empty(4, device=self.device)
        return (first, second)

    def _pick(self, forward_mode):
        if self.fp8 and forward_mode == ForwardMode.EXTEND:
            method = Pick.RAGGED
        else:
            method = Pick.PAGED
        return method
"""


def _paths(src: str) -> dict[tuple[int, str], tuple[str, ...]]:
    _, sites, _ = scan_source(src, Path("standin_backend.py"), REL)
    return {(s.line, s.kind): tuple(s.paths) for s in sites}


def test_what_reaches_a_use_and_what_a_helper_returns():
    got = _sites(STANDIN_REACHING)
    assert got[(14, "size")] == ("syncs", "per-step", 1)  # :12 is in the other arm
    assert got[(19, "slice-bound")][0] == "syncs"  # :16 (a tensor) and :18 (unknown) reach
    assert got[(22, "cpu")][0] == "host-mirror"  # the host mirror, padded with a host tensor
    assert got[(24, "item")] == ("syncs", "per-step", 1)  # item 1 of `_buffers`' tuple
    assert got[(26, "item")] == ("syncs", "per-step", 1)  # made with **self.cuda_kw
    paths = _paths(STANDIN_REACHING)
    assert paths[(29, "repeat_interleave")] == ("target-extend",)  # `_pick`'s EXTEND test


# Device fields and host arrays (2026-12-06): the mamba tracking tensors are made on the device
# (0.5.19 managers/schedule_batch.py:2739-2743 `torch.tensor(...).to(self.device, ...)`), so
# `forward_batch.mamba_track_mask.any()` in a test reads the device (0.5.15
# hybrid_linear_attn_backend.py:178-179); `*_np` names are numpy arrays on the host (0.5.19
# flashattention_backend.py:3194 `int(seqlens_q_local_np.max())`); a loop or comprehension
# variable is an item of what it iterates (0.5.23 flashinfer_backend.py:956-957).
STANDIN_FIELDS = """\
import numpy as np


class StandInBackend:
    def init_forward_metadata(self, forward_batch):
        if forward_batch.mamba_track_mask.any():
            pass
        mask = forward_batch.mamba_track_mask.cpu()
        seqlens_q_local_np = np.diff(forward_batch.extend_seq_lens_cpu)
        q = int(np.max(seqlens_q_local_np))
        k = int(seqlens_q_local_np.max())
        lens = [x.item() for x in forward_batch.seq_lens_cpu]
        for t in forward_batch.seq_lens:
            t.item()
        return mask, q, k, lens
"""


def test_device_fields_and_host_arrays():
    got = _sites(STANDIN_FIELDS)
    assert got[(8, "cpu")] == ("syncs", "per-step", 1)
    assert got[(10, "int()")][0] == "host-mirror"
    assert got[(11, "int()")][0] == "host-mirror"
    assert got[(12, "item")][0] == "host-mirror"  # an item of the host mirror
    assert got[(14, "item")] == ("syncs", "per-step", 1)  # an item of the device tensor


STANDIN_SELF_AND_BOUNDS = """\
import torch


class StandInBackend:
    def init_forward_metadata(self, forward_batch):
        idx = forward_batch.req_pool_indices[:4]
        idx = idx.cpu()
        same = idx.cpu()
        has = forward_batch.spec_info is not None
        if has:
            pass
        if forward_batch.seq_lens[0]:
            pass
        ok = bool(forward_batch.spec_info is not None and forward_batch.seq_lens.any())
        q = torch.cumsum(forward_batch.seq_lens, dim=0)
        a = forward_batch.positions.clamp(0, q[-1] - 1)
        b = forward_batch.positions.clamp(q[0], q[-1])
        return same, ok, a, b
"""


def test_own_statement_identity_tests_truth_and_clamp_bounds():
    """`x = x.cpu()` copies the device value from before the statement (the second `.cpu()` is
    of the host copy); `x is not None` is a Python bool; `if t[0]:` and `bool(a and t.any())`
    read a device value back (the latter under `a`'s data guard); a 0-dim device bound of
    `clamp` syncs beside a Python number (the Scalar overload), not beside another tensor."""
    got = _sites(STANDIN_SELF_AND_BOUNDS)
    assert got[(7, "cpu")] == ("syncs", "per-step", 1)
    assert got[(8, "cpu")][0] == "host-mirror"
    assert (10, "bool()") not in got  # `if has:` of an identity test
    assert got[(12, "bool()")] == ("syncs", "per-step", 1)
    assert got[(14, "bool()")] == ("syncs", "per-step", 1)
    _, sites, _ = scan_source(STANDIN_SELF_AND_BOUNDS, Path("standin_backend.py"), REL)
    (guarded,) = [s for s in sites if (s.line, s.kind) == (14, "bool()")]
    assert [g[0] for g in guarded.guards] == ["data:forward_batch.spec_info is not None"]
    assert got[(16, "scalar-arg")] == ("syncs", "per-step", 1)
    assert not any(k == "scalar-arg" for line, k in got if line == 17)


STANDIN_INT_SHAPES = """\
import torch


class StandInBackend:
    def init_forward_metadata(self, forward_batch):
        cu = torch.cumsum(forward_batch.seq_lens, dim=0)
        a = forward_batch.positions.view(cu[-1], -1)
        b = forward_batch.positions.narrow(0, 0, cu[-1])
        c = forward_batch.positions.expand(cu[0], 4)
        d = forward_batch.positions.repeat(cu[0])
        e = [0] * cu[-1]
        f = forward_batch.seq_lens.sum() > 0 and cu[0] == 1
        g = not forward_batch.seq_lens.any()
        h = forward_batch.seq_lens.any().item()
        if forward_batch.seq_lens.any() and not forward_batch.seq_lens.all():
            pass
        k = forward_batch.positions.view(torch.int32)
        n = forward_batch.seq_lens_cpu.max().item() and forward_batch.seq_lens_cpu.all()
        return a, b, c, d, e, f, g, h, k, n
"""


def test_a_device_scalar_becomes_a_python_int_wherever_python_needs_one():
    """Sizes of view/narrow/expand/repeat, a repeated list, the truth of every `and` operand
    but the last outside a test, `not t`, a reduction's `.item()`; each read once."""
    got = _sites(STANDIN_INT_SHAPES)
    for line in (7, 8, 9, 10, 11):
        assert got[(line, "size")] == ("syncs", "per-step", 1), line
    assert got[(12, "bool()")] == ("syncs", "per-step", 1)  # `t.sum() > 0 and ...`
    assert (12, "bool()") in got and sum(k[0] == 12 for k in got) == 1  # not the last operand
    assert got[(13, "bool()")] == ("syncs", "per-step", 1)  # `not t.any()`
    assert got[(14, "item")] == ("syncs", "per-step", 1)  # `.any()` stays on the device
    # a branch's test: each operand once, not again as an expression
    _, sites, _ = scan_source(STANDIN_INT_SHAPES, Path("standin_backend.py"), REL)
    assert sorted((s.line, s.col, s.kind) for s in sites if s.line == 15) == [
        (15, 11, "bool()"), (15, 48, "bool()")]
    assert not [k for k, v in got.items() if k[0] in (17, 18) and v[0] == "syncs"]  # a dtype
    # view; host values


STANDIN_CHOSEN_COPY = """\
class StandInBackend:
    def init_forward_metadata(self, forward_batch):
        lens = forward_batch.seq_lens_cpu if forward_batch.seq_lens_cpu is not None else forward_batch.seq_lens
        a = lens.tolist()
        b = (forward_batch.seq_lens if forward_batch.seq_lens_cpu is None
             else forward_batch.seq_lens_cpu).tolist()
        c = forward_batch.seq_lens_cpu.tolist() if forward_batch.seq_lens_cpu is not None else None
        return a, b, c
"""


def test_a_host_read_of_a_value_chosen_between_its_copy_and_the_device_tensor():
    """`(x_cpu if x_cpu is not None else x).tolist()`, inline or through a local: a sync only
    where the copy is absent, the test kept as a guard the host-mirror facts decide (was
    "cannot tell", 0 syncs). No site of this shape in the 19 cached releases (0.5.9-0.5.23:
    their censuses are unchanged by it)."""
    _, sites, _ = scan_source(STANDIN_CHOSEN_COPY, Path("standin_backend.py"), REL)
    got = {s.line: s for s in sites}
    for line, holds in ((4, "not (forward_batch.seq_lens_cpu is not None)"),
                        (5, "forward_batch.seq_lens_cpu is None")):
        s = got[line]
        assert (s.kind, s.verdict, s.syncs) == ("tolist", "syncs", 1), s
        assert [g[:3] for g in s.guards] == [("mirror:seq_lens_cpu", "is", None)], s.guards
        assert s.guards[0][4] == holds
    assert got[7].verdict == "host-mirror"  # the copy's own read, under `is not None`
