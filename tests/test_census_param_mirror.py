"""A guard on a helper's *parameter* that every caller binds to the batch's host mirror is that
mirror's guard (probes/metadata_syncs/census/guards.py `param_mirrors`), against lines READ BY
HAND in the release wheels, never produced by running diag.

sglang 0.5.23 layers/attention/aiter_backend.py: `AiterAttnBackend.init_forward_metadata_out_graph(
self, forward_batch, in_capture: bool = False)` :1986-1990 sets `seq_lens_cpu =
(forward_batch.seq_lens.cpu() if in_capture else forward_batch.seq_lens_cpu)` :1992-1994 and
calls `self._apply_cuda_graph_metadata(` :2000 with `seq_lens_cpu=seq_lens_cpu` :2007, the only
call of it in the module. `def _apply_cuda_graph_metadata(` :2937 reads `max_kv_len = (
seq_lens_cpu.max().item()` :2969-2970 `if seq_lens_cpu is not None` :2971 `else None if
forward_mode.is_target_verify() and self._use_unified_verify else torch.max(seq_lens).item()`
:2972-2974: the device read at :2974 runs only where the batch has no `seq_lens_cpu`.
0.5.19: the caller :1166 (local :1171-1173, call :1179, passed :1186), the helper :1819, the
conditional :1843-1846 (`torch.max(seq_lens).item()` at :1846). 0.5.17: :853, :859, :866, :874;
:1500, :1525-1528. 0.5.18: :861, :867, :874, :882; :1508, :1533-1536.
No class of aiter_backend.py sets `needs_cpu_seq_lens` (0.5.23 mentions it only in a comment,
:2054): AiterAttnBackend and AiterMultiStepDraftBackend keep the AttentionBackend default
`needs_cpu_seq_lens: bool = True` (base_attn_backend.py 0.5.23 :163, 0.5.19 :140, 0.5.18 :117,
0.5.17 :102), so under the overlap scheduler the spec-v2 relay keeps `seq_lens_cpu` on
decode-side batches (tests/test_host_lengths.py): it nulls the copy only `if not
self.needs_cpu_seq_lens:` (managers/overlap_utils.py 0.5.23 :615, 0.5.19 :539, 0.5.18 :477,
0.5.17 :436), which `decide_needs_cpu_seq_lens` makes false only where every backend of the
worker says so, `getattr(b, "needs_cpu_seq_lens", True)` (0.5.23 :50, 0.5.19 :50, 0.5.18 :48,
0.5.17 :47). Off the overlap scheduler nothing drops it: the scheduler refreshes the copy a batch
has after each round, `if batch.seq_lens_cpu is not None: batch.seq_lens_cpu =
new_seq_lens.to("cpu")` (managers/scheduler.py 0.5.23 :4847-4848, 0.5.19 :4161-4162), and
`resolve_seq_lens_cpu` runs under `if self.enable_overlap:` only (0.5.23 :4658-4667). An IDLE
batch gets an empty copy in `prepare_for_idle` (managers/schedule_batch.py 0.5.23 :3606, 0.5.19
:3181, 0.5.18 :2933, 0.5.17 :2844). So the read at :2974 cannot run on any step an aiter class
serves, whatever the scheduler: a fact of the release alone (census/kept_lengths.py).

Negative (a caller passes something else): `MambaAttnBackendBase._replayssm_track_flush_mask(
self, seq_lens_cpu, bs)` (layers/attention/hybrid_linear_attn_backend.py 0.5.23 :595, 0.5.19
:424) tests `if seq_lens_cpu is None:` (0.5.23 :602, 0.5.19 :431) before `return mask.cpu()`
(0.5.23 :609, 0.5.19 :438); `_forward_metadata` passes `forward_batch.seq_lens_cpu` (0.5.23
:245-246, 0.5.19 :179-180) but `_replay_metadata` passes its own parameter `seq_lens_cpu`
(0.5.23 :839, 0.5.19 :666): the guard stays a data guard. That `_replay_metadata` (0.5.23 :747,
0.5.19 :576) gets `forward_batch.seq_lens_cpu if not in_capture else None` from both its
callers, `MambaAttnBackendBase.init_forward_metadata_out_graph` (0.5.23 :368-378, 0.5.19
:278-288) and the subclass `Mamba2AttnBackend`'s (0.5.23 :1085-1095, 0.5.19 :887-897), which
does not define `_replay_metadata` again: its parameter is the mirror.
"""

