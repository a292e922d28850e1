"""Probe `draft-extend-graph`: does speculative decoding's draft-extend run as a graph or eager?

Static part: the release's gate (probes.gate) evaluated for every attention backend on the
platform, and for the configuration under audit when there is one. Live part (`--server`):
what the server itself says it captured at startup (`/server_info`, `/metrics`).
"""

from __future__ import annotations

import os

from diag.context import Context, SpecConfig
from diag.errors import ServerError
from diag.findings import Evidence, Finding, Status, location, metric, note, row
from diag.probes.backends import BackendInfo, backend_map, read_problems
from diag.probes.base import Counter, Probe
from diag.probes.draft_extend_graph.phases import (
    DEPENDS,
    HIP_BACKENDS,
    IMPLIED_MODEL,
    NO_PASS,
    REFUSED,
    PhaseVerdict,
    audited_verdicts,
    default_hint,
    env_of,
    gate_for,
    read_model,
)
from diag.probes.draft_extend_graph.phases import multi_layer as phases_multi_layer
from diag.probes.gate import (
    DRAFT_UTILS_FILE,
    EAGER,
    GRAPH,
    UNSUPPORTED,
    GateInfo,
    Verdict,
    env_bool,
    parse_problem,
    verdict,
)
from diag.probes.startup.auto_steps import auto_steps
from diag.probes.startup.resolve import damaged_rules, skipped_sources
from diag.target import Target

FIX_ID = "draft-extend-allowlist"
METRIC = "sglang:startup_cuda_graph_time_seconds"


def kill_switch_set(gate: GateInfo, environ: dict[str, str] | None = None) -> bool:
    """The release's kill switch, as SGLang's EnvBool reads it, in this process's environment."""
    env = os.environ if environ is None else environ
    return bool(gate.kill_switch_env) and env_bool(env.get(gate.kill_switch_env))


def _hint(v: Verdict, platform: str, gate: GateInfo, name: str) -> str | None:
    cause = getattr(v, "cause", "")
    if cause == "not_allowlisted":
        return (f"{FIX_ID} adds {name}'s draft-extend backend to the {platform.upper()} gate "
                f"(`diag fix list` says whether it applies to this release)")
    if cause == "num_steps":
        return "run with --speculative-num-steps >= 2, or apply " + FIX_ID
    if cause == "kill_switch":
        return f"unset {gate.kill_switch_env} in the server's environment"
    if cause == "graphs_disabled":
        return "drop --disable-cuda-graph"
    if cause == "unsupported":
        return "check --attention-backend against this release's backends (table above)"
    if cause == "no_draft_extend_backend":
        return "pick an attention backend for which this release builds a draft-extend backend"
    return None


