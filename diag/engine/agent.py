"""The in-engine agent: applies requested fixes, runs the runtime counters, writes events, obeys
control requests — inside every process of an engine, without ever taking the engine down.

It is started by the bootstrap `sitecustomize` (`diag run`), by the SGLang plugin entry point, or
by `diag.api`. Configuration comes from the environment (names in `diag.engine.rundir`): `DIAG_RUN_DIR`,
`DIAG_FIXES` (ids or `all`), `DIAG_PROBES` (runtime counters: probe ids or `all`),
`DIAG_CONTROL_POLL`, `DIAG_EVENTS_MAX_BYTES`, `DIAG_BATCH_HOOK`, `DIAG_PLATFORM`,
`DIAG_STACKS_SIGNAL` (`diag.engine.last_words`).

Nothing here imports sglang. Fixes and counters are set up when the `sglang` package is first
imported (a post-import hook) — or at once when it already is — and the patcher patches each
target module when it is imported.

Control requests (`diag fix apply|revert --run-dir`) are read by a poll thread. Where they are
applied (the safe point):
- in an SGLang scheduler, at the next call of `Scheduler.run_batch` or
  `Scheduler.process_input_requests` — i.e. at the top of an event-loop iteration or just before a
  batch is launched, never while a batch is being built or run (an idle scheduler still reaches
  `process_input_requests` every iteration). `DIAG_BATCH_HOOK` can name other methods
  (`module:Class.method,...`), e.g. a stand-in scheduler in tests;
- in any other process (no scheduler module imported), on the poll thread itself: the attribute
  swap is atomic, a call already running finishes with the code it started with, calls started
  afterwards see the new state. Programs with their own loop can call `diag.api.safe_point()` to
  apply pending requests at a point of their choosing instead (set `DIAG_CONTROL=manual`).

The agent's periodic work (reading the control folder, flushing the counters that fold
in-process, its own time as `agent_time` events) follows the same rule in an engine process: the
poll thread only marks it due and the next batch boundary does it, so none of it lands inside a
step; an engine that reaches no boundary for `IDLE_S` (idle) gets it done on the poll thread.
A request for fix `probe:<id>` switches that probe's runtime counter on (`apply`) or off
(`revert`) at the same safe point (`diag bench overhead`).

Requests are checked first (`diag.engine.control`: an invalid one is rejected with the reason);
a process that is not an engine process applies them on the poll thread even where the per-batch
hook is in (the launcher imports the scheduler module but runs no loop). The agent keeps to its
own run directory: one removed and made again under the path, or whose run.json names another
run, is left alone for good. Event writes that fail are counted (`diag.engine.eventlog`).

Every failure is logged (logger `diag.engine.agent`), recorded as an `error` event, and leaves that
part of the engine unpatched.

Size (over ~600 lines, kept whole): the agent is one class, `Agent`, whose parts (fixes,
counters, control requests, periodic work) share its lock and its state.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import traceback
from collections import deque
from typing import TYPE_CHECKING, Any

from diag import events as ev
from diag import telemetry
from diag.engine import control, rundir
from diag.engine.events import AgentTime

if TYPE_CHECKING:
    from diag.fixes.base import FixState

log = logging.getLogger("diag.agent")

ENV_BATCH_HOOK = "DIAG_BATCH_HOOK"
ENV_PLATFORM = "DIAG_PLATFORM"
ENV_CONTROL = "DIAG_CONTROL"  # "auto" (default) | "manual": only diag.api.safe_point() applies
DEFAULT_BATCH_HOOK = ("sglang.srt.managers.scheduler:Scheduler.run_batch,"
                      "sglang.srt.managers.scheduler:Scheduler.process_input_requests")
# A process is an *engine process* (it runs batches, so it must acknowledge control requests)
# once a per-batch hook has run in it, or once its title says it is an SGLang scheduler (set by
# `run_scheduler_process` with setproctitle before the model loads). Others (the launcher, which
# imports the scheduler module but runs no loop; the detokenizer; multiprocessing helpers) are
# reported as not engine processes, and `diag fix apply` does not wait for them.
ENGINE_TITLES = ("sglang::scheduler",)

PROBE_PREFIX = "probe:"  # a control request for a probe's counter: fix "probe:<id>"
# a control request that forces a mode in the engine, for a bench: "mode:draft-extend-eager"
# (apply: the draft-extend graph check answers no; revert: it answers again; the draft-extend
# counter, `probes.draft_extend_graph.runtime`, carries the switch)
MODE_PREFIX = "mode:"
DE_EAGER = MODE_PREFIX + "draft-extend-eager"
IDLE_S = 1.0  # background work waits this long for a batch boundary before running anyway
OWN_EVERY_S = 5.0  # the agent's own time is emitted at most this often
# the counters that fold in-process are flushed at most this often (and at least every 5 polls):
# each flush writes an event per key, on the scheduler's thread at a batch boundary; five times a
# second that was ~10 events of ~40 us each 0.2 s on a busy engine, once a second a fifth of it
FLUSH_EVERY_S = 1.0

_agent: Agent | None = None
_start_lock = threading.Lock()


def _counter_ids() -> list[str]:
    """The probes with a runtime counter, from the registry."""
    from diag import probes

    try:
        return probes.with_counter()
    except Exception as e:
        log.warning("diag agent: probe registry unreadable: %s: %s", type(e).__name__, e)
        return []


def _split(value: str | None, known: list[str]) -> list[str]:
    items = [x.strip() for x in (value or "").split(",") if x.strip()]
    if "all" in items:
        return list(known)
    return list(dict.fromkeys(items))


def wanted(env: dict[str, str] | os._Environ | None = None) -> bool:
    """Whether the environment asks for the agent (any DIAG_RUN_DIR/FIXES/PROBES, or DIAG_AGENT=1)."""
    env = os.environ if env is None else env
    if env.get(rundir.ENV_AGENT) == "0":
        return False
    return bool(env.get(rundir.ENV_AGENT) == "1" or env.get(rundir.ENV_RUN_DIR)
                or env.get(rundir.ENV_FIXES) or env.get(rundir.ENV_PROBES))


def start(source: str = "api") -> Agent | None:
    """Start the agent of this process once (idempotent). Never raises; None when it could not."""
    global _agent
    try:
        with _start_lock:
            if _agent is None:
                a = Agent(source)
                a.start()
                _agent = a
            return _agent
    except Exception as e:
        log.warning("diag agent could not start: %s: %s", type(e).__name__, e)
        return None


def current() -> Agent | None:
    return _agent


def _torch_build() -> dict[str, str | None] | None:
    """This process's torch build (cuda, hip) without importing torch; None: not found."""
    try:
        torch = sys.modules.get("torch")
        if torch is not None and getattr(torch, "version", None) is not None:
            return {"cuda": getattr(torch.version, "cuda", None),
                    "hip": getattr(torch.version, "hip", None)}
        from diag.gpu_platform import torch_build

        b = torch_build()
        return None if b is None else {"cuda": b[0], "hip": b[1]}
    except Exception:
        return None


