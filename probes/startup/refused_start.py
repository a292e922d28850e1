"""Whether SGLang starts at all with a configuration and backend, and its words where it does not.

Why here, below the probes: a server that never starts has no phases to capture and no builder
to sync, so the per-phase verdicts (probes.draft_extend_graph.phases) and the sync census
(probes.metadata_syncs) must agree on it; both read it from this one place. The rules themselves
are in refusals.py and model_rules.py; this module orders them as the start meets them.
"""

from __future__ import annotations

from dataclasses import replace

from diag.context import SpecConfig
from diag.probes import backends
from diag.probes import gate as gate_mod
from diag.probes.startup.auto_steps import auto_steps
from diag.probes.startup.model_rules import REFUSED, Refusal
from diag.probes.startup.refusals import only_starting_topk, refusal
from diag.probes.startup.resolve import (
    IMPLIED_MODEL,
    Model,
    PageSize,
    Where,
    env_of,
    find_line,
    read_model,
    resolve_page_size,
)
from diag.target import Target

# where `--attention-backend` is declared with `choices=ATTENTION_BACKEND_CHOICES`, newest first
CHOICES_FILES = ("srt/arg_groups/fields/exec_.py", "srt/server_args.py")
# where SGLang's argument handling lives: a refusal there comes before any worker is built
ARGUMENT_FILES = ("sglang/srt/server_args.py", "sglang/srt/arg_groups/")


def gate_for(target: Target, cfg: SpecConfig, server_args: dict | None = None
             ) -> gate_mod.GateInfo:
    """The gate of the worker this configuration runs: the switch in its environment, its topk
    and overlap setting as the release weighs them (`gate.select_worker`), or the server's."""
    return gate_mod.read_gate(target, environ=env_of(cfg), server_args=server_args,
                              topk=cfg.speculative_eagle_topk,
                              overlap_off=cfg.disable_overlap_schedule)


def at_start(target: Target, platform: str, cfg: SpecConfig, backend: str, model: Model,
             page: PageSize, gate: gate_mod.GateInfo, notes: list[str] | None = None
             ) -> Refusal | None:
    """What the start does to `backend` under `cfg` before any phase runs, in its order: the
    gate's own argument check, the argument parser's choices, the rules (refusals.refusal:
    `depends` where their inputs are not all given), then the draft worker's factory, which
    raises for a backend it has no entry for. None: nothing refuses it."""
    if gate.start_refused is not None:
        why, line = gate.start_refused
        return REFUSED, why, Where(target.relpath(target.file(gate_mod.SERVER_ARGS_FILE)), line)
    info = backends.backend_map(target, platform, mla=model.mla).get(backend)
    if info is None:  # not a name the release knows: its argument parser refuses it
        w = next((hit for rel in CHOICES_FILES if (hit := find_line(
            target, rel, r"choices=ATTENTION_BACKEND_CHOICES")) is not None), None)
        return REFUSED, (f"sglang {target.version} does not know --attention-backend {backend}: "
                         f"its argument parser refuses it "
                         f"({w or 'ATTENTION_BACKEND_CHOICES'})"), w
    ref = refusal(target, backend, cfg, model, page, info, notes)
    if info.has_draft_factory_entry:
        return ref
    # the draft worker's factory raises while the worker is built: after the argument handling
    # (server_args.py, arg_groups/), so a refusal there comes first
    if ref is not None and ref[0] == REFUSED and ref[2] is not None \
            and ref[2].file.startswith(ARGUMENT_FILES):
        return ref
    w = (find_line(target, gate_mod.DRAFT_UTILS_FILE, r"raise ValueError\(error_template")
         or find_line(target, gate_mod.DRAFT_UTILS_FILE, r"def create_decode_backend"))
    return REFUSED, (f"sglang {target.version} has no draft backend for {backend!r}: EAGLE "
                     f"refuses it at start ({w or gate_mod.DRAFT_UTILS_FILE})"), w


def refused_start(target: Target, platform: str, cfg: SpecConfig, backend: str
                  ) -> tuple[str, Where | None] | None:
    """SGLang's words and line where no server starts with `cfg` and `backend`, else None; read
    as the per-phase verdicts read the configuration (phases.phase_verdicts): the steps SGLang
    picks itself where none were given (its choice, where it starts; else a server given them),
    its refusal of topk or draft tokens without steps, topk 1 where only that starts. A live
    server's configuration (`source == "server"`) started: never refused."""
    if cfg.source == "server":
        return None
    model = read_model(target, cfg.model or IMPLIED_MODEL.get(backend))
    auto = auto_steps(target, cfg, model)
    if auto is not None and auto.chosen is not None:
        steps, topk, tokens = auto.chosen
        if refused_start(target, platform, replace(
                cfg, speculative_num_steps=steps, speculative_eagle_topk=topk,
                speculative_num_draft_tokens=tokens), backend) is None:
            return None  # the server runs SGLang's own choice, which starts
    if only_starting_topk(target, cfg, model) is not None and \
            (auto is None or auto.refused is None):
        cfg = replace(cfg, speculative_eagle_topk=1)
    env = env_of(cfg)
    page = resolve_page_size(target, platform, cfg, model, env, backend,
                             env_given=cfg.environ is not None)
    ref = at_start(target, platform, cfg, backend, model, page, gate_for(target, cfg), [])
    if ref is not None and ref[0] == REFUSED:
        return ref[1], ref[2]
    if auto is not None and auto.refused is not None:
        return auto.words, auto.refused
    return None
