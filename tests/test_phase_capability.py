"""The upstream capability method (sglang PR #36324): the draft-extend gate asks the backend
class (`supports_draft_extend_cuda_graph()`, False on the base class) instead of an isinstance
allow-list. No release is built that way yet, so the tree here is a *stand-in*: a copy of the
real 0.5.23 tree rewritten in the test set-up the way the PR does it (the gate calls the
method; the base class says False; Triton and DSA say True; FlashAttention answers from its
sliding-window pool, as the PR's own test pins), and read with the same code as any release."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from diag.context import SpecConfig
from diag.probes import gate as gate_mod
from diag.probes.draft_extend_graph import phases
from diag.target import Target
from tests.conftest import release_target

OLD_GATE_START = "        supports_hip_draft_extend_graph = False\n"
OLD_GATE_END = ("        supports_cuda_draft_extend_graph = (\n"
                "            _is_cuda or _is_musa\n"
                "        ) and graph_supported_backend\n")
NEW_GATE = ("        supports_draft_extend_graph = (\n"
            "            self.draft_extend_attn_backend is not None\n"
            "            and self.draft_extend_attn_backend.supports_draft_extend_cuda_graph()\n"
            "        )\n")
OLD_USE = ("                    or supports_cuda_draft_extend_graph\n"
           "                    or supports_hip_draft_extend_graph\n")
NEW_USE = "                    or supports_draft_extend_graph\n"
METHODS = {  # file under srt/layers/attention -> (class line, what the method returns)
    "base_attn_backend.py": ("class AttentionBackend(ABC):\n", "False"),
    "triton_backend.py": ("class TritonAttnBackend(AttentionBackend):\n", "True"),
    "flashattention_backend.py": ("class FlashAttentionBackend(AttentionBackend):\n",
                                  "not self.use_sliding_window_kv_pool"),
    "dsa_backend.py": ("class DeepseekSparseAttnBackend(\n", None),
}


def _link_tree(real: Path, root: Path, copied: tuple[str, ...]) -> None:
    """Links to the real tree, with the directories in `copied` (relative) copied writable."""
    def walk(src: Path, dst: Path) -> None:
        dst.mkdir(parents=True, exist_ok=True)
        for child in src.iterdir():
            rel = child.relative_to(real).as_posix()
            if rel in copied:
                shutil.copytree(child, dst / child.name)
            elif any(c.startswith(rel + "/") for c in copied):
                walk(child, dst / child.name)
            else:
                (dst / child.name).symlink_to(child)
    walk(real, root)


@pytest.fixture(scope="module")
def standin_tree(tmp_path_factory) -> Target:
    real = release_target("0.5.23").root
    root = tmp_path_factory.mktemp("pr36324_standin")
    _link_tree(real, root, ("sglang/srt/speculative", "sglang/srt/layers/attention"))
    worker = root / "sglang/srt/speculative/eagle_worker_v2.py"
    text = worker.read_text()
    a, b = text.index(OLD_GATE_START), text.index(OLD_GATE_END) + len(OLD_GATE_END)
    text = text[:a] + NEW_GATE + text[b:]
    assert OLD_USE in text
    worker.write_text(text.replace(OLD_USE, NEW_USE))
    attn = root / "sglang/srt/layers/attention"
    for name, (cls_line, value) in METHODS.items():
        src = (attn / name).read_text()
        if value is None:  # a multi-line class header: insert after its closing `):`
            start = src.index(cls_line)
            end = src.index("):\n", start) + 3
            value, cls_line = "True", src[start:end]
        method = (f"    def supports_draft_extend_cuda_graph(self) -> bool:\n"
                  f"        return {value}\n\n")
        assert cls_line in src
        (attn / name).write_text(src.replace(cls_line, cls_line + method, 1))
    return Target(root=root, version="0.5.23+pr36324-standin", origin="path")


def _line_of(t: Target, rel: str, needle: str) -> int:
    lines = t.file(rel).read_text().splitlines()
    return 1 + next(i for i, ln in enumerate(lines) if needle in ln)


def test_gate_reads_the_capability_method(standin_tree):
    g = gate_mod.read_gate(standin_tree)
    assert g.recognised and g.hip_policy == g.cuda_policy == "capability"
    assert g.capability_attr == "draft_extend_attn_backend"
    assert g.line == _line_of(standin_tree, gate_mod.V2_FILE,
                              ".supports_draft_extend_cuda_graph()")


@pytest.mark.parametrize("platform", ["hip", "cuda"])
@pytest.mark.parametrize("backend, mode, owner", [
    ("triton", "graph", ("triton_backend.py", "TritonAttnBackend")),
    ("dsa", "graph", ("dsa_backend.py", "DeepseekSparseAttnBackend")),
    ("aiter", "eager", ("base_attn_backend.py", "AttentionBackend")),  # inherits the default
    ("fa3", "depends", ("flashattention_backend.py", "FlashAttentionBackend")),
])
def test_each_backend_answers_for_itself(standin_tree, platform, backend, mode, owner):
    """The same answer on both platforms (no allow-list per platform any more), cited at the
    method that answers, found through the class's bases."""
    cfg = SpecConfig(attention_backend=backend, model="llama", speculative_eagle_topk=1,
                     speculative_num_steps=3, environ={})
    de = [v for v in phases.phase_verdicts(standin_tree, platform, cfg, backend)
          if v.phase == "draft-extend"][0]
    assert de.mode == mode, de.reason
    line = _line_of(standin_tree, f"srt/layers/attention/{owner[0]}",
                    "def supports_draft_extend_cuda_graph")
    assert f"sglang/srt/layers/attention/{owner[0]}:{line}" in de.reason
    assert f"{owner[1]}.supports_draft_extend_cuda_graph()" in de.reason
    if mode == "depends":
        assert "use_sliding_window_kv_pool" in de.reason


def test_the_allowlist_fix_does_not_claim_a_capability_tree(standin_tree):
    from diag.fixes import get

    a = get("draft-extend-allowlist").applies_to(standin_tree, "hip", SpecConfig(
        attention_backend="triton", speculative_num_steps=3))
    assert a.status != "applicable"


def test_probe_names_the_capability_gate(standin_tree):
    from diag.context import Context
    from diag.probes import get

    ctx = Context(target=standin_tree, platform="hip", execute=False, config=SpecConfig(
        attention_backend="aiter", model="llama", speculative_num_steps=3, environ={}))
    [f] = get("draft-extend-graph").run(ctx)
    assert f.status.value == "fail"
    assert "self.draft_extend_attn_backend.supports_draft_extend_cuda_graph()" in \
        f.evidence[0].detail
    rows = [e.data for e in f.evidence if e.kind == "row" and e.data.get("config")]
    assert [r["mode"] for r in rows if r["phase"] == "draft-extend"] == ["eager"]
