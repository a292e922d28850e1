"""The torch worker of `diag diagnose`: the probes that run torch, in one child process.

Why: importing torch takes seconds, and the probes that execute real code (the metadata builders,
the profiler cycle check) need it, while the others (and the metadata census, an AST scan of
~140 files) need none. The parent starts this worker first; the worker imports torch at once
while the parent parses; then the parent hands over the context (and the census it computed)
on stdin, the worker runs its probes and sends the findings back on stdout. One torch import in
all, overlapped with the parsing on a second core; the parent never imports torch.

Protocol (parent and its own child, so pickle): stdin one pickled `Job`; stdout one pickled
`{"findings": [...], "torch": str | None}` (`torch`: why torch did not import, when it did not).
A worker that fails leaves the parent to run the probes itself, as before.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from diag.context import Context, SpecConfig
from diag.target import Target

# Probes whose runs need torch, run in the worker (in this order among themselves).
TORCH_PROBES = ("metadata-syncs", "profiler-teardown")
CENSUS_KEY = "metadata_census:{root}"  # metadata-syncs' ctx.cache entry for the census


@dataclass
class Job:
    probes: list[str]
    target: Target
    platform: str
    config: SpecConfig
    server_url: str | None
    run_dir: str | None
    execute: bool
    full: bool
    verbose: bool
    cache: dict[str, Any] = field(default_factory=dict)  # picklable ctx.cache entries


def start() -> subprocess.Popen | None:
    """Start the worker (it begins importing torch at once); None when it cannot start."""
    from diag.home import home

    root = str(home())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        return subprocess.Popen([sys.executable, "-m", "diag.cli.probe_worker"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    except OSError:
        return None


def send(proc: subprocess.Popen, job: Job) -> bool:
    """Hand `job` to the worker (it runs while the caller goes on); False if it is gone."""
    try:
        proc.stdin.write(pickle.dumps(job))
        proc.stdin.close()
        return True
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        stop(proc)
        return False


def collect(proc: subprocess.Popen, timeout: float = 600.0) -> list | None:
    """The worker's findings; None when it failed or had no torch (the caller then runs the
    probes itself, and they report it as they always do)."""
    try:
        out = proc.stdout.read()
        proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, OSError):
        stop(proc)
        return None
    if proc.returncode != 0 or not out:
        return None
    try:
        doc = pickle.loads(out)  # noqa: S301  (our own child's answer)
    except Exception:
        return None
    if doc.get("torch"):
        return None
    return doc.get("findings")


def stop(proc: subprocess.Popen) -> None:
    """Give up on a started worker."""
    try:
        proc.stdin.close()
    except (OSError, ValueError):
        pass
    proc.kill()
    proc.wait()


def _main() -> int:
    why = None
    try:
        import torch  # noqa: F401  (first: this is what overlaps the parent's parsing)
    except Exception as e:
        why = f"{type(e).__name__}: {e}"
    job: Job = pickle.loads(sys.stdin.buffer.read())  # noqa: S301  (from our parent)
    if why:
        sys.stdout.buffer.write(pickle.dumps({"findings": [], "torch": why}))
        return 0
    from diag.cli.common import log
    from diag.probes import get
    from diag.probes.base import run_probe

    ctx = Context(target=job.target, platform=job.platform, config=job.config,
                  server_url=job.server_url, run_dir=job.run_dir, execute=job.execute,
                  full=job.full, log=log, cache=dict(job.cache))
    if job.execute and "profiler-teardown" in job.probes:
        # measured here, inline: torch is imported already, and this process uses nothing of
        # torch's compiler stack, so the check may leave it out (`lean`)
        from diag.probes import profiler_teardown as pt

        if pt.CYCLE_REPORT not in ctx.cache and pt._cached_cycle() is None:
            rep = pt.runtime_cycle(lean=True)
            pt.store_cycle(rep)
            ctx.cache[pt.CYCLE_REPORT] = rep
    findings = []
    for pid in job.probes:
        findings.extend(run_probe(get(pid), ctx, verbose=job.verbose))
    sys.stdout.buffer.write(pickle.dumps({"findings": findings, "torch": None}))
    return 0


if __name__ == "__main__":
    rc = _main()
    # The answer is out: skip the interpreter's teardown of torch (over a second; the parent
    # waits for this process to end). Nothing here needs it: files were written atomically.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
