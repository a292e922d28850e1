"""STAND-IN process (not SGLang) for the agent fault tests: an agent under diag's bootstrap that
runs no batches. With `import-scheduler` it imports the stand-in scheduler module (the per-batch
hook goes in) but never runs a loop, as SGLang's launcher does. It prints its pid, then waits
until the file STOP exists.

Usage: python standin_idle.py STOP [import-scheduler]
"""

from __future__ import annotations

import os
import sys
import time

if "import-scheduler" in sys.argv[2:]:
    import standin_scheduler  # noqa: F401

print(os.getpid(), flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.02)
