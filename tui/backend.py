"""The one object the app's workers call: probes, fixes, benches, a run directory, a server.

Headless and blocking (workers run it off the UI thread). Tests and `--once` use the same class;
a test that needs fixed data passes its own `probe_runner` / `fixes` (named stand-ins there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diag.bench import BenchResult
from diag.findings import Finding
from diag.tui import bench_child, data
from diag.tui.data import FixView, Header


class Backend:
    def __init__(self, sglang: str | None = None, platform: str | None = None,
                 run_dir: str | None = None, server_url: str | None = None,
                 execute: bool = True, bench_params: dict[str, Any] | None = None,
                 probe_runner: Callable[[Any, str], list[Finding]] | None = None,
                 fixes: dict[str, Any] | None = None, gpu: Callable[[], str] | None = None,
                 server_timeout: float = 2.0, discover: bool = False,
                 config: dict[str, Any] | None = None,
                 bench_runner: Callable[..., BenchResult] | None = None) -> None:
        self.sglang, self.platform = sglang, platform
        self.config = {k: v for k, v in (config or {}).items() if v is not None}
        self.run_dir, self.server_url = run_dir, server_url
        self.execute = execute
        self.bench_params = {"quick": True, "sglang": sglang, **(bench_params or {})}
        self._probe_runner = probe_runner or data.run_probe
        self._fixes = fixes  # id → Fix; None: the registry's process-wide instances
        self._gpu = gpu or data.gpu_text
        self.server_timeout = server_timeout
        self.discover = discover and not run_dir and not server_url
        self.ctx = None
        self.log_lines: list[str] = []
        self._reader = data.RunDirReader(run_dir) if run_dir else None
        self._server = data.ServerReader(server_url, server_timeout) if server_url else None
        self._bench_runner = bench_runner or bench_child.run_in_child
        self.benches = bench_child.Children()  # running bench processes, ended on quit

    def log(self, msg: str) -> None:
        self.log_lines.append(msg)

    # ---------------------------------------------------------------- target

    def start(self) -> Header:
        """Resolve the target (may download a release) and the platform; raises DiagError."""
        self.ctx, head = data.resolve_context(self.sglang, self.platform, self.run_dir,
                                              self.server_url, self.execute, self.log,
                                              self.config)
        if self.ctx.target.version and not self.bench_params.get("sglang"):
            self.bench_params["sglang"] = self.ctx.target.version  # benches run the TUI's target
        return head

    def gpu(self) -> str:
        try:
            return self._gpu()
        except Exception as e:
            return f"n/a ({data.short_error(e)})"

    # ---------------------------------------------------------------- probes

    def probe_ids(self) -> list[str]:
        return data.probe_ids()

    def run_probe(self, probe_id: str) -> list[Finding]:
        return self._probe_runner(self.ctx, probe_id)

    # ---------------------------------------------------------------- fixes

    def fix_ids(self) -> list[str]:
        return list(self._fixes) if self._fixes is not None else data.fix_ids()

    def fix(self, fix_id: str):
        return self._fixes[fix_id] if self._fixes is not None else data.get_fix(fix_id)

    def fix_views(self) -> list[FixView]:
        out = []
        for fid in self.fix_ids():
            try:
                fx = self.fix(fid)
            except Exception as e:
                out.append(FixView(fid, fid, "error", f"cannot load: {data.short_error(e)}"))
                continue
            out.append(data.fix_view(fx, self.ctx))
        return out

    @property
    def engine(self) -> bool:
        """Fix actions go to a live engine through its run directory."""
        return self.run_dir is not None

    def apply(self, fix_id: str) -> str:
        """In this process, through the orchestrator (dependencies first, the same refusals as
        every other caller): the acknowledgement; a fix that is not applicable is refused."""
        if self._fixes is not None:  # a test's own instances, not in the registry
            return data.apply_fix(self.fix(fix_id), self.ctx)
        from diag.errors import FixError
        from diag.fixes import orchestrator

        ctx = self.ctx  # the TUI's target: the patch waits for its import in this process
        why = data.refusal(self.fix(fix_id), ctx) if ctx is not None else None
        if why:
            raise FixError(why)
        res = orchestrator.apply([fix_id], ctx.target if ctx else None,
                                 ctx.platform if ctx else None, ctx.config if ctx else None)
        o = res[fix_id]
        if not o.ok:
            raise FixError(f"{fix_id}: {o.state}: {o.reason}")
        deps = [f"{d} {r.state}" for d, r in res.items() if d != fix_id]
        return f"applied in this process: {data.fix_state(self.fix(fix_id))}" + (
            f" (with {', '.join(deps)})" if deps else "")

    def revert(self, fix_id: str) -> str:
        """In this process, the fixes depending on it first; one not applied is refused."""
        if self._fixes is not None:
            return data.revert_fix(self.fix(fix_id))
        from diag.errors import FixError
        from diag.fixes import orchestrator

        res = orchestrator.revert([fix_id])
        bad = [o for o in res.values() if not o.ok]
        if bad:
            raise FixError("; ".join(o.reason for o in bad))
        others = [d for d in res if d != fix_id]
        return f"reverted in this process: {data.fix_state(self.fix(fix_id))}" + (
            f" (and {', '.join(others)}, which depend on it)" if others else "")

    def request(self, fix_id: str, action: str) -> str:
        """In the engine: the control request's id; refused at once with no live process."""
        return data.request_engine_fix(self.run_dir, fix_id, action)

    def bench(self, fix_id: str, progress: Callable[[str], None]) -> BenchResult:
        """The fix's bench in a child process (its own session), so quitting can end it and
        everything it started."""
        path = getattr(self.fix(fix_id), "bench", None)
        if not path:
            raise data.DiagError(f"{fix_id} has no bench")
        return self._bench_runner(path, self.bench_params, progress, self.benches)

    def stop_benches(self) -> None:
        self.benches.stop_all()

    # ---------------------------------------------------------------- live sources

    def poll_run_dir(self) -> tuple[Any, list[Any]]:
        """(RunState, every typed event so far); raises DiagError for a missing or unsafe
        directory."""
        state, _new = self._reader.poll()
        self._state = state
        return state, list(self._reader.events)

    _state: Any = None

    def live(self) -> Any:
        """The engine's live figures from the last reads (`data.live_figures`); None: none."""
        try:
            fams = self._server.families if self._server else None
            info = self.ctx.cache.get("server_info") if self.ctx is not None else None
            return data.live_figures(self._state, self.server_url, fams, info)
        except Exception:
            return None

    def discover_engines(self) -> list[str]:
        """Live engines' run directories, to name in the header (never attached by itself)."""
        if not self.discover:
            return []
        try:
            return data.discover_run_dirs()
        except Exception:
            return []

    def poll_server(self) -> tuple[dict[str, float], dict[str, dict[str, float]],
                                   dict[str, float]]:
        """(charted series now, diag fix states, syncs per build per builder); histograms and
        counters over the interval since the previous poll."""
        values = self._server.read()
        return values, self._server.fix_states, self._server.builders
