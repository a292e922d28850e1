"""Stand-in for the CPU's AMX flag, for the real SGLang server in the engine tests.

SGLang's `intel_amx` attention backend (the only CPU backend EAGLE accepts as draft backend,
`srt/speculative/draft_utils.py`) is switched on by `cpu_has_amx_support()`
(`srt/utils/common.py`): `torch.cpu._is_amx_tile_supported()` and a registered
`torch.ops.sgl_kernel.convert_weight_packed`. The flag exists because the real sgl_kernel CPU
kernels use AMX tiles. The kernels the engine gets here are the plain-torch stand-ins in
`sgl_kernel/` beside this file, which need no AMX; the CI machines (AMD EPYC) have no amx_tile.
So, only when `DIAG_STANDIN_AMX=1` and only where the CPU lacks the flag, this reports it as
present. It runs at interpreter start (before sglang reads the flag at import) in every engine
process: the folder is on PYTHONPATH and `diag run`'s bootstrap chains this file.
"""

import os

if os.environ.get("DIAG_STANDIN_AMX") == "1":
    try:
        import torch.cpu

        if not torch.cpu._is_amx_tile_supported():
            torch.cpu._is_amx_tile_supported = lambda: True
    except Exception as err:  # never stop an interpreter from starting
        import sys

        sys.stderr.write(f"engine_standins sitecustomize: {type(err).__name__}: {err}\n")

if os.environ.get("DIAG_STANDIN_FAULT_FIX") == "1":  # the engine lane's fault test
    try:
        import standin_fault_fix

        standin_fault_fix.register()
    except Exception as err:
        import sys

        sys.stderr.write(f"engine_standins sitecustomize: {type(err).__name__}: {err}\n")
