"""Child process for tests/test_allowlist_cuda_gate.py: the draft-extend allow-list fix against
the REAL `EagleDraftWorker._capture_cuda_graphs` of one SGLang release, as a CUDA process.

Run with `.venv-sglang/bin/python tests/allowlist_cuda_child.py VERSION` with the release tree,
`tests/standins` (the torchvision STAND-IN) and `tests/engine_standins_cuda` (the sgl_kernel
STAND-IN: 0.5.22's flashmla_backend.py imports `sgl_kernel.flash_mla` at module level, and the
CUDA branch of the gate imports that module for its tuple) on PYTHONPATH. What is not real
here, and why, is tests/allowlist_child.py's list (a stand-in runner class, a worker built
with `object.__new__`, engine-only functions replaced); the platform flags are set on the
module (`_is_cuda` True, `_is_hip` False): this machine has no GPU.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from allowlist_child import StandinDraftExtendRunner, capture, setup_module  # noqa: E402

VERSION = sys.argv[1]
WORKER = "sglang.srt.speculative.eagle_worker_v2"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def main() -> None:
    from diag.fixes.draft_extend_allowlist import DraftExtendAllowlistFix
    from diag.target import from_path

    target = from_path(Path(os.environ["DIAG_RELEASE_ROOT"]))
    m = importlib.import_module(WORKER)
    setup_module(m)
    m._is_hip, m._is_cuda = False, True  # a CUDA process
    lines = _Lines()
    m.logger.addHandler(lines)
    m.logger.setLevel(logging.INFO)
    from sglang.srt.layers.attention import flashattention_backend, triton_backend

    fa3 = object.__new__(flashattention_backend.FlashAttentionBackend)
    triton = object.__new__(triton_backend.TritonAttnBackend)
    res: dict = {"version": VERSION}
    res["without"] = {"fa3": capture(m, fa3), "triton": capture(m, triton)}
    fix = DraftExtendAllowlistFix()
    st = fix.apply(target, "cuda")
    res["apply_state"], res["apply_reason"] = st.state, st.reason
    res["with"] = {"fa3": capture(m, fa3), "triton": capture(m, triton)}
    os.environ["SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"] = "1"
    res["kill_switch"] = capture(m, fa3)
    del os.environ["SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"]
    res["records"] = [r.__dict__ for r in fix.records]
    res["log"] = [ln for ln in lines.lines if "draft extend" in ln.lower()]
    if st.active:
        fix.revert()
    res["after_revert"] = capture(m, fa3)
    res["standin_built"] = len(StandinDraftExtendRunner.built)
    print("RESULT " + json.dumps(res))


if __name__ == "__main__":
    main()