from __future__ import annotations

import ast

import pytest

from diag.context import SpecConfig
from diag.probes.metadata_syncs.census.count import census
from diag.probes.metadata_syncs.census.guards import param_mirrors
from diag.probes.metadata_syncs.census_config import decide, release_paths
from diag.probes.metadata_syncs.probe import relay_of
from diag.probes.source import find_def, parse_file
from tests.conftest import release_target
from tests.syncs_rows import phase_rows

pytestmark = pytest.mark.release
AITER = "sglang/srt/layers/attention/aiter_backend.py"
MAMBA = "sglang/srt/layers/attention/hybrid_linear_attn_backend.py"
BASE = "sglang/srt/layers/attention/base_attn_backend.py"
# release -> the conditional's first line (the guard's place), the device read, the base default
HAND = {"0.5.23": {"test": 2970, "site": 2974, "base": 163, "nulls": 615, "idle": 3606},
        "0.5.19": {"test": 1844, "site": 1846, "base": 140, "nulls": 539, "idle": 3181},
        "0.5.18": {"test": 1534, "site": 1536, "base": 117, "nulls": 477, "idle": 2933},
        "0.5.17": {"test": 1526, "site": 1528, "base": 102, "nulls": 436, "idle": 2844}}
RELAY = "sglang/srt/managers/overlap_utils.py"
SCHEDULE = "sglang/srt/managers/schedule_batch.py"
MAMBA_HAND = {"0.5.23": {"test": 602, "site": 609}, "0.5.19": {"test": 431, "site": 438}}
DECODE_SIDE = ("draft-extend", "target-verify", "decode")


def _cfg(**kw) -> SpecConfig:
    base = dict(attention_backend="aiter", speculative_num_steps=3, speculative_eagle_topk=1,
                environ={})
    base.update(kw)
    return SpecConfig(**base)


def _site(version: str, file: str, line: int, backend: str | None = None,
          verdict: str = "syncs"):
    sites = [s for s in census(release_target(version)).sites
             if s.file == file and s.line == line and s.verdict == verdict
             and (backend is None or s.backend == backend)]
    assert sites, f"{file}:{line} not in the census of {version}"
    return sites[0]


def _relay(version: str, **kw):
    return relay_of(release_target(version), "hip", _cfg(**kw), "aiter", "aiter")


@pytest.mark.parametrize("version", sorted(HAND))
def test_the_parameter_guard_is_the_mirror_guard(version):
    h = HAND[version]
    s = _site(version, AITER, h["site"], "AiterAttnBackend")
    assert s.function == "AiterAttnBackend._apply_cuda_graph_metadata"
    assert s.path_class == "per-step" and set(DECODE_SIDE) <= set(s.paths)
    mine = [g for g in s.guards if g[3] == f"{AITER}:{h['test']}"]
    # the `else` of `seq_lens_cpu is not None`: the mirror is None; the class keeps it
    assert [g[:2] for g in mine] == [("mirror:seq_lens_cpu", "is")], s.guards
    kept, why, idle = mine[0][2]
    assert kept == "kept" and idle == f"{SCHEDULE}:{h['idle']}"
    assert f"{BASE}:{h['base']}" in why and f"{RELAY}:{h['nulls']}" in why
    assert not any(g[0].startswith("data:") and "seq_lens_cpu" in g[0] for g in s.guards)
    # a fact of the release: no decode-side step (nor IDLE) is left, no configuration given
    assert release_paths(s, version) == ()


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_under_the_overlap_scheduler_the_read_cannot_run_on_decode_side_steps(version):
    h = HAND[version]
    s = _site(version, AITER, h["site"], "AiterAttnBackend")
    cfg = _cfg(disable_overlap_schedule=False)
    relay = _relay(version, disable_overlap_schedule=False)
    assert relay.holds is True and f"{BASE}:{h['base']}" in relay.why
    for mode in DECODE_SIDE:
        d = decide(s, cfg, mode, version, "hip", None, relay)
        assert d.status == "unreachable", (mode, d)
        assert f"seq_lens_cpu is set on every {mode} batch this class serves" in d.reason
        assert f"{BASE}:{h['base']}" in d.reason


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
@pytest.mark.parametrize("overlap", [None, True])
def test_without_the_overlap_fact_the_class_decides(version, overlap):
    """Not given, or --disable-overlap-schedule: the relay's reader decides nothing, but the
    class keeps the copy on either path (read above): unreachable, with the class's reason."""
    h = HAND[version]
    s = _site(version, AITER, h["site"], "AiterAttnBackend")
    cfg = _cfg(disable_overlap_schedule=overlap)
    relay = _relay(version, disable_overlap_schedule=overlap)
    assert relay.holds is None
    for mode in (*DECODE_SIDE, "idle"):
        d = decide(s, cfg, mode, version, "hip", None, relay)
        assert d.status == "unreachable", (mode, d)
        assert "AiterAttnBackend keeps the host lengths" in d.reason
        assert (f"{SCHEDULE}:{h['idle']}" in d.reason) == (mode == "idle")
    # and with no configuration at all
    assert decide(s, SpecConfig(), "target-verify", version).status == "unreachable"


