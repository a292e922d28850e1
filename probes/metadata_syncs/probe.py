"""Probe `metadata-syncs`: where the attention metadata builders read the device from the host.

Static census over `sglang/srt/layers/attention/**` (probes.metadata_syncs.census), plus, with
`ctx.execute`, the real DSV4 HIP builder run alone (probes.metadata_syncs.builder_harness) on the draft-extend
and target-extend paths: counted on the GPU when there is one, by the CPU counter otherwise
(both when there is a GPU; a disagreement is reported).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diag.context import Context, SpecConfig
from diag.findings import Finding, Status, location, metric, note, row
from diag.probes.base import Counter, Probe
from diag.target import Target

TIMEOUT_S = 20.0


def audited_paths(steps: int | None) -> tuple[str, ...]:
    """The per-step paths of speculative decoding: the draft's extend after each verify, the
    target's verify, and the draft's decode steps (none with `--speculative-num-steps 1`). The
    target's own extend (prefill) runs once per request, not per step: not audited."""
    return ("draft-extend", "target-verify") + (("decode",) if steps is None or steps > 1
                                                else ())


# The phases of one speculative step, for the configuration under audit: the census mode each
# reads, and whether the target or the draft backend runs it. Draft decode runs steps - 1
# times per step; the target's extend (prefill) runs once per request.
PHASES = (("target-extend", "target-extend", "target"),
          ("draft-extend", "draft-extend", "draft-extend"),
          ("target-verify", "target-verify", "target"), ("draft-decode", "decode", "draft-decode"))


def backend_classes(target: Any, name: str | None, platform: str) -> dict[str, set[str]]:
    """The classes `--attention-backend NAME` builds on the platform, per role, read from the
    release's registry and draft factory (probes.gate.backend_map): on HIP `dsv4` builds the
    HIP radix class only. Falls back to the census's name table when the release says nothing."""
    from diag.probes.gate import backend_map
    from diag.probes.metadata_syncs.census.sites import BACKEND_NAMES

    info = backend_map(target, platform).get(name or "") if name else None
    if info is None or not (info.attention_classes or info.draft_extend_classes):
        known = set(BACKEND_NAMES.get(name or "", set()))
        return {"target": known, "draft-extend": known, "draft-decode": known}
    ext = set(info.draft_extend_classes)
    # a multi-step draft backend runs one per-step backend of the same kind per decode step
    return {"target": set(info.attention_classes), "draft-extend": ext,
            "draft-decode": set(info.decode_classes) | ext}


def _decided(sites: list, classes: set[str], mode: str, cfg: Any, version: str | None,
             platform: str | None, models: dict[str, Any] | None, relay: Any
             ) -> dict[str, Any]:
    """The live (`syncs`, per-step) sites of `classes` on `mode`, each decided for the
    configuration (probes.metadata_syncs.census_config): a site behind a test the configuration
    makes false is left out (`unreachable`, with the reason), one no input decides stays in
    (`depends`, with the condition); `exact` when none is undecided and none the configuration
    leaves reachable cannot be told."""
    from diag.probes.metadata_syncs.census_config import decide

    mine = [s for s in sites if s.backend in classes and mode in s.paths]
    on_path = [s for s in mine if s.verdict == "syncs" and s.path_class == "per-step"]
    decided = [(s, decide(s, cfg, mode, version, platform, models, relay)) for s in on_path]
    live = [s for s, d in decided if d.status != "unreachable"]
    # a call the census cannot tell counts against exactness only where the configuration
    # leaves it reachable (0.5.23 dcp/planner.py:166's host read behind `dcp_size > 1`)
    unsure = [s for s in mine if (s.verdict == "cannot-tell" or s.path_class == "cannot-tell")
              and decide(s, cfg, mode, version, platform, models, relay).status
              != "unreachable"]
    depends = [{"at": f"{s.file}:{s.line}", "syncs": s.syncs, "condition": d.reason}
               for s, d in decided if d.status == "depends"]
    return {"syncs": sum(s.syncs for s in live), "sites": len(live), "cannot_tell": len(unsure),
            "exact": not depends and not unsure, "backends": sorted(classes),
            "source": "static", "at": [f"{s.file}:{s.line}" for s in live],
            "depends": depends,
            "unreachable": [{"at": f"{s.file}:{s.line}", "syncs": s.syncs, "reason": d.reason}
                            for s, d in decided if d.status == "unreachable"]}


