"""Child process for tests/test_startup_against_sglang.py: runs a REAL SGLang release's own
argument handling (`ServerArgs(...).resolve_once()`, 0.5.23 srt/server_args.py and
srt/arg_groups/pipeline.py) on this CPU for each case read from stdin, and prints what SGLang
resolved (or the error it raised at start) as JSON lines.

Run with `.venv-sglang/bin/python tests/resolve_child.py` with the release tree and
`tests/standins` (the torchvision STAND-IN: its CUDA wheels fail against CPU torch) on
PYTHONPATH. The GPU is SGLang's own override, not a stand-in: `override_platform(**facts)`
(0.5.23 srt/runtime_context.py:1950, the class at :1908-1947) sets the platform facts every argument handler reads
through `get_platform()` (is_hip, is_cuda, is_sm90, has_flashinfer, ...). A case is
{"id", "facts", "env", "args"}; args are ServerArgs fields.

One STAND-IN: `torch.cuda.get_device_capability` answers the case's `device_capability` fact,
because a CPU build of torch cannot (0.5.23 srt/arg_groups/model_hook.py:341 asks it directly
for DeepSeek DSA, beside the platform facts). What the override does not reach: helpers that
test `is_hip()` themselves (srt/utils/common.py:141-142) see this CPU. Setting
`torch.version.hip` instead makes the first import of the quantization modules query the
device (common.py:1269), so it is not done; the one such helper on these paths,
`aiter_can_use_preshuffle_paged_mqa` (srt/layers/attention/dsa/utils.py:33-68), answers False
here, the legacy path (DSA on ROCm: page size 1). An error raised by torch's device layer is
marked `environment`: it is this machine's, not SGLang refusing the configuration.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
import warnings

KEYS = ("attention_backend", "decode_attention_backend", "prefill_attention_backend",
        "page_size", "speculative_algorithm", "speculative_eagle_topk",
        "speculative_num_steps", "speculative_num_draft_tokens", "disable_overlap_schedule",
        "disable_cuda_graph", "speculative_draft_attention_backend")


def standin_device_capability(facts: dict):
    """STAND-IN for torch.cuda.get_device_capability (a CPU build of torch has no device):
    the case's `device_capability` fact, the one the platform override gives SGLang too."""
    cap = tuple(facts.get("device_capability") or (0, 0))

    def get_device_capability(_device=None) -> tuple:
        return cap

    return get_device_capability


def main() -> int:
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    import torch
    from sglang.srt import runtime_context as rc
    from sglang.srt.runtime_context import override_platform

    known = set(rc._PLATFORM_PROBES) | set(rc._PLATFORM_VALUES)  # facts vary by release
    from sglang.srt.server_args import ServerArgs

    for line in sys.stdin:
        case = json.loads(line)
        saved = {k: os.environ.get(k) for k in case.get("env", {})}
        os.environ.update(case.get("env", {}))
        out: dict = {"id": case["id"]}
        torch.cuda.get_device_capability = standin_device_capability(case["facts"])
        try:
            with override_platform(**{k: v for k, v in case["facts"].items() if k in known}):
                a = ServerArgs(**case["args"])
                a.resolve_once()
                d = a.resolved_dict()
            out["resolved"] = {k: d.get(k) for k in KEYS}
        except Exception as e:  # SGLang refusing the configuration at start is a result
            tb = traceback.extract_tb(e.__traceback__)
            out["error"] = {"type": type(e).__name__, "message": str(e)[:400],
                            "environment": any("/torch/cuda/" in f.filename for f in tb),
                            "at": f"{tb[-1].filename.split('/sglang/')[-1]}:{tb[-1].lineno}"}
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