class DraftExtendGraphProbe(Probe):
    id = "draft-extend-graph"
    title = "Draft-extend graph capture"
    concern = "draft-extend falls back to eager (graph-capture gate)"
    fixes = (FIX_ID,)
    counter = Counter("diag.probes.draft_extend_graph.runtime:runtime_patch",
                      ("draft_extend", "graph_phase"))
    runs_early = True  # the static verdict: the target, platform and configuration only

    def run(self, ctx: Context) -> list[Finding]:
        out = [self._static(ctx)]
        if ctx.server_url:
            out.append(self._live(ctx))
        return out

    # ------------------------------------------------------------------ static

    def _static(self, ctx: Context) -> Finding:
        f = self._verdict(ctx)
        damaged = damaged_rules(ctx.target)  # read while the verdict was made
        if damaged and not f.target_error:
            file, why, line = damaged[0]
            return self._broken(
                f"{file} {why}", file, line,
                f"SGLang's argument handling in this tree: {why}; the start-up rules diag looked "
                "for in it cannot be read, so no verdict is given",
                [note(f"also {f2} {w2}") for f2, w2, _ in damaged[1:]])
        # source files the backend map or the other readers skipped (they do not parse): said,
        # never silently left out
        skipped = read_problems(ctx.target, ctx.platform)
        skipped += [line for line in skipped_sources(ctx.target)
                    if line.split(":", 1)[0] not in {x.split(":", 1)[0] for x in skipped}]
        f.evidence += [note(x) for x in skipped]
        return f

    def _verdict(self, ctx: Context) -> Finding:
        t, plat, cfg = ctx.target, ctx.platform, ctx.config
        info = ctx.cache.get("server_info")
        gate = gate_for(t, cfg, _srv().server_args(info) if isinstance(info, dict) else None)
        if gate.broken:
            return self._broken(gate.problem, gate.file, gate.line,
                                f"the {gate.worker} EAGLE worker of this tree: {gate.broken}",
                                [note(f"worker selected by {gate.selection}")]
                                if gate.selection else [])
        # (a missing draft_utils.py is not broken: older trees keep the factory elsewhere)
        factory = parse_problem(t.file(DRAFT_UTILS_FILE))
        if factory is not None and factory[0] != "missing":
            rel = t.relpath(t.file(DRAFT_UTILS_FILE))
            what, line = factory
            return self._broken(f"{rel} {'is ' + what if what in ('missing', 'empty') else what}",
                                rel, line, f"the draft backend factory of this tree: {what}", [])
        if not gate.recognised and (damaged := read_problems(t, plat) + skipped_sources(t)):
            # a source the gate's reading needed does not parse: the tree is damaged, not a
            # new shape of the gate (nothing to report upstream)
            file, why = damaged[0].removeprefix("skipped ").split(": ", 1)
            return self._broken(f"{file} {why}", file, None,
                                f"the gate cannot be read without it: {gate.problem}",
                                [note(x) for x in damaged[1:]])
        if not gate.recognised:
            return self.finding(
                Status.WARN, f"gate not recognised in {gate.file}: {gate.problem}",
                evidence=[location(gate.file or "?", gate.line, gate.method,
                                   "where the gate was looked for"),
                          note(f"expected: {gate.expected}")],
                hint="this release changed the gate's shape: report it with the file above",
                fixes=[], unrecognised=True)
        bm = backend_map(t, plat)
        killed = kill_switch_set(gate, env_of(cfg))
        multi = bool(_multi_layer(t, cfg))
        line = gate.cuda_line if plat == "cuda" and gate.cuda_line else gate.line
        ev: list[Evidence] = [location(gate.file, line, f"{gate.worker_class}.{gate.method}",
                                       _gate_detail(gate, plat))]
        if gate.selection:
            ev.append(note(f"worker selected by {gate.selection}"))
        if killed:
            ev.append(note(f"{gate.kill_switch_env} is set in this environment"))
        rows, eager = self._table(gate, bm, plat, cfg.speculative_num_steps, killed,
                                  cfg.disable_cuda_graph, multi, t.version)
        ev += rows
        # the backend SGLang runs: as given, forced by the model, or SGLang's default
        audit = audited_verdicts(t, plat, cfg, gate)
        if audit is not None:
            name = audit.first
            steps = cfg.speculative_num_steps
            auto = auto_steps(t, cfg, read_model(t, cfg.model or IMPLIED_MODEL.get(name))) \
                if steps is None else None  # not given: the steps SGLang picks, if it does
            v = verdict(gate, bm.get(name), plat,
                        auto.chosen[0] if auto is not None and auto.chosen else steps, killed,
                        cfg.disable_cuda_graph, multi, t.version)
            how = {"forced": f" (forced by the model; {audit.why})",
                   "model default": f" ({audit.why})", "default": f" ({audit.why})"
                   }.get(audit.how, "")
            what = (f"{audit.backend}{how} on {plat.upper()}"
                    + (f", --speculative-num-steps {steps}" if steps is not None else "")
                    + (f", --speculative-eagle-topk {cfg.speculative_eagle_topk}"
                       if cfg.speculative_eagle_topk is not None else "")
                    + (f", model {cfg.model}" if cfg.model else "")
                    + (f" ({cfg.source})" if cfg.source != "options" else ""))
            pvs = audit.verdicts
            de = next(pv for pv in pvs if pv.phase == "draft-extend")
            ev[1:1] = [phase_row(pv, _cls(bm.get(pv.backend)) if pv.phase == "draft-extend"
                                 and pv.backend in bm else None) for pv in pvs]
            if de.mode == REFUSED:
                return self.finding(Status.FAIL, f"{what}: SGLang refuses to start with this "
                                                 f"configuration ({de.reason})", evidence=ev,
                                    hint="change the configuration named in the reason", fixes=[])
            if de.mode == NO_PASS:
                return self.finding(Status.OK, f"{what}: no draft-extend pass runs, eager or "
                                               f"graph ({de.reason})", evidence=ev)
            if de.mode == DEPENDS:
                return self.finding(Status.WARN, f"{what}: draft-extend depends on what no input "
                                                 f"decides ({de.reason})", evidence=ev,
                                    hint=_hint(v, plat, gate, name))
            from diag.probes.startup.frozen_kv_mtp import frozen_kv_mtp

            if de.mode in (GRAPH, EAGER) and (de.mode != v.mode or frozen_kv_mtp(t, cfg)[0]):
                # not the gate's to decide (the v1 FROZEN_KV_MTP worker's seed forward): the
                # phase verdict says why
                if de.mode == GRAPH:
                    return self.finding(Status.OK, f"{what}: draft-extend is captured as a "
                                                   f"graph ({de.reason})", evidence=ev)
                return self.finding(Status.FAIL, f"{what}: draft-extend runs eager, one launch "
                                                 f"per kernel ({de.reason})", evidence=ev,
                                    hint="no HIP allow-list decides this pass: `diag fix check` "
                                         "says that no diag fix captures it")
            if v.mode == GRAPH:
                return self.finding(Status.OK, f"{what}: draft-extend is captured as a graph "
                                               f"({v.reason})", evidence=ev)
            if v.mode == EAGER:
                return self.finding(Status.FAIL, f"{what}: draft-extend runs eager, one launch "
                                                 f"per kernel ({v.reason})", evidence=ev,
                                    hint=_hint(v, plat, gate, name))
            return self.finding(Status.WARN, f"{what}: {v.reason}", evidence=ev,
                                hint=_hint(v, plat, gate, name))
        steps_bound = [e.data["backend"] for e in rows
                       if e.kind == "row" and "needs --speculative-num-steps" in (e.detail or "")]
        if eager:
            also = (f"; {', '.join(steps_bound)} only with --speculative-num-steps >= 2"
                    if steps_bound else "")
            return self.finding(
                Status.WARN, f"on {plat.upper()} draft-extend runs eager for "
                             f"{', '.join(eager)}{also} ({_ask_for_backend(ctx)})",
                evidence=ev, hint=f"{FIX_ID} adds the missing backends to the {plat.upper()} "
                                  "gate where a release admits them")
        return self.finding(Status.OK, f"on {plat.upper()} every listed backend's draft-extend "
                                       "is captured as a graph", evidence=ev)

    def _broken(self, problem: str, file: str | None, line: int | None, detail: str,
                extra: list[Evidence]) -> Finding:
        """A tree whose source cannot be read: a target error (exit 3), not a gate shape."""
        return self.finding(
            Status.ERROR, f"target error: {problem}",
            evidence=[location(file or "?", line, None, detail), *extra],
            hint="the SGLang tree is incomplete or edited: reinstall it or pass a release "
                 "(--sglang VERSION)", fixes=[], target_error=True)

    def _table(self, gate: GateInfo, bm: dict[str, BackendInfo], plat: str,
               steps: int | None, killed: bool, disabled: bool, multi: bool,
               release: str | None) -> tuple[list[Evidence], list[str]]:
        names = [n for n in HIP_BACKENDS if n in bm] if plat == "hip" else \
            [n for n, b in bm.items() if b.has_draft_factory_entry]
        rows, eager = [], []
        for n in names:
            v = verdict(gate, bm[n], plat, steps, killed, disabled, multi, release)
            rows.append(row(v.reason, backend=n, draft_extend=_cls(bm[n]), mode=v.mode))
            if v.mode == EAGER:
                eager.append(n)
        return rows, eager

    # ------------------------------------------------------------------ live

    def _live(self, ctx: Context) -> Finding:
        title = "live server: draft-extend capture"
        err = ctx.cache.get("server_error")
        info = ctx.cache.get("server_info")
        if info is None and err is None:  # not attached by the CLI (API use): read it here
            try:
                info = ctx.cache["server_info"] = _srv().get_server_info(ctx.server_url)
            except ServerError as e:
                err = str(e)
        ev: list[Evidence] = []
        if err:
            return self._live_finding(Status.WARN, f"{title}: server evidence unavailable: {err}",
                                      ev, hint=f"{ctx.server_url} did not give its server "
                                               "info: check that it is SGLang's HTTP server and "
                                               "has finished starting")
        ranks = _srv().draft_extend_startup(info)
        version = info.get("version")
        if version and ctx.target.version and str(version) != ctx.target.version:
            ev.append(note(f"the server runs sglang {version}; the static audit read "
                           f"{ctx.target.version} (pass --sglang {version} to match)"))
        args = _srv().server_args(info)
        if not args.get("speculative_algorithm"):
            return self._live_finding(Status.SKIP, f"{title}: the server does not run "
                                                   "speculative decoding", ev)
        for r in ranks:
            if r.capture_s is not None:
                ev.append(metric(f"rank {r.rank} draft_extend capture time", r.capture_s, "s",
                                 detail="/server_info internal_states[].startup_time.cuda_graph"))
            if r.graph_mem_gb is not None:
                ev.append(metric(f"rank {r.rank} draft_extend graph memory", r.graph_mem_gb,
                                 "GB"))
            if r.accept_length is not None:
                ev.append(metric(f"rank {r.rank} avg accept length", r.accept_length, "tokens"))
        times = [r.capture_s for r in ranks if r.capture_s is not None]
        mtimes, merr = self._metric_times(ctx)
        if merr:
            ev.append(note(merr))
        for labels, value in mtimes:
            ev.append(metric(f'{METRIC}{{phase="draft_extend"}}', value, "s",
                             detail=", ".join(f"{k}={v}" for k, v in labels.items()
                                              if k != "phase") or None))
        values = times or [v for _, v in mtimes]
        if not values:
            return self._live_finding(
                Status.WARN, f"{title}: the server reports no draft-extend capture time "
                             "(SGLang >= 0.5.17 reports it in /server_info)", ev)
        if all(v == 0.0 for v in values):
            return self._live_finding(
                Status.FAIL, f"{title}: not captured (draft_extend = 0.0 s): every draft-extend "
                             "runs eager", ev,
                hint=f"{FIX_ID} lets the gate capture it (the static {self.id} finding of "
                     "this run gives the gate's reason)")
        if any(v == 0.0 for v in values):
            return self._live_finding(Status.WARN, f"{title}: captured on some ranks only", ev)
        return self._live_finding(Status.OK, f"{title}: captured at startup "
                                             f"({max(values):.2f} s)", ev)

    def _metric_times(self, ctx: Context) -> tuple[list[tuple[dict, float]], str | None]:
        try:
            fams = _srv().get_metrics(ctx.server_url)
        except ServerError as e:
            return [], f"/metrics: {e}"
        return _srv().samples(fams, METRIC, phase="draft_extend"), None

    def _live_finding(self, status: Status, summary: str, ev: list[Evidence],
                      hint: str | None = None) -> Finding:
        return self.finding(status, summary, evidence=ev, hint=hint)