# READ BY HAND: `_replayssm_track_flush_mask(self, seq_lens_cpu, bs)` (0.5.23
# hybrid_linear_attn_backend.py:595, 0.5.19 :424) has two calls: `_forward_metadata` passes
# `forward_batch.seq_lens_cpu` (0.5.23 :245-246, 0.5.19 :179), and `_replay_metadata` passes its
# own parameter `seq_lens_cpu` (0.5.23 :839, 0.5.19 :666), which both of its callers bind to
# `forward_batch.seq_lens_cpu if not in_capture else None` (0.5.23 :378, :1095; 0.5.19 :288,
# :897): the batch's copy on every per-step (replay) call. Both sit under `is_decode_or_idle()`.
MAMBA_CALLS = {"0.5.23": (245, 839), "0.5.19": (179, 666)}


@pytest.mark.parametrize("version", sorted(MAMBA_HAND))
def test_a_caller_handing_on_its_mirror_parameter_binds_the_copy(version):
    h = MAMBA_HAND[version]
    # `mask.cpu()` copies a host tensor: `mask` is `seq_lens_cpu[:bs] ... == 0` (0.5.23 :605,
    # 0.5.19 :434), padded by `torch.cat` with a host `torch.zeros` (:608 / :437): no sync,
    # but the guards in front of it are the census's all the same
    s = _site(version, MAMBA, h["site"], backend="Mamba2AttnBackend", verdict="host-mirror")
    assert s.function == "MambaAttnBackendBase._replayssm_track_flush_mask"
    [g] = [g for g in s.guards if g[3] == f"{MAMBA}:{h['test']}"]
    assert g[:2] == ("bind:seq_lens_cpu", "is not"), s.guards
    eager, replay = MAMBA_CALLS[version]
    for mode in ("decode", "idle"):
        [(bound, at)] = [(b, at) for m, b, at in g[2] if m == mode]
        assert (bound if isinstance(bound, str) else bound[0]) == "mirror:seq_lens_cpu"
        # the replay call on both modes; the eager one is read on IDLE only: its test is on
        # `forward_batch.logical_forward_mode` (0.5.23 :168), a property the census does not
        # read as the batch's mode (both calls bind the copy, so the binding is the same)
        assert f"{MAMBA}:{replay}" in at and (f"{MAMBA}:{eager}" in at) == (mode == "idle"), at
    # with the relay's fact (the copy set on decode-side batches), the test is decided: what
    # is left are the data tests in front of the call (`write_pos_buf`, `is_kda`)
    relay = _relay(version, disable_overlap_schedule=False)
    assert relay.holds is True
    d = decide(s, _cfg(disable_overlap_schedule=False), "decode", version, "hip", None, relay)
    assert d.status == "depends" and "seq_lens_cpu is None" not in d.reason, d.reason


@pytest.mark.parametrize("version", sorted(MAMBA_HAND))
def test_which_parameters_are_a_mirror(version):
    """The flush mask's parameter is not (one caller passes a parameter); `_replay_metadata`'s
    is (`forward_batch.seq_lens_cpu if not in_capture else None` from the class and from a
    subclass that inherits it); aiter's helper's is."""
    t = release_target(version)

    def mirrors(file: str, qual: str) -> tuple:
        tree = parse_file(t.root / file)
        cls = find_def(tree, qual.split(".")[0])
        fn = find_def(tree, qual)
        assert isinstance(cls, ast.ClassDef) and isinstance(fn, ast.FunctionDef)
        return param_mirrors(tree, cls, fn)

    assert mirrors(MAMBA, "MambaAttnBackendBase._replayssm_track_flush_mask") == ()
    assert mirrors(MAMBA, "MambaAttnBackendBase._replay_metadata") == (
        ("seq_lens_cpu", "seq_lens_cpu"),)
    assert mirrors(AITER, "AiterAttnBackend._apply_cuda_graph_metadata") == (
        ("seq_lens_cpu", "seq_lens_cpu"),)
    # a public entry point may be called from outside the module: never
    assert mirrors(AITER, "AiterAttnBackend.init_forward_metadata_out_graph") == ()


