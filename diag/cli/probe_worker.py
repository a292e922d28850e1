"""The torch worker of `diag diagnose`: the probes that run torch, in one child process.

Why: importing torch takes seconds, and the probes that execute real code (the metadata builders,
the profiler cycle check) need it, while the others (and the metadata census, an AST scan of
~140 files) need none. The parent starts this worker first (before it resolves the target); the
worker imports torch at once and then measures the profiler cycle, which needs nothing from the
parent, while the parent computes the census; then the parent hands over the context (and the
census) on stdin, the worker runs its probes and sends the findings back on stdout. One torch
import in all, overlapped with the parsing on a second core; the parent never imports torch.

Protocol (parent and its own child, so pickle): argv the probe ids; stdin one pickled `Job`;
stdout one pickled `{"findings": [...], "torch": str | None}` (`torch`: why torch did not
import, when it did not). Ahead of the job a `Head` (the target and configuration) may come,
and ahead of the answer the messages of the worker's wait (the fixes' judgement, the findings
of a parent's probe it ran whole: `Head.borrow`). A worker that fails leaves the parent to run
the probes itself.
"""

from __future__ import annotations

import gc
import io
import os
import pickle
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported in the worker after torch (torch's import is the critical path)
    from diag.context import SpecConfig
    from diag.target import Target

# Probes whose runs need torch, run in the worker (in this order among themselves).


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


@dataclass
class Head:
    """What the parent knows once the target resolves, sent ahead of the job: the worker does
    each probe's `static_early` work with it while the parent computes the census."""

    target: Target
    platform: str
    config: SpecConfig
    execute: bool = True  # whether the probes may run the release's code (`execute_early`)
    # the parent's probes this worker may run whole in its wait (`Probe.runs_early`), with the
    # rest of the parent's context (no server: those probes read nothing else)
    borrow: tuple[str, ...] = ()
    run_dir: str | None = None
    full: bool = False
    verbose: bool = False


def start(probes: list[str]) -> subprocess.Popen | None:
    """Start the worker for `probes` (it begins importing torch at once); None when it cannot
    start."""
    from diag.home import home

    root = str(home())
    # PYTHONSAFEPATH (3.11+): `-m` would put the user's working folder first on the path, where
    # a stray `timeit.py` or `torch/` would shadow what the worker imports
    env = dict(os.environ, PYTHONSAFEPATH="1", PYTHONPATH=os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        return subprocess.Popen([sys.executable, "-m", "diag.cli.probe_worker", *probes],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    except OSError:
        return None


def send_head(proc: subprocess.Popen, head: Head) -> None:
    """Write `head` to the worker (a few hundred bytes: the pipe takes it at once). A worker
    that is gone is left to `collect`; an unpicklable head is not sent (the job still is)."""
    try:
        data = pickle.dumps(head)
    except (pickle.PicklingError, TypeError, AttributeError):
        return
    try:
        proc.stdin.write(data)
        proc.stdin.flush()
    except (OSError, ValueError):
        pass


def send(proc: subprocess.Popen, job: Job) -> bool:
    """Hand `job` to the worker without waiting for it to read it (it reads it once torch is
    imported and the cycle measured; the pipe holds 64 KiB and a census is larger): a thread
    writes it while the caller goes on. False if it cannot be pickled."""
    try:
        data = pickle.dumps(job)
    except (pickle.PicklingError, TypeError, AttributeError):
        stop(proc)
        return False

    def write() -> None:
        try:
            proc.stdin.write(data)
            proc.stdin.close()
        except (OSError, ValueError):  # the worker is gone: collect() says so
            pass

    proc._diag_writer = threading.Thread(target=write, daemon=True)  # type: ignore[attr-defined]
    proc._diag_writer.start()  # type: ignore[attr-defined]
    return True


def _reap_at_exit(reaper: threading.Thread, timeout: float = 2.0) -> None:
    """Wait for the worker's exit (its reaper) before this process ends, the report being out
    already: a parent that ended first would leave it to PID 1, and in a container whose PID 1
    reaps nothing (`tail -f /dev/null`, a Python entry point) each diagnose would leave a
    zombie behind. Bounded: a worker stuck in its exit is left to the system."""
    import atexit

    atexit.register(reaper.join, timeout)


def resolved_early(proc: subprocess.Popen, key: tuple) -> dict[str, Any] | None:
    """The fixes' applicability the worker judged in its wait for the census, for `key`
    (target, platform, configuration), when its message is here already; None when nothing
    is to be read now. The worker sends it before the census has reached it, if at all (it
    judges only when idle): a parent done with its own probes finds it waiting, and judges
    the fixes itself, in its own wait, where it is not there."""
    doc = _early(proc).get("resolved")
    return doc["resolved"] if doc is not None and doc.get("for") == key else None


def borrowed(proc: subprocess.Popen, probe_id: str, key: tuple) -> list | None:
    """The findings of the parent's probe `probe_id` that the worker ran whole in its wait
    (`Head.borrow`), for `key` (target, platform, configuration), when its message is here
    already; None when it is not (the worker had no time, or the probe is still running
    there): the parent runs the probe itself then, as without the worker."""
    doc = _early(proc).get(("borrowed", probe_id))
    return doc["found"] if doc is not None and doc.get("for") == key else None


def _early(proc: subprocess.Popen) -> dict[Any, dict]:
    """The worker's messages ahead of its answer that are here now, read without waiting
    (each is written whole, at once): the fixes' judgement under "resolved", a borrowed
    probe's findings under ("borrowed", id). The answer itself, when it came, is kept for
    `collect`."""
    got: dict[Any, dict] = proc.__dict__.setdefault("_diag_early", {})
    while getattr(proc, "_diag_answer", None) is None:
        try:
            if not _ready(proc.stdout):
                break
            doc = pickle.load(proc.stdout)  # noqa: S301  (our own child's message)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            break
        if isinstance(doc, dict) and "resolved" in doc and "findings" not in doc:
            got["resolved"] = doc
        elif isinstance(doc, dict) and "borrowed" in doc:
            got[("borrowed", doc["borrowed"])] = doc
        else:
            proc._diag_answer = doc  # type: ignore[attr-defined]  # the answer: collect's
    return got


def _answer(data: bytes) -> Any:
    """The worker's answer in what it wrote: its last message (a judgement of the fixes or a
    borrowed probe's findings the parent did not wait for may come first)."""
    buf = io.BytesIO(data)
    doc = None
    while buf.tell() < len(data):
        doc = pickle.load(buf)  # noqa: S301  (our own child's answer)
        if isinstance(doc, dict) and "findings" in doc:
            break
    return doc


def collect(proc: subprocess.Popen, timeout: float = 600.0) -> list | None:
    """The worker's findings; None when it failed or had no torch (the caller then runs the
    probes itself, and they report it as they always do).

    The worker closes its stdout once its answer is out, then exits; the exit of a process
    holding torch takes ~20 ms (its memory is unmapped), so a whole answer is taken without
    waiting for it: a thread reaps the worker, joined before this process ends (after the
    report). An answer that does not unpickle (the worker died writing it) or an exit status
    other than 0 (when it has one already) is a failure."""
    try:
        out = proc.stdout.read()
        writer = getattr(proc, "_diag_writer", None)
        if writer is not None:
            writer.join(timeout=timeout)
    except OSError:
        stop(proc)
        return None
    doc = getattr(proc, "_diag_answer", None)
    if doc is None and out:
        try:
            doc = _answer(out)
        except Exception:
            doc = None
    if not isinstance(doc, dict) or "findings" not in doc or proc.poll() not in (None, 0):
        try:  # no answer: the worker ended (or is ending) without one
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(proc)
        return None
    if proc.returncode is None:
        reaper = threading.Thread(target=proc.wait, daemon=True)
        reaper.start()
        _reap_at_exit(reaper)
    proc.stdout.close()
    if doc.get("torch"):
        return None
    return doc.get("findings")


def stop(proc: subprocess.Popen) -> None:
    """Give up on a started worker: killed before its stdin closes, so that it never reads an
    empty job (it would have nothing to say, and nothing of it may reach the user)."""
    proc.kill()
    try:
        proc.stdin.close()
    except (OSError, ValueError):
        pass
    proc.wait()


def _measure_early(probes: list[str]) -> dict[str, Any]:
    """Each probe's torch work that needs no context (`Probe.measure_early`), done before the
    job arrives: the parent is computing the census meanwhile."""
    from diag.probes import get

    early: dict[str, Any] = {}
    for pid in probes:
        early.update(get(pid).measure_early())
    return early


def _static_early(probes: list[str], head: Head) -> dict[str, Any]:
    """Each probe's `static_early` work for the head's target and configuration; a probe that
    fails here does it again (and reports it) in its `run`."""
    from diag.probes import get

    out: dict[str, Any] = {}
    for pid in probes:
        try:
            out.update(get(pid).static_early(head.target, head.platform, head.config))
        except Exception:
            pass
    return out


def _execute_early(probes: list[str], head: Head) -> dict[str, Any]:
    """Each probe's `execute_early` work (the release's code run alone), where the job has not
    arrived yet: the census is still on its way, so this costs the parent nothing; a probe that
    fails here does it in its `run`."""
    from diag.probes import get

    out: dict[str, Any] = {}
    for pid in probes:
        if _job_waiting():
            break
        try:
            out.update(get(pid).execute_early(head.target, head.platform))
        except Exception:
            pass
    return out


def _job_waiting() -> bool:
    """Whether the job is here (in the pipe, or read ahead with the head), without blocking."""
    return _ready(sys.stdin.buffer)


def _ready(stream: io.BufferedReader) -> bool:
    """Whether `stream` (a pipe) has bytes to read now, in the pipe or read ahead into its
    buffer, without blocking."""
    import select

    fd = stream.fileno()
    if select.select([fd], [], [], 0)[0]:
        return True
    os.set_blocking(fd, False)  # peek reads the pipe only when nothing is buffered: not now
    try:
        return bool(stream.peek(1))
    except BlockingIOError:
        return False
    finally:
        os.set_blocking(fd, True)


def _run_borrowed(head: Head) -> None:
    """Run the parent's probes the head lends (`Head.borrow`) whole, each only while the job
    has not arrived, and send each one's findings at once (`borrowed` takes them): the parent
    then skips that probe after its census. A probe that fails to load or run reports it in
    its findings, as `run_probe` makes them."""
    if not head.borrow:
        return
    from diag.cli.common import log
    from diag.context import Context
    from diag.probes import get
    from diag.probes.base import run_probe

    for pid in head.borrow:
        if _job_waiting():
            return
        try:
            probe = get(pid)
            ctx = Context(target=head.target, platform=head.platform, config=head.config,
                          run_dir=head.run_dir, execute=head.execute, full=head.full,
                          log=log)
            findings = run_probe(probe, ctx, verbose=head.verbose)
            data = pickle.dumps({"borrowed": pid, "found": findings,
                                 "for": (head.target, head.platform, head.config)})
        except Exception:  # the parent runs it itself
            continue
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def _send_resolved(head: Head) -> None:
    """Judge the fixes' applicability for the head's target, platform and configuration
    (`fixes.advice.resolve`, which reads only those) while the parent still computes the
    census, and send it at once (`resolved_early` takes it), so that the parent does not judge
    them after its probes; nothing when the job is here already (the worker is behind: the
    parent judges them in its wait) or the judging fails."""
    try:
        if _job_waiting():
            return
        from diag.context import Context
        from diag.fixes.advice import resolve

        resolved = resolve(Context(target=head.target, platform=head.platform,
                                   config=head.config))
        sys.stdout.buffer.write(pickle.dumps({"resolved": resolved, "for": (
            head.target, head.platform, head.config)}))
        sys.stdout.buffer.flush()
    except Exception:  # (a message cut short fails the answer: the parent runs the probes)
        return


def _main(argv: list[str]) -> int:
    why = None
    try:
        import torch  # noqa: F401  (first: this is what overlaps the parent's parsing)
    except Exception as e:
        why = f"{type(e).__name__}: {e}"
    early = _measure_early(argv) if why is None else {}
    # What torch's import left (a few hundred thousand objects) would be walked by every full
    # collection the probes' own allocations set off (~110 ms in a configured diagnose, inside
    # a census parse): the cyclic GC skips it from here on. After the profiler cycle's
    # measurement above, which times `gc.collect()` over that heap on purpose.
    gc.freeze()
    static: dict[str, Any] = {}
    try:
        first = pickle.load(sys.stdin.buffer)  # noqa: S301  (from our parent)
        # (run as `-m`, this module is `__main__`: the parent pickled the importable class)
        from diag.cli.probe_worker import Head as SentHead

        if isinstance(first, SentHead):  # the target and configuration, ahead of the job
            if why is None:
                static = _static_early(argv, first)
                _send_resolved(first)
                if first.execute:
                    static.update(_execute_early(argv, first))
                _run_borrowed(first)
            first = pickle.load(sys.stdin.buffer)  # noqa: S301
    except (EOFError, pickle.UnpicklingError):
        # the parent gave up (bad input, an error of its own): nothing to run
        return 0
    job: Job = first
    if why:
        sys.stdout.buffer.write(pickle.dumps({"findings": [], "torch": why}))
        return 0
    from diag.cli.common import log
    from diag.context import Context
    from diag.probes import get
    from diag.probes.base import run_probe

    ctx = Context(target=job.target, platform=job.platform, config=job.config,
                  server_url=job.server_url, run_dir=job.run_dir, execute=job.execute,
                  full=job.full, log=log, cache=dict(job.cache))
    if job.execute:
        for k, v in early.items():
            ctx.cache.setdefault(k, v)
    for k, v in static.items():
        ctx.cache.setdefault(k, v)
    findings = []
    for pid in job.probes:
        findings.extend(run_probe(get(pid), ctx, verbose=job.verbose))
    sys.stdout.buffer.write(pickle.dumps({"findings": findings, "torch": None}))
    return 0


if __name__ == "__main__":
    rc = _main(sys.argv[1:])
    # The answer is out: skip the interpreter's teardown of torch (over a second; the parent
    # waits for this process to end). Nothing here needs it: files were written atomically.
    # Closing stdout first ends the parent's read at once: it takes the answer while this
    # process still exits (~20 ms of unmapping torch's memory).
    sys.stdout.flush()
    try:
        os.close(sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.stderr.flush()
    os._exit(rc)