def _host_facts() -> dict[str, str | None]:
    """This host's AMD GPU arch and the process's Triton, read without imports (never raises):
    what `diag diagnose --run-dir` decides arch and Triton branches by."""
    try:
        from diag.gpu_platform import local_gpu_arch, local_triton_version

        triton = sys.modules.get("triton")
        version = getattr(triton, "__version__", None) if triton is not None else None
        return {"gpu_arch": local_gpu_arch(),
                "triton": version if isinstance(version, str) else local_triton_version()}
    except Exception:
        return {"gpu_arch": None, "triton": None}


def _platform() -> str:
    """hip | cuda without importing torch (`diag.fixes.base.process_platform`)."""
    from diag.fixes.base import process_platform

    return process_platform()


def _fix_state(state: str, reason: str) -> FixState:
    """The fixes' own state type (`diag.fixes.base.FixState`), imported when first used: the
    agent's module stays light until an agent starts."""
    from diag.fixes.base import FixState

    return FixState(state, reason)


class Agent:
    """One per process (re-created in a forked child)."""

    def __init__(self, source: str = "api") -> None:
        from diag import fixes

        self.source = source
        self.run_dir = os.environ.get(rundir.ENV_RUN_DIR) or None
        self.fix_ids = _split(os.environ.get(rundir.ENV_FIXES), fixes.all_ids())
        asked = os.environ.get(rundir.ENV_PROBES)
        # the registry is read (every probe module imported) only for `all`
        self.probe_ids = _split(asked, _counter_ids() if "all" in (asked or "") else [])
        try:
            self.poll_s = max(0.02, float(os.environ.get(rundir.ENV_POLL, "0.2")))
        except ValueError:
            self.poll_s = 0.2
        self.manual = os.environ.get(ENV_CONTROL) == "manual"
        self.pid = os.getpid()
        self.writer: rundir.EventWriter | None = None
        self.fixes: dict[str, FixState] = {}
        self.probes: dict[str, dict[str, Any]] = {}
        self.probe_patches: dict[str, Any] = {}
        self.sglang: str | None = None
        self.sglang_seen = False
        self.batch_patch = None
        self.control_mode = "poll"
        self.engine = False
        self.rank: str | None = None  # the scheduler's ranks, from its process title (rank_of)
        self.run_id = os.environ.get(rundir.ENV_RUN_ID) or None
        self._dir_id: tuple[int, int] | None = None  # (st_dev, st_ino) of our run directory
        self._meta_mtime: int | None = None
        self.reader: control.Reader | None = None
        self.desired: dict[str, bool] = {}  # fix id -> applied, as the last control request said
        self._queue: deque[dict[str, Any]] = deque()
        self.pending = False  # the one flag the per-batch hook reads
        # Background work (control poll, counters' flush) in an engine process runs at the
        # next batch boundary: the poll thread only raises `due` (and `pending`, the flag the
        # boundary reads), so none of it lands inside a step. An engine that reaches no
        # boundary for IDLE_S (idle, blocked) gets it done on the poll thread instead.
        self.due = False
        self._due_since = 0.0
        self.boundary_failed = False
        self._work_lock = threading.Lock()
        self.own_time: dict[str, list[float]] = {}  # where -> [runs, seconds] (agent_time)
        self._own_emitted: dict[str, list[float]] = {}
        self._own_last_emit = time.monotonic()
        self.own_every = min(OWN_EVERY_S, 20 * self.poll_s)
        self.flush_every = min(FLUSH_EVERY_S, 5 * self.poll_s)
        self._last_flush = time.monotonic()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ start-up

    def start(self) -> None:
        if self.run_dir:
            try:
                self._bind(rundir.check_run_dir(self.run_dir))
            except Exception as e:  # unsafe or missing dir: no events, no control
                log.warning("diag agent: run directory not used: %s", e)
                self.writer = None
        if self.writer is not None:  # how this process dies, for `diag fix status` (never raises)
            from diag.engine import last_words

            last_words.install(self.writer.run_dir)
        self._install_metrics()
        for fid in self.fix_ids:
            self.fixes[fid] = _fix_state("pending", "applied when sglang is imported")
        for pid in self.probe_ids:
            self.probes[pid] = {"state": "pending", "reason": "switched on when sglang is imported"}
        if "sglang" in sys.modules:
            self._on_sglang(sys.modules["sglang"], emit=False)
        elif self.fix_ids or self.probe_ids or self.run_dir:
            self._register_sglang_hook()
        self._emit_start()
        self._install_batch_hook()  # patches the scheduler when (if ever) it is imported
        if self.writer is not None or self.probe_ids:  # counters fold in-process: flush them
            self._thread = threading.Thread(target=self._poll_loop, name="diag-agent-control",
                                            daemon=True)
            self._thread.start()
        with contextlib.suppress(Exception):
            os.register_at_fork(after_in_child=_after_fork)

    def _bind(self, d: Any) -> None:
        """Use run directory `d`: remember which directory it is (a directory re-created under
        the same path is another run's) and its run id (`DIAG_RUN_ID`, else its run.json's)."""
        st = os.stat(d)
        self._dir_id = (st.st_dev, st.st_ino)
        if self.run_id is None:
            rid = rundir.read_meta(d).get("run_id")
            self.run_id = rid if isinstance(rid, str) else None  # a damaged run.json: none
        self.writer = rundir.EventWriter(d, run_id=self.run_id)
        self.writer.on_lost = _count_lost
        self.reader = control.Reader(d)
        telemetry.add_sink(self.writer)

    def _still_ours(self) -> bool:
        """False once the run directory is not this run's any more (re-created, or its run.json
        names another run): the agent then neither writes there nor obeys it, for good. A
        directory removed under it (re-created or not) is left for `rundir.relocate`'s."""
        w = self.writer
        if w is None or w.detached:
            return False
        try:
            st = os.stat(w.run_dir)
        except OSError:
            st = None
        why = None
        if w.removed():  # ours is gone for good: go on in a new one that names it (relocate)
            why = "was removed" + (" and another one made under its path" if st else "")
            return self._move(w, why)
        if st is None:
            return True  # not reachable now: writes fail and are counted
        if (st.st_dev, st.st_ino) != self._dir_id:
            why = "the directory was removed and another one made under its path"
        elif self.run_id:
            meta = w.run_dir / "run.json"
            with contextlib.suppress(OSError):
                m = os.stat(meta).st_mtime_ns
                if m != self._meta_mtime:
                    self._meta_mtime = m
                    other = rundir.read_meta(w.run_dir).get("run_id")
                    if other and other != self.run_id:
                        why = f"its run.json names run {other}, not this run ({self.run_id})"
        if why is None:
            return True
        w.detached = True
        telemetry.remove_sink(w)
        log.warning("diag agent: run directory %s is not this run's any more (%s): no more events "
                    "there, its control requests are ignored", w.run_dir, why)
        return False

    def _move(self, w: Any, why: str) -> bool:
        """Go on writing events and reading control requests in `rundir.relocate`'s directory
        (False, and no more events, when that fails)."""
        old = w.run_dir
        try:
            new = rundir.relocate(old, self.run_id, self.pid)
            w.move_to(new)
            st = os.stat(new)
            self._dir_id, self._meta_mtime = (st.st_dev, st.st_ino), None
            self.reader = control.Reader(new)
        except Exception as e:
            w.detached = True
            telemetry.remove_sink(w)
            self.error(f"move from the removed run directory {old}", e)
            return False
        log.warning("diag agent: run directory %s %s: events and control requests are in %s "
                    "now (diag fix status --run-dir %s)", old, why, new, new)
        return True

    def _install_metrics(self) -> None:
        try:
            import importlib.util

            if importlib.util.find_spec("diag.engine.metrics") is not None:
                from diag.engine import metrics

                metrics.install()
        except Exception as e:
            self.error("metrics.install", e)

    def _register_sglang_hook(self) -> None:
        try:
            import wrapt

            wrapt.register_post_import_hook(self._on_sglang_hook, "sglang")
        except Exception as e:
            self.error("register sglang import hook", e)

    def _on_sglang_hook(self, module: Any) -> None:
        self._on_sglang(module, emit=True)

    def _emit_start(self) -> None:
        import platform as _pf

        from diag import fixes

        ev.emit(ev.Start(ppid=os.getppid(), argv=list(sys.argv), python=_pf.python_version(),
                         executable=sys.executable, started=time.time(), source=self.source,
                         sglang=self.sglang, fixes_requested=self.fix_ids, probes=self.probe_ids,
                         fixes={f: st.to_dict() for f, st in self.fixes.items()},
                         probes_state=dict(self.probes),
                         control=self.control_mode, torch=_torch_build(),
                         platform=_platform(), registry=fixes.all_ids(), **_host_facts()))

    def _on_sglang(self, module: Any, emit: bool) -> None:
        """sglang was imported: evaluate and apply the requested fixes, switch counters on."""
        try:
            with self._lock:
                if self.sglang_seen:
                    return
                self.sglang_seen = True
                target = None
                try:
                    from diag.target import find_importable

                    target = find_importable()
                    self.sglang = target.version if target else None
                    if emit and target is not None:
                        ev.emit(ev.Sglang(version=self.sglang, root=str(target.root)))
                except Exception as e:
                    self.error("locate sglang", e)
                ids = self.fix_ids + [f for f, on in self.desired.items()
                                      if on and f not in self.fix_ids]
                for fid in ids:
                    if self.desired.get(fid, True):
                        self._set_fix(fid, *self._apply(fid, target, emit=emit), emit=emit)
                    else:
                        self._set_fix(fid, "reverted", "reverted by a control request", emit=emit)
                for pid in self.probe_ids:
                    self._start_probe(pid, target, emit=emit)
        except Exception as e:
            self.error("sglang import hook", e)

    # ------------------------------------------------------------------ fixes

    def _set_fix(self, fid: str, state: str, reason: str, emit: bool = True) -> None:
        old = self.fixes.get(fid)
        self.fixes[fid] = _fix_state(state, reason)
        if emit and old != self.fixes[fid]:
            ev.emit(ev.FixEvent(fix=fid, state=state, reason=reason))

    def _apply(self, fid: str, target: Any = None, check: bool = True,
               emit: bool = True) -> tuple[str, str]:
        """Apply one fix through the orchestrator (dependencies first, their states emitted);
        (state, reason). Never raises. `check` is kept for callers: applicability is always
        judged (from the importable SGLang's source, found without importing it)."""
        from diag import fixes
        from diag.fixes import orchestrator

        try:
            fixes.spec(fid)
        except KeyError as e:
            return "refused", str(e.args[0])
        try:
            res = orchestrator.apply([fid], target=target, platform=_platform())
        except Exception as e:
            self.error(f"apply {fid}", e)
            return "failed", f"{type(e).__name__}: {e}"
        for dep, o in res.items():
            if dep != fid:
                self._set_fix(dep, o.state, o.reason, emit=emit)
        o = res[fid]
        if o.state == "failed":
            self._fix_error(f"apply {fid}", o.reason)
        return o.state, o.reason

    def _fix_error(self, where: str, message: str) -> None:
        with contextlib.suppress(Exception):
            log.warning("diag agent: %s failed: %s", where, message)
            ev.emit(ev.Error(where=where, message=message))

    def _fix_state(self, fid: str) -> tuple[str, str]:
        from diag.fixes import orchestrator

        st = orchestrator.state(fid)
        return st.state, st.reason

    def _revert(self, fid: str) -> tuple[bool, str, str]:
        """Revert through the orchestrator (dependants first, their states emitted)."""
        from diag import fixes
        from diag.fixes import orchestrator

        try:
            fixes.spec(fid)
        except KeyError as e:
            return False, "refused", str(e.args[0])
        try:
            res = orchestrator.revert([fid])
        except Exception as e:
            self.error(f"revert {fid}", e)
            return False, "failed", f"{type(e).__name__}: {e}"
        for dep, o in res.items():
            if dep != fid:
                self._set_fix(dep, o.state, o.reason)
        o = res[fid]
        if o.state == "failed":
            self._fix_error(f"revert {fid}", o.reason)
        return o.ok, o.state, o.reason

    def refresh(self) -> None:
        """Pending fixes whose modules got imported since: emit their new state."""
        # Never alongside _on_sglang/safe_point (another thread): they create and apply the fix
        # instances this reads; skip the round instead of waiting.
        if not self._lock.acquire(blocking=False):
            return
        try:
            self._refresh()
        finally:
            self._lock.release()

    def _refresh(self) -> None:
        for fid, st in list(self.fixes.items()):
            if st.state == "pending" and self.sglang_seen:
                with contextlib.suppress(Exception):
                    self._set_fix(fid, *self._fix_state(fid))
        for pid, patch in list(self.probe_patches.items()):
            if self.probes.get(pid, {}).get("state") == "pending":
                self._probe_state(pid, patch)

    # ------------------------------------------------------------------ runtime counters

    def _start_probe(self, pid: str, target: Any = None, emit: bool = True) -> None:
        """Switch on the runtime counter a probe declares (`Counter.patch`, called with the
        running release's target, or None when none was found)."""
        import importlib
        import importlib.util

        def set_state(state: str, reason: str = "") -> None:
            self.probes[pid] = {"state": state, "reason": reason}
            if emit:
                ev.emit(ev.ProbeState(probe=pid, state=state, reason=reason))

        from diag import probes

        try:
            counter = probes.spec(pid).counter
        except KeyError:  # not a registered probe
            counter = None
        except Exception as e:  # its module does not import here
            self.error(f"runtime counter {pid}", e)
            set_state("failed", f"{type(e).__name__}: {e}")
            return
        if counter is None:
            set_state("unavailable", f"no runtime counter for {pid!r} "
                                     f"(known: {', '.join(_counter_ids())})")
            return
        mod_name, _, fn_name = counter.patch.partition(":")
        try:
            if importlib.util.find_spec(mod_name) is None:
                set_state("unavailable", f"{mod_name} is not installed")
                return
            fn = getattr(importlib.import_module(mod_name), fn_name, None)
            if fn is None:
                set_state("unavailable", f"{mod_name} has no {fn_name}()")
                return
            patch = fn(target)
            if patch is None:
                set_state("unavailable", f"{counter.patch} has nothing to count in "
                                         f"SGLang {self.sglang}")
                return
            patch.apply()
            self.probe_patches[pid] = patch
            self.probes[pid] = {"state": None, "reason": ""}
            self._probe_state(pid, patch, emit)
        except Exception as e:
            self.error(f"runtime counter {pid}", e)
            set_state("failed", f"{type(e).__name__}: {e}")

    def _probe_state(self, pid: str, patch: Any, emit: bool = True) -> None:
        errs = list(getattr(patch, "errors", None) or [])
        if errs:
            state, reason = "failed", "; ".join(errs)
        elif getattr(patch, "applied", False):
            state, reason = "on", ""
        else:
            state, reason = "pending", "waiting for the import of the code it counts"
        if self.probes.get(pid) != {"state": state, "reason": reason}:
            self.probes[pid] = {"state": state, "reason": reason}
            if emit:
                ev.emit(ev.ProbeState(probe=pid, state=state, reason=reason))

    # ------------------------------------------------------------------ control

    def _install_batch_hook(self) -> None:
        """Wrap the scheduler's per-batch methods: pending control requests run there."""
        if self.writer is None or self.manual:
            return
        try:
            from diag.patcher import Patch

            spec = os.environ.get(ENV_BATCH_HOOK, DEFAULT_BATCH_HOOK)
            patch = Patch("diag-agent-batch-hook")
            for item in (s.strip() for s in spec.split(",") if s.strip()):
                module, _, qualname = item.partition(":")
                patch.add(module, qualname, self._make_batch_wrapper)
            patch.on_applied.append(self._on_batch_hook)
            patch.apply()
            self.batch_patch = patch
            if patch.applied:
                self._on_batch_hook("")
        except Exception as e:
            self.error("install per-batch hook", e)

    def _on_batch_hook(self, _module: str) -> None:
        if self.control_mode != "batch":
            self.control_mode = "batch"
            ev.emit(ev.Control(mode="batch", engine=self.engine))

    def _mark_engine(self, why: str, rank: str | None = None) -> None:
        if not self.engine or (rank is not None and self.rank is None):
            self.engine = True
            self.rank = rank if rank is not None else self.rank
            ev.emit(ev.Control(mode=self.control_mode, engine=True, reason=why, rank=self.rank))

    def _check_engine_title(self) -> None:
        """Until the title names an SGLang scheduler (and so its ranks; the per-batch hook may
        have marked this an engine process before)."""
        if self.rank is not None or "setproctitle" not in sys.modules:
            return
        title = process_title()
        if title.startswith(ENGINE_TITLES):
            self._mark_engine(f"process title {title.split()[0]!r}", rank_of(title))

    def _make_batch_wrapper(self, original: Any) -> Any:
        owner = self

        def diag_batch_boundary(*args: Any, **kwargs: Any) -> Any:
            # The process's current agent: a forked child replaces the one that patched.
            agent = _agent or owner
            if not agent.engine:
                with contextlib.suppress(Exception):
                    agent._mark_engine("runs the per-batch hook")
            if agent.pending:
                try:
                    agent.safe_point()
                except Exception as e:  # never into the engine; no retry until a new request
                    agent.pending = False
                    failed_before, agent.boundary_failed = agent.boundary_failed, True
                    if not failed_before:  # reported once; periodic work goes back to the thread
                        with contextlib.suppress(Exception):
                            agent.error("per-batch hook", e)
            return original(*args, **kwargs)

        diag_batch_boundary.__wrapped__ = original
        diag_batch_boundary.__name__ = getattr(original, "__name__", "diag_batch_boundary")
        diag_batch_boundary.__qualname__ = getattr(original, "__qualname__",
                                                   diag_batch_boundary.__name__)
        return diag_batch_boundary

    def _at_boundaries(self) -> bool:
        """Whether background work waits for the next batch boundary (an engine process with
        the per-batch hook in)."""
        return self.control_mode == "batch" and self.engine and not self.manual \
            and self.writer is not None and not self.boundary_failed

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            if self._at_boundaries():
                if not self.due:
                    self._due_since = time.monotonic()
                    self.due = True
                    self.pending = True  # the flag the boundary reads
                    continue
                if time.monotonic() - self._due_since < IDLE_S:
                    continue
                self.due = False  # no boundary came (an idle engine): do it here
            self.work("thread")

    def work(self, where: str) -> None:
        """The agent's periodic work: read control requests (unless manual), flush the counters
        that fold in-process (at most every `flush_every` s), and account its own time (`agent_time` events:
        `diag_agent_seconds_total`). One caller at a time; a busy one is skipped."""
        if not self._work_lock.acquire(blocking=False):
            return
        t0 = time.perf_counter()
        try:
            if not self.manual:
                try:
                    self.poll()
                except Exception as e:
                    self.error("control poll", e)
            now = time.monotonic()
            if now - self._last_flush >= self.flush_every:
                self._last_flush = now
                telemetry.flush()  # counters that fold in-process emit what they hold
            self._emit_own_time()
        finally:
            self._own(where, time.perf_counter() - t0)
            self._work_lock.release()

    def _own(self, where: str, seconds: float) -> None:
        acc = self.own_time.get(where)
        if acc is None:
            acc = self.own_time[where] = [0, 0.0]
        acc[0] += 1
        acc[1] += seconds

    def _emit_own_time(self) -> None:
        """The agent's own time since the last such event, at most every `own_every` s."""
        now = time.monotonic()
        if now - self._own_last_emit < self.own_every:
            return
        self._own_last_emit = now
        for where, (runs, sec) in list(self.own_time.items()):
            r0, s0 = self._own_emitted.get(where, (0, 0.0))
            if runs != r0:
                ev.emit(AgentTime(where=where, runs=int(runs - r0), seconds=max(0.0, sec - s0)))
                self._own_emitted[where] = [runs, sec]

    def poll(self) -> None:
        """Read new control requests; apply them here unless this process runs batches."""
        self.refresh()
        self._check_engine_title()
        if self.writer is None or not self._still_ours():
            return
        self.writer.check()
        new = []
        for name, doc, why, quiet in self.reader.new():
            req = self._checked(name, doc, why, quiet)
            if req is not None and req.get("pid") in (None, self.pid):
                new.append(req)
        if new:
            with self._lock:
                self._queue.extend(new)
                self.pending = True
        # The per-batch hook serves an engine process; anything else (the launcher imports the
        # scheduler module but runs no loop) would never reach it: apply here.
        if self.pending and (self.control_mode != "batch" or not self.engine):
            self.safe_point()

    def _checked(self, name: str, doc: Any, why: str | None, quiet: bool) -> dict | None:
        """A valid request, or None: an unreadable or invalid one is rejected with the reason
        (a `control_ack`, ok false, state `rejected`); a non-regular file is skipped. A switch
        of a probe's counter is for the processes that run one: another that is no engine
        process skips it quietly (`diag bench overhead` switches before most windows; each
        answered with a warning, the server's log filled with them)."""
        from diag import fixes

        if why is None:
            known = fixes.all_ids() + [PROBE_PREFIX + p for p in self.probe_patches]
            if "draft-extend-graph" in self.probe_patches:
                known.append(DE_EAGER)
            why = control.problem(doc, name, known, self.run_id)
            if why is None:
                return doc
            fid = doc.get("fix") if isinstance(doc, dict) else None
            if isinstance(fid, str) and fid.startswith((PROBE_PREFIX, MODE_PREFIX)) \
                    and not self.engine and fid not in known and doc.get("pid") in (None, self.pid):
                log.debug("diag agent: %s: no counter of %s in this process", name, fid)
                return None
        elif quiet:
            log.info("diag agent: control entry %s skipped: %s", name, why)
            return None
        if isinstance(doc, dict) and doc.get("pid") not in (None, self.pid) \
                and isinstance(doc.get("pid"), int):
            return None  # someone else's to reject
        log.warning("diag agent: control request %s rejected: %s", name, why)
        d = doc if isinstance(doc, dict) else {}
        ev.emit(ev.ControlAck(request=name, fix=_text(d.get("fix")),
                              action=_text(d.get("action")), ok=False, state=control.REJECTED,
                              reason=why))
        return None

    def safe_point(self) -> None:
        """Apply every queued control request now and acknowledge each; at a batch boundary,
        also the periodic work the poll thread left for it (`due`)."""
        with self._lock:
            self.pending = False
            if self.due:
                self.due = False
                self.work("boundary")
                self.pending = False  # what that poll queued is applied just below
            t0 = time.perf_counter() if self._queue else 0.0
            while self._queue:
                req = self._queue.popleft()
                try:
                    self._handle(req)
                except Exception as e:
                    self.error(f"control request {req.get('id')}", e)
                    ev.emit(ev.ControlAck(request=_text(req.get("id")), fix=_text(req.get("fix")),
                                          action=_text(req.get("action")), ok=False,
                                          state="failed", reason=f"{type(e).__name__}: {e}"))
            if t0:
                self._own("control", time.perf_counter() - t0)

    def _handle(self, req: dict[str, Any]) -> None:
        fid, action = str(req.get("fix")), req.get("action")
        if fid.startswith(PROBE_PREFIX):
            self._switch_probe(fid[len(PROBE_PREFIX):], action == "apply", req)
            return
        if fid == DE_EAGER:
            self._force_eager(action == "apply", req)
            return
        self.desired[fid] = action == "apply"
        if action == "apply":
            from diag.fixes.orchestrator import OK_APPLY

            state, reason = self._apply(fid, check=self.sglang_seen)
            ok = state in OK_APPLY
            if not self.sglang_seen and state == "pending":
                reason = reason or "waiting for the import of the code it patches"
        else:  # revert: requests are validated before they are queued (`_checked`)
            ok, state, reason = self._revert(fid)
        self.fixes[fid] = _fix_state(state, reason)
        ev.emit(ev.ControlAck(request=_text(req.get("id")), fix=fid, action=_text(action), ok=ok,
                              state=state, reason=reason))

    def _force_eager(self, on: bool, req: dict[str, Any]) -> None:
        """Force draft-extend eager, or let its graph run again (`mode:draft-extend-eager`;
        `diag bench eager-cost`). Its passes are counted eager with the reason `forced-eager`
        while it holds, at most `FORCE_HOLD_S` after the last apply (a bench killed mid-way
        leaves no engine eager); the acknowledgement's state is `forced` or `released`."""
        from diag.probes.draft_extend_graph import runtime

        runtime.FORCE.hold(on, runtime.FORCE_HOLD_S)
        state = "forced" if on else "released"
        ev.emit(ev.ControlAck(request=_text(req.get("id")), fix=None,
                              action=_text(req.get("action")), ok=True, state=state,
                              reason=f"draft-extend {'forced eager' if on else 'graph again'} "
                                     "by a control request"))

    def _switch_probe(self, pid: str, on: bool, req: dict[str, Any]) -> None:
        """Switch a probe's runtime counter on or off (a `probe:<id>` request, `apply`/`revert`;
        `diag bench overhead` measures the counters' cost this way, between batches). Its state
        becomes `on`/`off` (a `probe` event); the acknowledgement names no fix."""
        patch = self.probe_patches.get(pid)
        if patch is None:  # `_checked` lets through only the probes with a patch
            ok, state, reason = False, "failed", f"no runtime counter of {pid!r} in this process"
        else:
            (patch.apply if on else patch.revert)()
            ok, state = True, "on" if on else "off"
            reason = f"probe {pid} switched {state} by a control request"
            self.probes[pid] = {"state": state, "reason": reason}
            ev.emit(ev.ProbeState(probe=pid, state=state, reason=reason))
        ev.emit(ev.ControlAck(request=_text(req.get("id")), fix=None,
                              action=_text(req.get("action")), ok=ok, state=state, reason=reason))

    # ------------------------------------------------------------------ errors, fork

    def error(self, where: str, exc: BaseException) -> None:
        try:
            log.warning("diag agent: %s failed: %s: %s", where, type(exc).__name__, exc)
            log.debug("%s", "".join(traceback.format_exception(exc)))
            ev.emit(ev.Error(where=where, message=f"{type(exc).__name__}: {exc}"))
        except Exception:
            pass

    def stop(self) -> None:
        self._stop.set()