def _phases(version: str, *flags: str) -> dict:
    return phase_rows(version, "aiter", "SGLANG_USE_AITER=1", *flags)


@pytest.mark.parametrize("version", ["0.5.19", "0.5.23"])
def test_the_metadata_syncs_finding(version):
    """End to end (`diag diagnose --json`): the read is unreachable on every decode-side phase
    (and out of the count), with --overlap-schedule or not given."""
    site = f"{AITER}:{HAND[version]['site']}"
    on = _phases(version, "--overlap-schedule")
    for phase in ("draft-extend", "target-verify", "draft-decode"):
        row = on[phase]
        assert site not in row["at"] and site not in [d["at"] for d in row["depends"]], row
        assert site in [u["at"] for u in row["unreachable"]], row
    for phase in ("draft-extend", "draft-decode"):
        assert on[phase]["syncs_per_step"] == 0 and on[phase]["exact"] is True, on[phase]
    unknown = _phases(version)
    for phase in ("draft-extend", "target-verify", "draft-decode"):
        row = unknown[phase]
        assert site not in [d["at"] for d in row["depends"]], row
        assert site in [u["at"] for u in row["unreachable"]], row
    for phase in ("draft-extend", "draft-decode"):
        assert unknown[phase]["syncs_per_step"] == 0, unknown[phase]


# Per forward mode (census/reach.py `mode_binds`), READ BY HAND: flashinfer's
# `FlashInferIndicesUpdaterPrefill.update_single_wrapper` (0.5.23 flashinfer_backend.py:1936)
# sums `paged_kernel_lens.sum().item()` (:1962) in the `else` of `if extend_prefix_lens_cpu is
# not None:` (:1958). Its calls: the extend branch of init_forward_metadata passes
# `extend_prefix_lens_cpu=forward_batch.extend_prefix_lens_cpu` (:1087; the call :1075), on
# every mode but decode, idle and target-verify; target-verify's call leaves it None (:1026,
# and :782 in init_forward_metadata_out_graph); the out_graph draft-extend call leaves it None
# too (:808). So on target-extend the test is the batch's mirror, which ForwardBatch.init_new
# sets from the host lists (model_executor/forward_batch_info.py:1240); on draft-extend the two
# calls disagree. 0.5.19: the read :1914 under :1910, the mirror call :1026 (passed :1039),
# set at forward_batch_info.py:907.
FLASHINFER = "sglang/srt/layers/attention/flashinfer_backend.py"
PREFIX_HAND = {"0.5.23": {"site": 1962, "test": 1958, "call": 1075, "set": 1240},
               "0.5.19": {"site": 1914, "test": 1910, "call": 1026, "set": 907}}


@pytest.mark.parametrize("version", sorted(PREFIX_HAND))
def test_a_parameter_bound_per_mode_is_the_mirror_on_the_modes_that_bind_it(version):
    h = PREFIX_HAND[version]
    s = _site(version, FLASHINFER, h["site"], "FlashInferAttnBackend")
    [g] = [g for g in s.guards if g[3] == f"{FLASHINFER}:{h['test']}"]
    assert (g[0], g[1]) == ("bind:extend_prefix_lens_cpu", "is")
    per = {m: (b, at) for m, b, at in g[2]}
    assert per["target-extend"] == ("mirror:extend_prefix_lens_cpu", f"{FLASHINFER}:{h['call']}")
    assert per["target-verify"][0] == "none"
    assert "draft-extend" not in per  # a call passing the mirror and one passing None
    te = decide(s, SpecConfig(), "target-extend", version, "cuda")
    assert te.status == "unreachable"
    assert f"model_executor/forward_batch_info.py:{h['set']}" in te.reason
    de = decide(s, SpecConfig(), "draft-extend", version, "cuda")
    assert de.status == "depends" and "draft-extend calls pass as extend_prefix_lens_cpu" \
        in de.reason
    assert "draft-extend" in s.paths and release_paths(s, version) == tuple(
        m for m in s.paths if m != "target-extend")