def _srv():
    """`diag.server`, imported where a live server is read: its HTTP stack (~30 ms) would
    otherwise load in every `diagnose`, before the torch worker starts."""
    from diag import server

    return server


def _ask_for_backend(ctx: Context) -> str:
    """What to pass for a verdict; never `--server` when one was given (say what it lacked)."""
    if not ctx.server_url:
        return ("no attention backend given: " + default_hint(ctx.target, ctx.platform)
                + ", --attention-backend or --server for a verdict")
    err = ctx.cache.get("server_error")
    if err:
        return f"the server's arguments could not be read ({err}): pass --attention-backend " \
               "for a verdict"
    return "the server's arguments name no attention backend: pass --attention-backend for a " \
           "verdict"


def _multi_layer(t: Target, cfg: SpecConfig) -> bool | None:
    """The multi-layer EAGLE worker, as the per-phase verdicts decide it (a server's
    `enable_multi_layer_eagle`, or the model's switch); None: the algorithm decides."""
    try:
        model = read_model(t, cfg.model)
    except ValueError:
        model = read_model(t, None)
    return phases_multi_layer(t, cfg, model)[0]


def phase_row(pv: PhaseVerdict, draft_extend: str | None = None) -> Evidence:
    """One phase of the configuration under audit, as an evidence row (every surface reads it)."""
    data = {"phase": pv.phase, "backend": pv.backend, "mode": pv.mode, "config": pv.config}
    if draft_extend is not None:
        data["draft_extend"] = draft_extend
    if pv.where is not None:
        data["file"], data["line"] = pv.where.file, pv.where.line
    data["runtime_fallbacks"] = [f.to_dict() for f in pv.runtime_fallbacks]
    data["decided_by"] = pv.decided_by
    return row(pv.reason, **data)


