"""`diag bench draft-extend-allowlist`: the step's shape on CPU, the skip without a GPU, the
eager-vs-graph measurement on a GPU (marked `gpu`)."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner
from torch.utils._python_dispatch import TorchDispatchMode

from diag.errors import DiagError
from diag.fixes.bench_draft_extend import build_step, resolve_params, run


class _CountOps(TorchDispatchMode):
    """Counts the aten ops a step dispatches (each is a kernel launch on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_design_preset_is_72_kernels():
    p = resolve_params({"preset": "design", "dtype": "fp32"})
    assert (p["layers"], p["hidden"], p["batch"]) == (12, 1024, 8)
    step, _ = build_step(p, "cpu")
    with torch.inference_mode(), _CountOps() as c:
        out = step()
    assert len(c.ops) == 72
    assert out.shape == (8, 1024)


def test_mtp_step_runs_and_scales_with_layers():
    small = {"hidden": 128, "heads": 4, "mlp": 256, "context": 32, "vocab": 500, "dtype": "fp32"}
    counts = []
    for layers in (1, 2):
        p = resolve_params({**small, "layers": layers})
        step, _ = build_step(p, "cpu")
        with torch.inference_mode(), _CountOps() as c:
            out = step()
        counts.append(len(c.ops))
        assert out.shape == (p["batch"] * p["tokens"], 500)
        assert torch.isfinite(out).all()
    assert counts[1] > counts[0]
    assert "aten.scaled_dot_product_attention.default" in c.ops


def test_defaults_are_a_one_layer_mtp_draft():
    p = resolve_params({})
    assert p["preset"] == "mtp" and p["layers"] == 1 and p["dtype"] == "bf16"
    assert resolve_params({"quick": True})["repeats"] < p["repeats"]


@pytest.mark.parametrize("bad", [{"preset": "nope"}, {"layers": 0}, {"batch": "x"},
                                 {"dtype": "int8"}, {"colour": 1}, {"hidden": 100, "heads": 3}])
def test_bad_params_are_one_line_usage_errors(bad):
    with pytest.raises(DiagError) as e:
        resolve_params(bad)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_without_gpu_it_is_skipped_with_no_numbers():
    r = run({"quick": True}, lambda _: None)
    assert r.skipped and "no CUDA/ROCm GPU" in r.skipped
    assert r.rows == []


def test_cli_bad_param_exit_code():
    from diag.cli import main as cli

    r = CliRunner().invoke(cli, ["bench", "draft-extend-allowlist", "--param", "preset=nope"])
    assert r.exit_code == 2, r.output


@pytest.mark.gpu
def test_graph_replay_beats_eager_on_the_design_step():
    r = run({"preset": "design", "quick": True}, lambda _: None)
    assert r.skipped is None
    row = r.rows[0]
    assert row.before.median > 0 and row.after.median > 0
    assert row.after.median < row.before.median  # replay launches 72 kernels at once
    assert any(n.startswith("max |graph - eager|") for n in r.notes)