def process_title() -> str:
    """The title `ps` shows, read from /proc/self/cmdline (setproctitle writes it over argv);
    "" where there is no /proc. Not `setproctitle.getproctitle()`: its first call in a process
    sets the module up, replacing `environ` with a copy (setproctitle's spt_setup ->
    save_ps_display_args), and its README asks for that early, before code writes the
    environment. SGLang's launcher never calls setproctitle, so this thread's call was the
    first, made while the launcher's main thread sets variables and starts its processes. The
    suspected cause of a launcher that stopped at start in the CPU engine lane (2026-12-03: no
    event from the agent thread after setproctitle's import, no "Engine startup timings");
    not reproduced in isolation."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return ""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace").strip()


def rank_of(title: str) -> str:
    """The ranks in a scheduler's title as SGLang's log prefix shows them: `run_scheduler_process`
    titles it `sglang::scheduler` + the prefix with spaces as `_` (0.5.23
    srt/managers/scheduler.py:6279-6294): "sglang::scheduler_DP0_TP1" -> "DP0 TP1"; "" for one rank."""
    rest = title.split()[0][len(ENGINE_TITLES[0]):] if title.strip() else ""
    return rest.replace("_", " ").strip()


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None if value is None else repr(value)[:80]


def _count_lost(n: int, why: str) -> None:
    """Lost event writes into `diag_events_lost_total` (when metrics record in this process)."""
    from diag.engine import metrics

    metrics.count_lost(n)


def _after_fork() -> None:
    """A forked child inherits the patches but not the thread or the file: start its own."""
    global _agent
    try:
        old = _agent
        if old is None:
            return
        if old.writer is not None:
            telemetry.remove_sink(old.writer)
        a = Agent.__new__(Agent)
        a.__dict__.update(old.__dict__)
        a.pid = os.getpid()
        a._lock = threading.RLock()
        a._stop = threading.Event()
        a._queue = deque()
        a.desired = dict(old.desired)
        a.pending = False
        a.due = False
        a._work_lock = threading.Lock()
        a.own_time, a._own_emitted = {}, {}
        a.writer = None
        a._thread = None
        if old.writer is not None and not old.writer.detached:
            from diag.engine import last_words

            last_words.install(old.writer.run_dir)  # the child's own fatal file
            a.writer = rundir.EventWriter(old.writer.run_dir, run_id=a.run_id)
            a.writer.on_lost = _count_lost
            seen = set(old.reader.seen) if old.reader is not None else set()
            a.reader = control.Reader(old.writer.run_dir)
            a.reader.seen = seen
            telemetry.add_sink(a.writer)
        _agent = a
        a._emit_start()
        if a.writer is not None or a.probe_ids:
            a._thread = threading.Thread(target=a._poll_loop, name="diag-agent-control",
                                         daemon=True)
            a._thread.start()
    except Exception as e:
        log.warning("diag agent: after fork: %s", e)