def _cls(info: BackendInfo | None) -> str:
    if info is None:
        return "(unknown to the release)"
    if info.draft_extend_none:
        return "None (the factory builds none)"
    return info.draft_extend_class or ("(no draft backend)" if not info.has_draft_factory_entry
                                       else "(class not found)")


def _gate_detail(gate: GateInfo, plat: str) -> str:
    if gate.hip_policy == "capability":  # PR #36324: the backend class answers, any platform
        return (f"{plat.upper()} gate: self.{gate.capability_attr}.{gate.capability_method}()"
                + (f"; kill switch {gate.kill_switch_env}" if gate.kill_switch_env else ""))
    if plat == "hip":
        if gate.hip_policy == "allowlist":
            rule = f"{gate.variable} = " + " or ".join(c.text() for c in gate.hip_checks)
        elif gate.hip_policy == "any":
            rule = "captures on every non-NPU device"
        else:
            rule = "no HIP capture branch"
    else:
        rule = ("allow-list " + ", ".join(gate.cuda_classes)) if gate.cuda_policy == "allowlist" \
            else gate.cuda_policy
    extra = f"; kill switch {gate.kill_switch_env}" if gate.kill_switch_env else ""
    return f"{plat.upper()} gate: {rule}{extra}"


__all__ = ["DraftExtendGraphProbe", "kill_switch_set", "UNSUPPORTED"]
