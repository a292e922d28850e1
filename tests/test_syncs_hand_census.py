"""The census against a census read by hand (tests/groundtruth/hand_census.json, issue 21).

Each site was read from the release source with its `file:line` and callers; none was produced
by running diag. The bar: every live site reported live with its exact per-step paths and
syncs per execution; no look-alike and no unreachable site reported live. AST only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.context import Context, SpecConfig
from diag.probes import get as get_probe
from diag.probes.backends import never_draft_extends
from diag.probes.base import run_probe
from diag.probes.metadata_syncs.census.count import census
from diag.probes.metadata_syncs.census_config import decide, release_paths

pytestmark = pytest.mark.release
TRUTH = json.loads((Path(__file__).parent / "groundtruth" / "hand_census.json").read_text())


def ruled_out(s, version: str) -> bool:
    """A per-step sync site whose guards (platform, the release's host-mirror facts; no
    configuration given) rule it out on every path, on HIP and on CUDA, as the probe says."""
    return bool(s.guards) and all(
        decide(s, SpecConfig(), m, version, p).status == "unreachable"
        for p in ("hip", "cuda") for m in s.paths)


def disagreements(c, version: str, never: dict[str, str] | None = None) -> list[str]:
    wrong = []
    for t in TRUTH["releases"][version]:
        at = [s for s in c.sites
              if (s.file, s.line, s.kind) == (t["file"], t["line"], t["kind"])]
        live = [s for s in at if s.verdict == "syncs" and s.path_class == "per-step"
                and not ruled_out(s, version)]
        where = f"{t['file']}:{t['line']} {t['kind']} ({t['status']})"
        if t["status"] == "live":
            got = [(s.syncs, sorted(release_paths(s, version, never))) for s in live]
            if (t["syncs"], sorted(t["phases"])) not in got:
                wrong.append(f"{where}: want {t['syncs']} syncs on {t['phases']}, got {got} "
                             f"{[(s.verdict, s.path_class) for s in at]}")
        elif live:
            wrong.append(f"{where}: reported live {[s.why for s in live]}")
        if t["status"] == "unreachable" and not any(
                s.verdict == "unreachable" or ruled_out(s, version) for s in at):
            wrong.append(f"{where}: not listed as unreachable")
    return wrong


@pytest.mark.parametrize("version", sorted(TRUTH["releases"]))
def test_census_meets_the_hand_read_bar(release, version):
    """Every hand-read site agrees, but a `known_miss` (with its reason), which must still be
    missed: one the census comes to get right is dropped from the list."""
    wrong = disagreements(census(release(version)), version,
                          never_draft_extends(release(version)))
    misses = {f"{t['file']}:{t['line']} {t['kind']} ({t['status']})"
              for t in TRUTH["releases"][version] if t.get("known_miss")}
    def head(w: str) -> str:  # "file:line kind (status)", the message's first part
        return w.split(":", 2)[0] + ":" + w.split(":", 2)[1]

    missed = {w for w in wrong if head(w) in misses}
    assert not set(wrong) - missed, "\n".join(sorted(set(wrong) - missed))
    assert misses == {head(w) for w in missed}, "no longer a miss: drop known_miss"


def test_live_site_carries_its_caller_chain(release):
    """triton 0.5.17 `_dcp_kv_indices` (371) is reached from init_forward_metadata (731/871)."""
    c = census(release("0.5.17"))
    [s] = [s for s in c.sites if s.file.endswith("/triton_backend.py") and s.line == 371
           and s.kind == "item"]
    assert s.callers and s.callers[0].split(" ")[0].rsplit(":", 1)[1] in ("731", "871")
    assert s.callers[0].endswith("TritonAttnBackend.init_forward_metadata")


def _ctx(target, backend, steps, platform="hip"):
    return Context(target=target, platform=platform, execute=False,
                   config=SpecConfig(attention_backend=backend, speculative_num_steps=steps))


def test_per_phase_totals_for_the_configuration(release):
    [f] = run_probe(get_probe("metadata-syncs"), _ctx(release("0.5.17"), "dsv4", 3))
    phases = {e.data["phase"]: e.data for e in f.evidence
              if e.kind == "metric" and e.data and "phase" in e.data}
    assert list(phases) == ["target-extend", "draft-extend", "target-verify", "draft-decode"]
    # on HIP, dsv4 builds DeepseekV4HipRadixBackend only (attention_registry.py)
    assert {c for p in phases.values() for c in p["backends"]} <= {
        "DeepseekV4HipRadixBackend", "DeepseekV4MultiStepBackend"}
    assert phases["draft-extend"]["backends"] == ["DeepseekV4HipRadixBackend"]
    # the hand-read 2-sync repeat_interleave (deepseek_v4_backend_hip_radix.py:1116) is on the
    # target-extend, draft-extend and target-verify paths
    for name in ("target-extend", "draft-extend", "target-verify"):
        assert "sglang/srt/layers/attention/deepseek_v4_backend_hip_radix.py:1116" in \
            phases[name]["at"]
        assert phases[name]["syncs_per_step"] >= 2
    dd = phases["draft-decode"]
    assert dd["runs_per_step"] == 2 and dd["syncs_per_step"] == 2 * dd["syncs_per_run"]
    for p in phases.values():
        assert p["source"] == "static" and p["sites"] == len(p["at"])


def test_dsv4_on_cuda_builds_the_cuda_class(release):
    [f] = run_probe(get_probe("metadata-syncs"), _ctx(release("0.5.17"), "dsv4", 1, "cuda"))
    phases = [e.data for e in f.evidence if e.kind == "metric" and e.data and "phase" in e.data]
    assert all("DeepseekV4HipRadixBackend" not in p["backends"] for p in phases)
    assert {p["phase"]: p["backends"] for p in phases}["target-verify"] == \
        ["DeepseekV4AttnBackend"]
    assert [p["runs_per_step"] for p in phases if p["phase"] == "draft-decode"] == [0]


@pytest.mark.parametrize("version,line", [("0.5.19", 2420), ("0.5.23", 2594)])
def test_multi_step_draft_backend_sites_run_for_draft_decode_only(release, version, line):
    """`FlashInferMultiStepDraftBackend.common_template`'s `self.kv_indptr[:, :bs+1].cpu()`
    (0.5.23 flashinfer_backend.py:2594, 0.5.19 :2420, read by hand) is in the draft worker's
    `draft_attn_backend`, built for draft decode only (0.5.23 speculative/draft_utils.py
    `_create_flashinfer_decode_backend`; eagle_worker_v2.py:707-711 calls its
    init_forward_metadata for a non-idle DECODE batch; the method asserts
    `spec_info.is_draft_input()` at 0.5.23 :2584-2585): never on an extend or verify path."""
    c = census(release(version))
    [s] = [s for s in c.sites if s.file.endswith("/flashinfer_backend.py") and s.line == line
           and s.kind == "cpu"]
    assert s.verdict == "syncs" and s.path_class == "per-step", (s.verdict, s.path_class)
    assert "decode" in s.paths
    assert not set(s.paths) & {"target-extend", "draft-extend", "target-verify", "other"}, \
        s.paths


@pytest.mark.parametrize("version,sets,guard", [("0.5.19", 2111, 769), ("0.5.23", 2624, 891)])
def test_triton_draft_decode_reaches_no_sync_site(release, version, sets, guard):
    """Read by hand: EAGLE's draft decode builds its metadata through
    `TritonMultiStepDraftBackend.init_forward_metadata` (eagle_worker_v2.py:711 in 0.5.23, :552
    in 0.5.19), whose `common_template` sets `forward_batch.spec_info.kv_indptr` to a slice of
    its own buffer (triton_backend.py:`sets`) before every per-step call; the per-step
    `TritonAttnBackend.init_forward_metadata` then never takes the decode branch `if spec_info is
    None or spec_info.kv_indptr is None` (:`guard`), which holds every sync site a decode batch
    can reach (`_dcp_kv_indices`'s `.item()`, `update_sliding_window_buffer`'s size and slice
    bounds); its `else` reads the spec input's own indices and syncs nothing. The graph path's
    decode branch, `_apply_cuda_graph_metadata` (the other way to those helpers on a decode
    batch), asserts `spec_info is None` first ("Multi-step cuda graph init is not done here",
    0.5.23 :1411, 0.5.19 :1270), so a draft-decode batch, whose spec input is set, never
    passes it. So a draft-decode run of the triton backend does 0 syncs, on every
    configuration."""
    ctx = Context(target=release(version), platform="cuda", execute=False,
                  config=SpecConfig(attention_backend="triton", speculative_num_steps=3,
                                    speculative_algorithm="EAGLE"))
    [f] = run_probe(get_probe("metadata-syncs"), ctx)
    dd = next(e.data for e in f.evidence if e.kind == "metric" and e.data
              and e.data.get("phase") == "draft-decode")
    assert "TritonMultiStepDraftBackend" in dd["backends"]
    assert (dd["syncs_per_run"], dd["at"]) == (0, [])
