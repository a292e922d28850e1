"""The GPU arch input: read from the KFD topology, typed with --gpu-arch, shown alike in the text
report and the JSON, and the one thing that decides 0.5.23 aiter's gfx95-only target-extend
syncs (the hand reading is in tests/test_census_flags.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from diag.gpu_platform import arch_name, local_gpu_arch


def test_arch_names_follow_the_kfd_encoding():
    # major * 10000 + minor * 100 + stepping, minor and stepping in hex in the name (the
    # amdgpu driver's gfx_target_version; gfx90a is 9.0.10)
    assert [arch_name(v) for v in (90402, 90500, 90010, 110000, 120500, 0)] == \
        ["gfx942", "gfx950", "gfx90a", "gfx1100", "gfx1250", None]


def test_the_first_gpu_node_of_the_topology_is_taken(tmp_path):
    """A topology laid out as the driver does: node 0 a CPU (gfx_target_version 0), nodes 1 and
    10 GPUs; nodes are read in number order, not name order."""
    for node, version in (("0", 0), ("10", 90500), ("1", 90402)):
        (tmp_path / node).mkdir()
        (tmp_path / node / "properties").write_text(
            f"cpu_cores_count 0\nsimd_count 1216\ngfx_target_version {version}\n"
            f"vendor_id 4098\n")
    assert local_gpu_arch(tmp_path) == "gfx942"
    assert local_gpu_arch(tmp_path / "absent") is None


def _diag(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diag", *args], capture_output=True, text=True,
                          timeout=300)


def test_a_bad_arch_or_triton_version_is_a_usage_error():
    r = _diag("diagnose", "--sglang", "0.5.23", "--gpu-arch", "mi300x")
    assert r.returncode == 2 and "'mi300x' is not an AMD GPU arch" in r.stderr
    assert "Traceback" not in r.stderr
    r = _diag("diagnose", "--sglang", "0.5.23", "--triton-version", "three")
    assert r.returncode == 2 and "'three' is not a version" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.release
def test_text_and_json_agree_on_what_the_arch_decides():
    args = ("diagnose", "--sglang", "0.5.23", "--platform", "hip", "--attention-backend",
            "aiter", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1")
    totals = {}
    for arch in ("gfx942", "gfx950"):
        j = _diag(*args, "--gpu-arch", arch, "--json")
        doc = json.loads(j.stdout)
        assert doc["config"]["gpu_arch"] == arch
        [syncs] = [f for f in doc["findings"] if f["probe"] == "metadata-syncs"]
        [metric] = [e for e in syncs["evidence"] if e["kind"] == "metric"
                    and e["metric"] == "syncs per target-extend step (static)"]
        text = _diag(*args, "--gpu-arch", arch).stdout
        assert f"platform hip ({arch})" in " ".join(text.split())
        assert f"syncs per target-extend step (static) = {metric['value']} syncs" in \
            " ".join(text.split())
        totals[arch] = metric["value"]
    # gfx942 rules out the sites behind is_gfx95_supported() (0.5.23 aiter_backend.py:2542,
    # :2591), so its total is strictly lower than gfx950's upper bound
    assert totals["gfx942"] < totals["gfx950"], totals
    # the eager target-extend forward's host reads all lie in the gfx950 ASM context prefill:
    # forward_extend's `if (is_gfx95_supported() and forward_batch.forward_mode.is_extend() and
    # ...)` (0.5.23 aiter_backend.py:4456-4472) -> the gather (:1333-1360 with
    # `_asm_context_prefill_gather_indices`, :287-336): none on gfx942
    for arch, want in (("gfx942", 0), ("gfx950", None)):
        doc = json.loads(_diag(*args, "--gpu-arch", arch, "--json").stdout)
        [syncs] = [f for f in doc["findings"] if f["probe"] == "metadata-syncs"]
        [fwd] = [e for e in syncs["evidence"] if e["kind"] == "metric" and e["metric"] ==
                 "attention-forward syncs per layer, eager target-extend pass (static)"]
        if want is None:
            assert fwd["value"] > 0 and not fwd["data"]["exact"], fwd
        else:
            assert fwd["value"] == want and fwd["data"]["exact"], fwd


@pytest.mark.release
def test_the_tui_decides_by_the_same_arch():
    """`diag tui --once` with --gpu-arch: its header shows the arch and its per-step line the
    total the JSON report gives (one census decision, rendered twice)."""
    args = ("--sglang", "0.5.23", "--platform", "hip", "--attention-backend", "aiter",
            "--speculative-num-steps", "3", "--gpu-arch", "gfx942")
    doc = json.loads(_diag("diagnose", *args, "--json").stdout)
    [syncs] = [f for f in doc["findings"] if f["probe"] == "metadata-syncs"]
    [metric] = [e for e in syncs["evidence"] if e["kind"] == "metric"
                and e["metric"] == "syncs per target-extend step (static)"]
    shown = "≤" if not metric["data"]["exact"] else ""
    once = " ".join(_diag("tui", "--once", *args).stdout.split())
    assert "hip gfx942" in once
    assert f"syncs per step (static): target-extend {shown}{metric['value']} ·" in once, once