def phase_totals(sites: list, roles: dict[str, set[str]], steps: int | None,
                 cfg: Any = None, version: str | None = None, platform: str | None = None,
                 models: dict[str, Any] | None = None, relay: Any = None,
                 unread: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Per phase: syncs per step counted from the per-step sites of the backend that runs it,
    each decided for the configuration `cfg` (`_decided`), so `syncs_per_step` is exact when
    `exact` and an upper bound otherwise. `steps` None is read as the default 3 (SGLang's
    EAGLE). A phase run by a class the census did not read (`unread`: class -> why,
    unread_classes) is never exact: `not_read` names the class and why."""
    from diag.context import SpecConfig

    cfg = cfg if cfg is not None else SpecConfig()
    runs_decode = max((steps if steps is not None else 3) - 1, 0)
    out = []
    for phase, mode, side in PHASES:
        d = _decided(sites, roles[side], mode, cfg, version, platform, models, relay)
        per_run = d.pop("syncs")
        runs = runs_decode if phase == "draft-decode" else 1
        not_read = {c: why for c, why in sorted((unread or {}).items()) if c in roles[side]}
        if not_read:
            d["exact"], d["not_read"] = False, not_read
        out.append({"phase": phase, "syncs_per_step": per_run * runs, "syncs_per_run": per_run,
                    "runs_per_step": runs, **d})
    return out


def forward_totals(sites: list, roles: dict[str, set[str]], cfg: Any = None,
                   version: str | None = None, platform: str | None = None,
                   models: dict[str, Any] | None = None, relay: Any = None,
                   read: set[str] | None = None) -> list[dict[str, Any]]:
    """Per phase: the syncs the attention forward of the backend that runs it does per layer
    (census scope `forward`), each site decided for the configuration as `phase_totals` does.
    A forward's Python runs only on an eager pass (a graph replay runs none), so these count
    once per layer of every eager pass of the phase, on top of its builders' per-step syncs.
    `read`: the census's entry points (`Class.forward_extend`, ...); a class of the phase whose
    own entry is not among them (defined in another module, or not a `forward_*` at all: the
    DeepSeek-V4 HIP radix backend) is `not_read`, and the row is no exact count."""
    from diag.context import SpecConfig
    from diag.probes.metadata_syncs.census.reach import _MULTI_STEP

    cfg = cfg if cfg is not None else SpecConfig()
    out = []
    for phase, mode, side in PHASES:
        d = _decided(sites, roles[side], mode, cfg, version, platform, models, relay)
        entry = "forward_decode" if mode == "decode" else "forward_extend"
        unread = sorted(c for c in roles[side] if not _MULTI_STEP.search(c) and read is not None
                        and not {f"{c}.{entry}", f"{c}.forward"} & read)
        # `forward_phase`, not `phase`: readers of the per-step totals key on `phase`
        out.append({"forward_phase": phase, "scope": "forward",
                    "syncs_per_layer": d.pop("syncs"), **d, "not_read": unread,
                    "exact": d["exact"] and not unread})
    return out


def relay_of(target: Any, platform: str, cfg: Any, name: str, draft: str | None) -> Any:
    """Whether decode-side batches carry `seq_lens_cpu` for the backends under audit
    (probes.startup.host_lengths), for the worker the per-phase verdicts find."""
    from diag.probes.startup.frozen_kv_mtp import frozen_kv_mtp
    from diag.probes.startup.host_lengths import decode_seq_lens_cpu
    from diag.probes.startup.resolve import multi_layer, read_model

    try:
        model = read_model(target, cfg.model)
    except ValueError:
        model = read_model(target, None)
    worker = "frozen" if frozen_kv_mtp(target, cfg)[0] is not False else (
        "multi-layer" if multi_layer(target, cfg, model)[0] is not False else "eagle")
    return decode_seq_lens_cpu(target, platform, cfg, name, draft, model.mla, worker)


def grouped(items: list[dict], key: str, words: str) -> str:
    """"; a.py:118, :119, b.py:7 <words>" per distinct `key` of the sites `items` (their `at`),
    in the order each first appears: a condition shared by many sites is said once."""
    groups: dict[str, list[str]] = {}
    for u in items:
        groups.setdefault(u[key], []).append(u["at"].rsplit("/", 1)[-1])
    out = []
    for text, ats in groups.items():
        shown, last = [], None
        for at in ats:
            file, _, line = at.rpartition(":")
            shown.append(f":{line}" if file == last else at)
            last = file
        out.append(f"; {', '.join(shown)} {words.format(text)}")
    return "".join(out)


@dataclass(frozen=True)
class Configured:
    """What the configuration under audit runs, read from the release alone (no torch, no
    builders' census): the backend, the host-lengths relay, each role's classes, the audited
    paths and the forward census of those classes. Computed by the torch worker while it waits
    for the parent's census (`static_early`), or by `run`."""

    name: str | None
    ran: str | None
    draft_name: str | None
    relay: Any
    roles: dict[str, set[str]]
    paths: tuple[str, ...]
    forward: Any  # census(scope="forward") of the roles' classes, or None


def configured(target: Any, platform: str, cfg: Any) -> Configured:
    from diag.probes.startup.default_backend import audited_backend

    name, ran = audited_backend(target, platform, cfg)
    paths = audited_paths(cfg.speculative_num_steps)
    if not name:
        return Configured(None, ran, None, None, {}, paths, None)
    from diag.probes.metadata_syncs.census.count import census
    from diag.probes.startup.frozen_kv_mtp import frozen_kv_mtp

    draft_name = cfg.draft_attention_backend or name
    relay = relay_of(target, platform, cfg, name, draft_name)
    target_roles = backend_classes(target, name, platform)
    draft_roles = backend_classes(target, draft_name, platform)
    roles = {"target": target_roles["target"], "draft-extend": draft_roles["draft-extend"],
             "draft-decode": draft_roles["draft-decode"]}
    if frozen_kv_mtp(target, cfg)[0]:  # FROZEN_KV_MTP: no draft-extend pass runs
        roles["draft-extend"] = set()
        paths = tuple(p for p in paths if p != "draft-extend")
    classes = frozenset(set().union(*roles.values()))
    forward = census(target, scope="forward", classes=classes) if classes else None
    return Configured(name, ran, draft_name, relay, roles, paths, forward)


def site_status(s: Any) -> str:
    """live | capture-only | once | unreachable | host-mirror | cannot-tell, one word per
    site."""
    if s.verdict == "syncs":
        return "live" if s.path_class == "per-step" else s.path_class
    return s.verdict


def registry_name(backend_class: str) -> str:
    from diag.probes.metadata_syncs.census.sites import BACKEND_NAMES

    names = [n for n, classes in BACKEND_NAMES.items() if backend_class in classes]
    return names[0] if names else backend_class


_CONFIGURED = "metadata-syncs.configured"  # ctx.cache: (key, Configured) from static_early
_NEVER = "metadata-syncs.never-draft-extends"  # ctx.cache: (key, never_draft_extends) from it
_MEASURED = "metadata-syncs.measured"  # ctx.cache: (root, {(path, mode): (m, when)}), early


def _census_key(target) -> str:
    return f"metadata_census:{target.root}"


class MetadataSyncsProbe(Probe):
    id = "metadata-syncs"
    title = "implicit device->host syncs in attention metadata builders"
    concern = "implicit device->host syncs in attention metadata builders"
    fixes = ("repeat-interleave-output-size",)
    counter = Counter("diag.probes.metadata_syncs.sync_counter:runtime_patch", ("syncs",))
    needs_torch = True

    def handover(self, ctx: Context) -> dict[str, Any]:
        from diag.probes.metadata_syncs.census.count import census

        return {_census_key(ctx.target): census(ctx.target)}

    def static_early(self, target: Any, platform: str, config: Any) -> dict[str, Any]:
        from diag.probes.backends import never_draft_extends

        out = {_CONFIGURED: ((str(target.root), platform, config),
                             configured(target, platform, config))}
        if platform in ("hip", "cuda"):  # ~60 ms cold on 0.5.23, after the census otherwise
            out[_NEVER] = ((str(target.root), platform), never_draft_extends(target, (platform,)))
        return out

    def execute_early(self, target: Any, platform: str) -> dict[str, Any]:
        """The real builder's counts (`_measured`'s), while the parent computes the census:
        ~0.1 s of loading and running it that would otherwise follow the census."""
        from diag.probes.metadata_syncs import builder_harness as h

        if not target.file(h.DSV4_FILE).is_file() or h.loaded(target, h.DSV4_FILE,
                                                               h.DSV4_CLASS):
            return {}
        return {_MEASURED: (str(target.root), {(path, mode): _measure(target, path, mode, True)
                                              for path in h.PATHS for mode in _modes()})}

    def _forward(self, ctx: Context, cfg: Any, roles: dict[str, set[str]], models: Any,
                 relay: Any, fc: Any, ev: list) -> None:
        """The attention forward's syncs per layer on an eager pass of each phase, for the
        backends the configuration runs (`forward_totals`)."""
        from diag.probes.metadata_syncs.census.reach import _MULTI_STEP

        if fc is None:
            return
        read = {q for names in fc.builders.values() for q in names}
        for t in forward_totals(fc.sites, roles, cfg, ctx.target.version, ctx.platform,
                                models, relay, read):
            readable = [c for c in t["backends"] if not _MULTI_STEP.search(c)]
            if readable and set(t["not_read"]) == set(readable):  # nothing read: no count
                ev.append(note(f"attention forward, eager {t['forward_phase']} pass: not read "
                               f"({', '.join(t['not_read'])} defines no forward, forward_extend "
                               f"or forward_decode of its own in its module)"))
                continue
            where = "".join(f"; {a.rsplit('/', 1)[-1]}" for a in t["at"])
            if t["not_read"]:
                where += f"; not read: {', '.join(t['not_read'])}"
            ifs = grouped(t["depends"], "condition", "depends on {}")
            ev.append(metric(f"attention-forward syncs per layer, eager {t['forward_phase']} pass "
                             f"(static)", t["syncs_per_layer"], "syncs", 0,
                             f"{'exact' if t['exact'] else 'upper bound'}: {t['sites']} live "
                             f"sites in the forward, run once per layer where the pass runs "
                             f"eager (a graph replay runs no Python){where}; "
                             f"{t['cannot_tell']} the census cannot tell{ifs}", data=t))

    def run(self, ctx: Context) -> Finding:
        from diag.probes.backends import never_draft_extends
        from diag.probes.metadata_syncs.census.count import census
        from diag.probes.metadata_syncs.census.sites import ATTENTION_DIR, DRAFT_EXTEND_BACKENDS
        from diag.probes.metadata_syncs.census_config import decide_modes, release_paths
        from diag.probes.metadata_syncs.model_facts import windows
        from diag.probes.metadata_syncs.unread_classes import unread_classes
        from diag.probes.startup.resolve import damaged_rules
        from diag.probes.startup.start_values import start_values

        target = ctx.target
        if not target.file(ATTENTION_DIR).is_dir():
            return self.finding(Status.SKIP, f"this release has no sglang/{ATTENTION_DIR}")
        key = _census_key(target)
        c = ctx.cache.get(key) or census(target)
        ctx.cache[key] = c
        cfg = ctx.config
        models = windows(target, cfg.model, cfg.draft_model)  # the models' sliding windows
        early = ctx.cache.pop(_CONFIGURED, None)  # the worker's, while it waited for the census
        conf = early[1] if early and early[0] == (str(target.root), ctx.platform, cfg) \
            else configured(target, ctx.platform, cfg)
        name, ran, draft_name, relay = conf.name, conf.ran, conf.draft_name, conf.relay
        refused = _refused_start(target, ctx.platform, cfg, name) if name else None
        # the start-up rules read from a file that does not parse: whether a server starts
        # with this configuration is not known (draft-extend-graph: a target error)
        damaged = damaged_rules(target) if name and refused is None else []
        unknown_start = (f"{damaged[0][0]} {damaged[0][1]}: SGLang's start-up rules cannot be "
                         "read in this tree") if damaged else None
        unread = unread_classes(target, set().union(*conf.roles.values()), c.builders,
                                c.errors) if name and conf.roles else {}
        if name:  # what the server starts with for the facts the configuration leaves out
            cfg = start_values(target, ctx.platform, cfg, name)
        roles, paths = conf.roles, conf.paths
        if name:  # the configuration under audit: the target verifies, the draft extends/decodes
            target_classes = roles["target"]
            draft_classes = roles["draft-extend"] | roles["draft-decode"]
            scope = (f"--attention-backend {name}" if not ran else f"{name} ({ran})") + (
                f" (draft {draft_name})" if draft_name != name else "") + \
                f" path ({', '.join(paths)})"
        else:  # nothing configured: what each backend on the platform's draft-extend path does
            target_classes = draft_classes = DRAFT_EXTEND_BACKENDS.get(ctx.platform, set())
            scope = f"{ctx.platform} draft-extend backends' paths ({', '.join(paths)})"

        def modes_of(backend: str) -> set[str]:
            out = set()
            if backend in target_classes:
                out |= {p for p in paths if p == "target-verify"}
            if backend in draft_classes:
                out |= {p for p in paths if p != "target-verify"}
            return out

        decided: dict[int, dict] = {}

        def decisions(s) -> dict:
            """The site on each audited mode it lies on (else on each of its paths), decided
            for the configuration, the platform and the release's host-mirror facts (a
            configuration fact not given is what the server starts with where the release
            fixes it, probes.startup.start_values; else it decides nothing)."""
            if id(s) not in decided:
                modes = sorted(modes_of(s.backend) & set(s.paths)) or list(s.paths)
                decided[id(s)] = decide_modes(s, cfg, modes, target.version, ctx.platform,
                                              models, relay)
            return decided[id(s)]

        def ruled_out(s) -> bool:
            ds = decisions(s) if s.guards and s.path_class == "per-step" else {}
            return bool(ds) and all(d.status == "unreachable" for d in ds.values())

        def reach(s) -> str:
            modes = modes_of(s.backend)
            r = s.reach(modes) if modes else (
                s.path_class if s.path_class != "per-step" else "not-on-path")
            if r in ("reaches", "not-on-path") and ruled_out(s):
                return "unreachable"  # a test the configuration makes false on every mode
            return r

        def config_reason(s) -> str:
            ds = decisions(s) if s.guards else {}
            return "; ".join(dict.fromkeys(d.reason for d in ds.values() if d.reason))

        # per-step syncs: repeat_interleave first (two syncs each, what the fix addresses)
        order = {"reaches": 0, "cannot-tell": 1, "not-on-path": 2, "capture-only": 3,
                 "once": 3, "unreachable": 4}
        listed = sorted((s for s in c.sites if s.syncs or s.verdict == "cannot-tell"),
                        key=lambda s: (order[reach(s)], s.verdict != "syncs",
                                       s.kind != "repeat_interleave", -s.syncs, s.file, s.line,
                                       s.col))
        syncing = [s for s in c.sites if s.verdict == "syncs"]
        hot = [s for s in syncing if reach(s) == "reaches"]
        unsure_path = [s for s in syncing if reach(s) == "cannot-tell"]
        cold = [s for s in syncing if reach(s) not in ("reaches", "cannot-tell")]
        ev = [metric("sync sites (static, per-step path)", len(syncing), "sites", 0,
                     data={"source": "static", "syncs": sum(s.syncs for s in syncing)}),
              metric(f"sync sites on the {scope}", len(hot), "sites", 0,
                     data={"source": "static", "paths": list(paths),
                           "configured": bool(name), "syncs": sum(s.syncs for s in hot)})]
        if name:  # per phase, for the configuration under audit (docs/probes/metadata-syncs.md)
            for cls, why in unread.items():
                ev.append(note(f"{cls} not read: {why}; the syncs of the phases it runs are "
                               "not known"))
            for t in phase_totals(c.sites, roles, cfg.speculative_num_steps, cfg,
                                  target.version, ctx.platform, models, relay, unread):
                runs = f" ({t['syncs_per_run']} per run x {t['runs_per_step']} runs)" \
                    if t["phase"] == "draft-decode" else ""
                gone = grouped(t["unreachable"], "reason", "unreachable ({})")
                known = (f"not known ({', '.join(t['not_read'])} not read); of what was read,"
                         if t.get("not_read") else "exact" if t["exact"] else "upper bound")
                ifs = grouped(t["depends"], "condition", "depends on {}")
                ev.append(metric(f"syncs per {t['phase']} step (static)",
                                 t["syncs_per_step"], "syncs", 0,
                                 f"{known} for the configuration: {t['sites']} live "
                                 f"sites{runs}; "
                                 f"{t['cannot_tell']} the census cannot tell{gone}{ifs}",
                                 data=t))
            self._forward(ctx, cfg, roles, models, relay, conf.forward, ev)
        disagreements = self._measured(ctx, c, ev) if ctx.execute else []
        ev.append(metric("builders scanned", sum(len(v) for v in c.builders.values()),
                         "functions"))
        never_early = ctx.cache.pop(_NEVER, None)
        if never_early and never_early[0] == (str(target.root), ctx.platform):
            never = never_early[1]
        else:
            never = never_draft_extends(target, (ctx.platform,)) if ctx.platform in (
                "hip", "cuda") else {}
        for s in listed:  # every site, on the path or not: none is dropped
            r = reach(s)
            why_cfg = config_reason(s)
            where = {"reaches": "on the path under audit", "not-on-path": "not on it",
                     "capture-only": "only under graph capture", "unreachable": "cannot run",
                     "once": "once per process (a cache fill)",
                     "cannot-tell": "path cannot tell"}[r]
            if why_cfg and r == "unreachable" and s.path_class == "per-step":
                where = f"unreachable ({why_cfg})"
            elif why_cfg and r == "reaches":
                where += f"; {why_cfg}"
            on = release_paths(s, target.version, never)  # less what the release rules out
            paths_txt = ", ".join(on) if on else "no per-step path"
            ev.append(location(
                s.file, s.line, s.function,
                f"{s.kind}: {s.why} ({s.syncs} sync{'s' if s.syncs != 1 else ''} when it runs;"
                f" {paths_txt}; {where}) `{s.call}`",
                data={"builder": s.function, "backend": registry_name(s.backend),
                      "call": s.kind, "syncs": s.syncs, "paths": list(on),
                      "call_paths": list(s.paths), "reach": r,
                      "status": "unreachable" if r == "unreachable" else site_status(s),
                      "syncs_per_execution": s.syncs, "why": s.why,
                      "callers": list(s.callers), "source": "static",
                      "guards": [{"condition": g[4], "at": g[3], "fact": g[0]}
                                 for g in s.guards],
                      "modes": {m: d.as_dict() for m, d in decisions(s).items()}}))
        unsure = [s for s in c.sites if s.verdict == "cannot-tell"]
        ev.append(note(f"{len(unsure)} calls the census cannot classify (device or host "
                       f"unknown), {sum(s.verdict == 'host-mirror' for s in c.sites)} read host "
                       f"mirrors, {sum(s.verdict == 'capture-only' for s in c.sites)} run only "
                       f"under graph capture, {sum(s.verdict == 'once' for s in c.sites)} only "
                       f"once (a cache fill), "
                       f"{sum(s.verdict == 'unreachable' for s in c.sites)}"
                       f" sit in branches that cannot run"))
        for backend, counts in sorted(c.by_backend().items()):
            ev.append(row(backend=backend, on_path="yes" if modes_of(backend) else "no",
                          syncs=counts["syncs"], sync_count=counts["sync_count"],
                          host_mirror=counts["host-mirror"], capture_only=counts["capture-only"],
                          once=counts["once"],
                          unreachable=counts["unreachable"],
                          cannot_tell=counts["cannot-tell"]))
        if name and not target_classes:
            ev.append(note(f"--attention-backend {name}: the census does not know which "
                           f"backend classes serve it; no site is counted for it"))
        for err in c.errors:
            ev.append(note(f"not scanned: {err}"))

        # fail only for a sync on the configured path that no configuration fact left out of
        # the audit can rule out (a data condition is taken both ways, as ever); nothing
        # configured: at most warn
        proven = [s for s in hot if not s.guards or any(
            d.status == "live" or (d.status == "depends" and not d.on_config)
            for d in decisions(s).values())]
        if refused is not None:  # no server runs it: what its classes would do, had it started
            ev.append(note(f"{refused}: no server starts with this configuration; the counts "
                           f"are what the {name} classes would do had it started"))
        if unknown_start is not None:
            ev.append(note(f"{unknown_start}, so whether a server starts with this "
                           f"configuration is not known; the counts are what the {name} "
                           "classes would do if it does"))
        if proven and name and refused is None and unknown_start is None:
            status = Status.FAIL
        elif hot or unsure_path or cold or disagreements or unread:
            status = Status.WARN
        else:
            status = Status.OK
        named = []
        for s in hot + unsure_path + [s for s in cold if s.kind == "repeat_interleave"] + cold:
            label = f"{s.function} ({s.kind})"
            if label not in named:
                named.append(label)
        total = sum(s.syncs for s in syncing)
        others = len(syncing) - len(hot) - len(unsure_path)  # the parts add up to the whole
        summary = (f"{len(syncing)} sync sites ({total} syncs if each runs once) in metadata "
                   f"builders: {len(hot)} on the {scope}")
        if hot and not name:
            backends = sorted({registry_name(s.backend) for s in hot})
            modes = sorted({p for s in hot for p in s.paths if p in paths})
            summary += (f" (would sync with --attention-backend {'/'.join(backends)} on "
                        f"{', '.join(modes)}; pass --attention-backend or --server to audit one)")
        summary += f", {others} on other paths" + (
            f", {len(unsure_path)} on a path it cannot tell" if unsure_path else "")
        if named:
            summary += ": " + ", ".join(named[:6]) + (" ..." if len(named) > 6 else "")
        if refused is not None:
            summary += " (SGLang refuses this configuration at start: see the notes)"
        if unknown_start is not None:
            summary += (" (whether SGLang starts with this configuration is not known: see the "
                        "notes)")
        if unread:
            summary += (f"; not read: {', '.join(unread)} (its syncs are not known: see the "
                        "notes)")
        hint = None
        if syncing:
            hint = ("run `diag fix list` for `repeat-interleave-output-size`; other sites need "
                    "a host-side count in SGLang (docs/fixes/repeat-interleave-output-size.md)")
        # a configured class not read: diag cannot tell its syncs (exit 3 unless
        # --allow-unrecognised, as an unreadable gate: a CI gate never passes on it)
        return self.finding(status, summary, evidence=ev, hint=hint, unrecognised=bool(unread))

    def _measured(self, ctx: Context, c, ev: list) -> list[str]:
        """Run the real DSV4 HIP builder alone; append its counts; return disagreements."""
        from diag.probes.metadata_syncs import builder_harness as h

        if not ctx.target.file(h.DSV4_FILE).is_file():
            ev.append(note(f"not executed: {h.DSV4_FILE.rsplit('/', 1)[-1]} is not in this "
                           f"release"))
            return []
        static = [s for s in c.sites if s.function == f"{h.DSV4_CLASS}.{h.ATTACH}"]
        modes = _modes()
        out: list[str] = []
        reused: list[str] = []
        reused_at: set[str] = set()
        # loaded before this probe: a fix may have patched it, so measure it live; unless the
        # worker measured it before anything ran (`execute_early`)
        early = ctx.cache.pop(_MEASURED, None)
        early = early[1] if early and early[0] == str(ctx.target.root) else {}
        fresh = not h.loaded(ctx.target, h.DSV4_FILE, h.DSV4_CLASS)
        for path in h.PATHS:
            got = {}
            for mode in modes:
                m, when = early.get((path, mode)) or _measure(ctx.target, path, mode, fresh)
                if when:
                    reused.append(f"{path} ({mode})")
                    reused_at.add(when)
                if not m.executed:
                    ev.append(note(f"{h.ATTACH} ({path}, {mode}) not executed: {m.error}"))
                    continue
                got[mode] = m.syncs
                ev.append(metric(f"measured syncs per call: {h.ATTACH} ({path})", m.syncs,
                                 "syncs", 0, f"{mode}, real code of sglang {ctx.target.version}"
                                 f", batch 64" + (f"; at {', '.join(sorted(set(m.sites)))}"
                                                  if m.sites else ""),
                                 data=_measured_data(ctx, m, static)))
            if len(set(got.values())) > 1:
                out.append(f"{path}: gpu {got.get('gpu')} != cpu {got.get('cpu')}")
                ev.append(note(f"disagreement on {path}: GPU counted {got.get('gpu')}, the CPU "
                               f"counter {got.get('cpu')}"))
            if got and max(got.values()) > 0 and not any(
                    s.verdict in ("syncs", "cannot-tell") for s in static):
                out.append(f"{path}: measured syncs the census did not find")
                ev.append(note(f"disagreement on {path}: measured {max(got.values())} syncs, "
                               f"the census found no sync site in {h.ATTACH}"))
        if reused:
            ev.append(note(f"measured counts of {', '.join(reused)} reused from the diag cache "
                           f"(measured {', '.join(sorted(reused_at))} on this machine with the "
                           f"same torch, builder source and diag code); DIAG_NO_CACHE=1 "
                           f"measures again"))
        return out


def _modes() -> list[str]:
    """Where the builder is counted: on the GPU (and by the CPU counter) when there is one."""
    from diag.gpu_platform import gpu_possible
    from diag.probes.metadata_syncs.sync_counter import gpu_available

    return ["gpu", "cpu"] if gpu_possible() and gpu_available() else ["cpu"]


def _measure(target: Any, path: str, mode: str, fresh: bool) -> tuple[Any, str | None]:
    """`builder_harness.measure`, its CPU counts reused from the disk cache (diag.cache).

    A CPU count is a function of the builder's source, the harness and counter code, the
    inputs (fixed seed) and the local torch: all in the key. Measured afresh when the builder
    was already loaded in this process before the probe (`fresh` False: a fix may have patched
    it) and always on the GPU.
    """
    from dataclasses import asdict

    from diag import cache
    from diag.probes.metadata_syncs import builder_harness as h

    digest = None
    if mode == "cpu" and fresh:
        try:
            import diag.probes.metadata_syncs.sync_counter  # noqa: F401  (its source is part of the key)

            digest = cache.files_key([target.file(h.DSV4_FILE)], path, mode, TIMEOUT_S,
                                     cache.torch_fingerprint(), cache.code_fingerprint(
                                         "diag.probes.metadata_syncs.builder_harness", "diag.probes.metadata_syncs.sync_counter"))
        except Exception:  # no torch, unreadable file: measure (and report) as before
            digest = None
    if digest is not None:
        hit = cache.load("builder_syncs", digest)
        if hit is not None:
            try:
                m = h.Measurement(**hit["value"])
            except TypeError:
                m = None
            if m is not None and m.executed:
                return m, str(hit.get("stored_at") or "earlier")
    m = h.measure(target, path, mode, timeout=TIMEOUT_S)
    if digest is not None and m.executed:
        cache.store("builder_syncs", digest, asdict(m))
    return m, None


def _measured_data(ctx: Context, m: Any, static: list) -> dict[str, Any]:
    """The fields of one measured count: where the first sync was seen (else the builder's
    first static site), how, on which path."""
    from diag.probes.metadata_syncs import builder_harness as h

    file, line = ctx.target.relpath(ctx.target.file(h.DSV4_FILE)), None
    if m.sites:
        where = sorted(m.sites)[0].split(" ", 1)[0]
        f, _, ln = where.rpartition(":")
        if ln.isdigit():
            file, line = f, int(ln)
    if line is None and static:
        line = min(s.line for s in static)
    return {"builder": f"{h.DSV4_CLASS}.{h.ATTACH}", "file": file, "line": line,
            "syncs": m.syncs, "path": m.path,
            "source": "gpu-sync-debug" if m.mode == "gpu" else "cpu-counter",
            "release": ctx.target.version}


def _refused_start(target: Target, platform: str, cfg: SpecConfig, backend: str) -> str | None:
    """SGLang's words and line where no server starts with the configuration under audit
    (probes.startup.refused_start, the reading the per-phase verdicts make); None where one
    starts, or for a live server's (it started). Why: a FAIL for syncs of a server that never
    starts would send users after the wrong problem (the draft-extend-graph finding names the
    refusal; the fixes are refused for it)."""
    from diag.probes.startup.refused_start import refused_start

    found = refused_start(target, platform, cfg, backend)
    if found is None:
        return None
    why, where = found
    return why if where is None or str(where) in why else f"{why} ({where})"
