"""Fields of the speculative input its writers set together (census/spec_writers.py): fa3's
draft-extend replay fallback that copies `extend_seq_lens_cpu` up cannot run. Expected from the
release sources (file:line)."""

from __future__ import annotations

import pytest

from diag.probes.metadata_syncs.census.count import census
from diag.probes.metadata_syncs.census.spec_writers import co_set

FA = "sglang/srt/layers/attention/flashattention_backend.py"
RUNNER = "sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py"


@pytest.mark.release
@pytest.mark.parametrize("version, writer, site", [("0.5.19", 563, 3077), ("0.5.23", 625, 3300)])
def test_the_as_tensor_fallback_after_the_tensor_is_unreachable(release, version, writer, site):
    """0.5.23 eagle_draft_extend_cuda_graph_runner.py:625-628 (0.5.19 :563-566) is the one
    writer of `spec_info.extend_seq_lens_cpu` and sets `extend_seq_lens_tensor` beside it; the
    multi-layer runner sets the tensor alone (0.5.23 multi_layer_...:915, 0.5.19 :793), so the
    tensor does not imply the list. fa3's `elif extend_seq_lens_cpu is not None:
    torch.as_tensor(..., device=device)` (0.5.23 flashattention_backend.py:3299-3303, 0.5.19
    :3076-3080) after `if extend_seq_lens_tensor is not None:` cannot run."""
    t = release(version)
    assert co_set(t.root, "extend_seq_lens_cpu", "extend_seq_lens_tensor") == f"{RUNNER}:{writer}"
    assert co_set(t.root, "extend_seq_lens_tensor", "extend_seq_lens_cpu") is None
    [s] = [s for s in census(t).sites if (s.file, s.line, s.kind) == (FA, site, "h2d")]
    assert (s.verdict, s.paths) == ("unreachable", ())
    assert f"{RUNNER}:{writer}" in s.why


def _tree(tmp_path, files: dict[str, str]):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_a_lone_writer_a_declared_field_or_no_writer_decide_nothing(tmp_path):
    both = ("def replay(fb):\n"
            "    fb.spec_info.b = [1]\n"
            "    fb.spec_info.a = t\n")
    root = _tree(tmp_path / "ok", {"sglang/srt/speculative/runner.py": both})
    assert co_set(root, "b", "a") == "sglang/srt/speculative/runner.py:2"
    alone = both + "\ndef other(spec_info):\n    spec_info.b = [2]\n"
    root = _tree(tmp_path / "alone", {"sglang/srt/speculative/runner.py": alone})
    assert co_set(root, "b", "a") is None
    declared = "class DraftInput:\n    b: list = None\n"
    root = _tree(tmp_path / "declared", {"sglang/srt/speculative/runner.py": both,
                                         "sglang/srt/speculative/info.py": declared})
    assert co_set(root, "b", "a") is None
    root = _tree(tmp_path / "none", {"sglang/srt/speculative/runner.py": "x = 1\n"})
    assert co_set(root, "b", "a") is None
