"""The census's readings of code shapes, on stand-in builders (named so: not SGLang code).

Each stand-in is the smallest shape of a behaviour issue 21 names; line numbers are the
stand-in's own."""

from __future__ import annotations

from pathlib import Path

from diag.probes.metadata_census import scan_source

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
