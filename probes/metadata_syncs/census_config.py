"""The census's guards evaluated for the configuration under audit.

Why: the census (probes.metadata_syncs.census) reads the source without a configuration, so a site
behind `if self.dcp_size > 1:` is counted as if decode-context parallelism were on; summed, that
is an upper bound the runtime counter never meets (on the GPU lane: 0 measured where the census
said 1 and 2). Each site keeps the configuration and host-mirror tests on every path to it
(`Site.guards`); here each one is decided from the `SpecConfig` (and, for a host mirror, from
what the release's callers are read to set), so a site is `live`, `unreachable` (with the
reason, `config: dcp_size=1`) or `depends` (no input decides it: it stays in the bound, with its
condition).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from diag.context import SpecConfig
from diag.probes.metadata_syncs.census.flags import VIA
from diag.probes.metadata_syncs.census.guards import RAGGED_FACT
from diag.probes.startup.host_lengths import DECODE_SIDE

_CMP = {"==": operator.eq, "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
        "<": operator.lt, "<=": operator.le}

# Host mirrors a release's callers always set for a forward mode, read by hand from each
# release named below (never from running diag): (release, mirror) -> {census mode: where it is
# set}. A release not named decides none of them (its sites keep those modes).
#
# `extend_seq_lens_cpu` / `extend_prefix_lens_cpu`: ForwardBatch.init_new binds
# `extend_seq_lens = batch.extend_lens` for every batch that is not decode or idle (0.5.23
# model_executor/forward_batch_info.py:998; 0.5.21 :932-935) and, in the arm of `if
# ret.forward_mode.is_decode() or ret.forward_mode.is_target_verify():` that is neither, fills
# both copies under `if isinstance(extend_seq_lens, list):` (0.5.23 :1226, 1230, 1240-1241;
# 0.5.19 :893, 897, 907-908). Every writer of a ScheduleBatch's `extend_lens` gives a list
# (prepare_for_extend, mix_with_running's `self.extend_lens + [1] * running_bs`, 0.5.21
# managers/schedule_batch.py:2767, 3210), but for the EAGLE draft extend with no host seq_lens
# (`gpu_only = batch.seq_lens_cpu is None`), which hands device tensors in and sets
# `forward_batch.extend_seq_lens_cpu = [num_window_tokens] * bs` right after ("so backend max()
# reads from list without a per-iter D2H sync"; 0.5.23 speculative/eagle_worker_common.py:137,
# 222; 0.5.22's fused-lengths arm is gpu-only too, :170, 225). The draft extend's prefix copy
# stays None there, so draft-extend is not listed for `extend_prefix_lens_cpu`. Lines per
# release: (init_new's `ret.extend_prefix_lens_cpu =`, its `ret.extend_seq_lens_cpu =`,
# eagle_worker_common's gpu-only `forward_batch.extend_seq_lens_cpu =`), each read in that
# release. 0.5.9 - 0.5.15.post1 (`_INIT_NEW_TARGET_LINES`): init_new
# sets both copies in the `else` of `is_decode() or is_target_verify()` from the batch's lists
# (0.5.9 - 0.5.12.post1 assert them lists, 0.5.12 forward_batch_info.py:557-562, 578-579; 0.5.13
# - 0.5.15.post1 under `isinstance(extend_seq_lens, list)`, 0.5.15 :811-825, the lists
# `batch.extend_lens` / `batch.prefix_lens`, :647-648, that prepare_for_extend builds from the
# requests, schedule_batch.py:2024-2025, 2049-2050), on target-extend and (the lengths) on the
# dLLM mode. Lines: (prefix copy, lengths copy). The draft extend (`_DRAFT_EXTEND_SET`), 0.5.13
# - 0.5.15.post1 only: the one maker of a DRAFT_EXTEND_V2 batch (`prepare_for_draft_extend`,
# 0.5.15 speculative/base_spec_worker.py:92-158; 0.5.13 `prepare_for_extend_to_fill_draft_
# kvcache`, eagle_info_v2.py:309-362) hands init_new lists (0.5.15 :134-135, 0.5.13 :338-339)
# or, gpu-only, sets `forward_batch.extend_seq_lens_cpu = [num_draft_tokens] * bs` itself
# (:158; 0.5.13 :362): the lengths copy is set on every draft-extend batch, the prefix copy only
# off gpu-only. 0.5.9 - 0.5.12.post1 also run the v1 worker's draft extend: not named.
_DRAFT_EXTEND_SET = {"0.5.13": "eagle_info_v2.py:362", "0.5.13.post1": "eagle_info_v2.py:362",
                     "0.5.14": "base_spec_worker.py:158", "0.5.15": "base_spec_worker.py:158",
                     "0.5.15.post1": "base_spec_worker.py:158"}
_INIT_NEW_TARGET_LINES = {"0.5.9": (504, 505), "0.5.10": (566, 567),
                          "0.5.10.post1": (566, 567), "0.5.11": (578, 579),
                          "0.5.12": (578, 579), "0.5.12.post1": (578, 579),
                          "0.5.13": (768, 769), "0.5.13.post1": (768, 769),
                          "0.5.14": (814, 815), "0.5.15": (824, 825),
                          "0.5.15.post1": (824, 825)}
_INIT_NEW_LINES = {"0.5.16": (846, 847, 192), "0.5.17": (915, 916, 193),
                   "0.5.18": (883, 884, 193), "0.5.19": (907, 908, 193),
                   "0.5.20": (944, 945, 193), "0.5.21": (1117, 1118, 194),
                   "0.5.22": (1188, 1189, 225), "0.5.23": (1240, 1241, 222)}
# `seq_lens_cpu` on a target-extend (prefill) batch: ScheduleBatch.prepare_for_extend sets it
# (`seq_lens_cpu = torch.tensor(seq_lens, ...)`, then `self.seq_lens_cpu = seq_lens_cpu` in the
# method's body, no return before it: 0.5.23 managers/schedule_batch.py:2879, 2888; 0.5.19
# :2536, 2545), a mixed chunk under speculative decoding rebuilds it from the requests after
# merge_batch, which would null it (`if merged_seq_lens_cpu is not None: self.seq_lens_cpu =
# merged_seq_lens_cpu`: 0.5.23 :3349, 0.5.22 :3200, 0.5.21 :3200, 0.5.20 :3071, 0.5.19 :2941),
# and ForwardBatch.init_new hands it on (0.5.23 model_executor/forward_batch_info.py:1013; 0.5.21
# :950, 969). 0.5.16 - 0.5.18 have no such rebuild (0.5.17 :2681 merges only, and
# merge_batch nulls the copy where either side lacks it, 0.5.18 :3241-3242), but they refuse a
# mixed chunk under speculative decoding at start (`if self.speculative_algorithm is not None:
# assert not self.enable_mixed_chunk`, 0.5.18 server_args.py:9193-9196, 0.5.17 :8751-8754,
# 0.5.16 :7626-7629), so no merge reaches a target-extend batch there, and init_new hands the
# copy on (`seq_lens_cpu = batch.seq_lens_cpu`, 0.5.18 forward_batch_info.py:750, 769; 0.5.16
# :685, 704). 0.5.9 - 0.5.15.post1 likewise: prepare_for_extend sets it with no return before
# (0.5.15 schedule_batch.py:2043, 2052; 0.5.9 :1484, 1499), a mixed chunk is refused under
# speculative decoding (0.5.15 server_args.py:6602-6605, 0.5.12 :7279-7282, 0.5.9 :5171-5174;
# before that the EAGLE handler turns it off, 0.5.9 :2390-2391), and it reaches the forward:
# 0.5.9 - 0.5.12.post1 through the ModelWorkerBatch (`seq_lens_cpu=self.seq_lens_cpu`, 0.5.9
# :2259; init_new `seq_lens_cpu=batch.seq_lens_cpu`, forward_batch_info.py:398), 0.5.13 -
# 0.5.15.post1 from the batch itself, `seq_lens_cpu_cache` being declared (0.5.15
# schedule_batch.py:1841) and never set, so init_new takes `batch.seq_lens_cpu` (0.5.15
# forward_batch_info.py:662-673). The
# dLLM and prebuilt modes ("other"): a DLLM_EXTEND batch is made by the same prepare_for_extend,
# its arm `if self.is_dllm(): self.forward_mode = ForwardMode.DLLM_EXTEND` before the line that
# sets the copy (a mixed chunk is MIXED, `mix_with_running`, 0.5.18 :2750); a PREBUILT batch
# never runs a model forward (`if batch.forward_mode.is_prebuilt(): return
# self._run_batch_prebuilt(batch)`; "PREBUILT never enters a model forward", 0.5.23 disaggregation/decode_schedule_batch_mixin.py:31). The
# decode-side phases are decided by the spec-v2 relay instead (probes.startup.host_lengths:
# FutureMap.resolve_seq_lens_cpu nulls it where every backend opts out of the host lengths,
# 0.5.23 managers/overlap_utils.py:615-619). Lines per release: (prepare_for_extend's `self.
# seq_lens_cpu = seq_lens_cpu`, its DLLM_EXTEND arm, scheduler.py's `is_prebuilt()` test).
_SEQ_LENS_LINES = {"0.5.9": (1499, 1454, 2299), "0.5.10": (1611, 1565, 2655),
                   "0.5.10.post1": (1611, 1565, 2655), "0.5.11": (1714, 1662, 2920),
                   "0.5.12": (1751, 1699, 3012), "0.5.12.post1": (1751, 1699, 3012),
                   "0.5.13": (1928, 1901, 3004), "0.5.13.post1": (1928, 1901, 3004),
                   "0.5.14": (2040, 2013, 3164), "0.5.15": (2052, 2016, 3210),
                   "0.5.15.post1": (2053, 2017, 3219), "0.5.16": (2190, 2154, 3309),
                   "0.5.17": (2323, 2287, 3548), "0.5.18": (2410, 2374, 3648), "0.5.19": (2545, 2509, 4035),
                   "0.5.20": (2673, 2637, 4272), "0.5.21": (2769, 2733, 4369),
                   "0.5.22": (2771, 2735, 4521), "0.5.23": (2888, 2852, 4645)}


def _mirrors_set() -> dict[tuple[str, str], dict[str, str]]:
    fbi = "sglang/srt/model_executor/forward_batch_info.py"
    out: dict[tuple[str, str], dict[str, str]] = {}
    for v, (prefix, lens, draft) in _INIT_NEW_LINES.items():
        out[(v, "extend_prefix_lens_cpu")] = {"target-extend": f"{fbi}:{prefix}"}
        out[(v, "extend_seq_lens_cpu")] = {
            "target-extend": f"{fbi}:{lens}", "other": f"{fbi}:{lens}",
            "draft-extend": f"{fbi}:{lens}, sglang/srt/speculative/eagle_worker_common.py:{draft}"}
    for v, (prefix, lens) in _INIT_NEW_TARGET_LINES.items():
        out[(v, "extend_prefix_lens_cpu")] = {"target-extend": f"{fbi}:{prefix}"}
        # "other" as for 0.5.16+: a DLLM_EXTEND batch is prepare_for_extend's too (its arm,
        # _SEQ_LENS_LINES), a PREBUILT one runs no forward
        out[(v, "extend_seq_lens_cpu")] = {"target-extend": f"{fbi}:{lens}",
                                           "other": f"{fbi}:{lens}"}
        if v in _DRAFT_EXTEND_SET:
            out[(v, "extend_seq_lens_cpu")]["draft-extend"] = \
                f"{fbi}:{lens}, sglang/srt/speculative/{_DRAFT_EXTEND_SET[v]}"
    for v, (at, dllm, prebuilt) in _SEQ_LENS_LINES.items():
        where = f"sglang/srt/managers/schedule_batch.py:{at}"
        out[(v, "seq_lens_cpu")] = {
            "target-extend": where,
            "other": f"{where} after the DLLM_EXTEND arm :{dllm}; PREBUILT runs no forward, "
                     f"sglang/srt/managers/scheduler.py:{prebuilt}-{prebuilt + 1}"}
    return out


MIRRORS_SET: dict[tuple[str, str], dict[str, str]] = _mirrors_set()


@dataclass(frozen=True)
class Decision:
    status: str  # live | unreachable | depends
    reason: str  # why (empty for a site no guard stands in front of)
    # depends on a configuration fact not given (not only on what a caller passes: a data
    # condition the census always took both ways)
    on_config: bool = False

    def as_dict(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason}


def _value(cfg: SpecConfig, fact: str) -> Any:
    """The configuration's value of a fact; None when not given."""
    return getattr(cfg, fact, None)


# model facts of the architecture: fact -> (model_facts.Window field, whose model: the one
# serving the mode, or always the target's (the batch's `encoder_lens` follows the scheduler's
# model config, 0.5.23 managers/schedule_batch.py:3128))
_ARCH_FACTS = {"model:encoder_decoder": ("encoder_decoder", "mode"),
               "model:local_attention": ("local_attention", "mode"),
               "model:encoder_lens": ("encoder_decoder", "target"),
               "model:prefill_aware_swa": ("prefill_aware", "mode"),
               "model:mla": ("mla", "mode")}
_WHY = {"encoder_decoder": "encdec_why", "local_attention": "local_why",
        "prefill_aware": "prefill_why", "mla": "mla_why"}


def decide_guard(g: tuple, cfg: SpecConfig, mode: str, version: str | None,
                 platform: str | None = None, models: dict[str, Any] | None = None,
                 relay: Any = None) -> tuple[bool | None, str]:
    """(True | False | None (undecided), words) for one guard on one forward mode; `models`:
    the served models' facts (`model_facts.windows`), else no model fact is decided; `relay`:
    whether decode-side batches carry `seq_lens_cpu` (`probes.startup.host_lengths.Mirror`).
    A guard read through start-up flags (census.flags) says so after its words."""
    text = g[4]
    core, sep, via = text.partition(VIA)
    if not sep:
        return _decide_guard(g, cfg, mode, version, platform, models, relay)
    ok, words = _decide_guard((*g[:4], core, *g[5:]), cfg, mode, version, platform, models,
                              relay)
    return ok, f"{words}{sep}{via}"


def _decide_guard(g: tuple, cfg: SpecConfig, mode: str, version: str | None,
                  platform: str | None = None, models: dict[str, Any] | None = None,
                  relay: Any = None) -> tuple[bool | None, str]:
    fact, op, value, where, text = g[:5]
    if fact == "model:sliding_window_size":
        from diag.probes.metadata_syncs.model_facts import DRAFT_MODES

        w = (models or {}).get("draft" if mode in DRAFT_MODES else "target")
        if w is None or not w.known:
            return None, f"`{text}` ({where}): {w.why if w else 'the model (pass --model)'}"
        have = w.value
        if op in ("is", "is not"):
            holds = (have is None) == (op == "is")
        else:
            holds = have is not None and bool(_CMP[op](have, value))
        return holds, f"model: {w.why} (`{text}`, {where})"
    if fact in _ARCH_FACTS:  # what the model's architecture decides (model_facts)
        from diag.probes.metadata_syncs.model_facts import DRAFT_MODES

        attr, whose = _ARCH_FACTS[fact]
        w = (models or {}).get("draft" if whose == "mode" and mode in DRAFT_MODES else "target")
        have = getattr(w, attr, None) if w is not None else None
        if have is None:
            return None, f"`{text}` ({where}): " + (
                getattr(w, _WHY[attr]) if w else "the model (pass --model)")
        return (have == value) == (op == "=="), f"model: {getattr(w, _WHY[attr])} " \
                                                f"(`{text}`, {where})"
    if fact == RAGGED_FACT:  # the speculative input's ragged verify layout (census.guards)
        algo = (cfg.speculative_algorithm or "").upper()
        # not given, under a configuration: EAGLE or NEXTN, as the per-phase verdicts read it
        # (probes.draft_extend_graph.phases: "with --speculative-algorithm EAGLE ... with NEXTN")
        cands = [algo] if algo else ["EAGLE", "NEXTN"] if cfg.given else []
        if value is None or not cands:
            return None, f"`{text}` ({where}): " + (
                "the speculative algorithm" if value is None or algo else
                "speculative_algorithm not given")
        algos, at = value
        if any(a in algos for a in cands):
            return None, f"`{text}` ({where}): {algo or 'EAGLE'}'s verify input may carry a " \
                         f"ragged layout ({at})"
        read = "" if algo else " (speculative_algorithm not given: EAGLE or NEXTN)"
        return op == "!=", f"release: only {', '.join(algos)} verify inputs carry a ragged " \
                           f"layout ({at} supports_ragged_verify{read}; `{text}`, {where})"
    if fact.startswith("data:"):
        return None, f"`{text}` ({where})" if fact != "data:loop" else f"{text} ({where})"
    if fact.startswith("arch:"):
        return _arch(fact[5:], op, value, cfg, platform, where, text)
    if fact.startswith("env:"):
        return _env(fact[4:], op, value, cfg, where, text)
    if fact == "platform":
        if platform is None or op not in ("==", "!="):
            return None, f"`{text}` ({where}): the platform"
        return (platform == value) == (op == "=="), f"platform: {platform} (`{text}`, {where})"
    if fact == "on":  # a guard that applies on some modes only (census.scan.mode_scoped)
        modes, inner = value
        if mode not in modes:
            return True, f"{mode}: `{text}` holds ({where})"
        return decide_guard(inner, cfg, mode, version, platform, models, relay)
    if fact == "any":  # a disjunction of release facts: one holding is enough
        got = [decide_guard(a, cfg, mode, version, platform, models, relay) for a in value]
        if any(ok for ok, _ in got):
            return True, next(why for ok, why in got if ok)
        if all(ok is False for ok, _ in got):
            return False, "; ".join(why for _, why in got)
        return None, f"`{text}` ({where}): " + "; ".join(why for ok, why in got if ok is None)
    if fact.startswith("spec:"):  # set by the multi-step owner (census.draft_steps)
        attr = fact.split(":", 1)[1]
        at = dict(value or ()).get(mode)
        name = f"spec_info.{attr}" if attr else "spec_info"
        if at is None:
            return None, f"`{text}` ({where}): whether {name} is set on a {mode} batch"
        return op == "is not", f"release: {name} is set before every draft-decode call " \
                               f"({at}; `{text}`, {where})"
    if fact.startswith("bind:"):  # a parameter whose callers bind it per mode (census.reach)
        pname = fact.split(":", 1)[1]
        got = {m: (b, at) for m, b, at in value or ()}.get(mode)
        if got is None:
            return None, f"`{text}` ({where}): what the {mode} calls pass as {pname}"
        if got[0] == "none":
            return op == "is", f"release: every {mode} call passes {pname}=None ({got[1]}; " \
                               f"`{text}`, {where})"
        bound, kept = got[0], None  # (census.kept_lengths: the copy's release fact with it)
        if isinstance(bound, (tuple, list)):
            bound, kept = bound
        return decide_guard((bound, op, kept, where, text), cfg, mode, version, platform,
                            models, relay)
    if fact.startswith("mirror:"):  # also a helper's parameter its callers bind to one
        name = fact.split(":", 1)[1]  # (census.guards.param_mirrors)
        set_at = MIRRORS_SET.get((version or "", name), {}).get(mode)
        if set_at is None and isinstance(value, (tuple, list)) and len(value) == 3 \
                and value[0] == "kept" and (mode in DECODE_SIDE or mode == "idle" and value[2]):
            made = f"; an IDLE batch gets it at {value[2]}" if mode == "idle" else ""
            return op == "is not", f"release: {name} is set on every {mode} batch this " \
                                   f"class serves: {value[1]}{made} (`{text}`, {where})"
        if set_at is None and isinstance(value, (tuple, list)) and len(value) == 3 \
                and value[0] == "idle" and mode == "idle" and value[2]:
            return op == "is not", f"release: {name} is set on every IDLE batch (made at " \
                                   f"{value[2]}): {value[1]} (`{text}`, {where})"
        if set_at is None and name == "seq_lens_cpu" and mode in DECODE_SIDE \
                and relay is not None:
            if relay.holds is None:
                return None, f"`{text}` ({where}): {relay.why}"
            holds = (op == "is not") == relay.holds
            return holds, f"release: {name} {'set' if relay.holds else 'None'} on {mode} " \
                          f"batches: {relay.why}"
        if set_at is None:
            return None, f"`{text}` ({where}): whether the caller sets {name}"
        holds = op == "is not"  # the mirror is set: `is not None` holds, `is None` does not
        return holds, f"release: {name} is set on every {mode} batch ({set_at})"
    have = _value(cfg, fact)
    if have is None or op not in _CMP:
        return None, f"`{text}` ({where}): {fact} not given"
    how = dict(cfg.start_values).get(fact)  # filled in by probes.startup.start_values
    return bool(_CMP[op](have, value)), f"config: {fact}={have}{f', {how}' if how else ''} " \
                                        f"(`{text}`, {where})"


def _arch(fn: str, op: str, value: Any, cfg: SpecConfig, platform: str | None, where: str,
          text: str) -> tuple[bool | None, str]:
    """`is_gfx95_supported()` (census.switches: its arch names and where): false off HIP, on HIP
    whether the configuration's GPU arch holds one of the names."""
    if value is None:
        return None, f"`{text}` ({where}): {fn} not read in this release"
    names, at = value
    if platform is None:
        return None, f"`{text}` ({where}): the platform"
    if platform != "hip":
        return op == "!=", f"platform: {platform}, {fn}() is false off HIP ({at}; `{text}`, " \
                           f"{where})"
    if not cfg.gpu_arch:
        return None, f"`{text}` ({where}): the GPU arch (pass --gpu-arch; {fn}() looks for " \
                     f"{'/'.join(names)}, {at})"
    got = any(n in cfg.gpu_arch for n in names)
    return got == (op == "=="), f"gpu: {cfg.gpu_arch}, {fn}() is {got} ({at}; `{text}`, {where})"


def _env(name: str, op: str, value: Any, cfg: SpecConfig, where: str, text: str
         ) -> tuple[bool | None, str]:
    """A boolean switch (census.flags.env_read; value: reader, default, where the default is
    set) under the server's environment: `--env` (a variable it leaves out is unset, its
    default), else this process's where it sets the variable, as the start-up verdicts take it
    (`probes.draft_extend_graph.phases.env_of`: a variable this process lacks is not taken as
    unset on the server); undecided with no configuration under audit at all (the release's
    upper bound)."""
    import os

    reader, default, at = value[:3] if value else (None, None, None)
    if cfg.environ is None and (not cfg.given or name not in os.environ):
        return None, f"`{text}` ({where}): the server's {name}" + (
            f" (default {default}{f', {at}' if at else ''}; pass --env {name}=...)"
            if default is not None else "")
    env = os.environ if cfg.environ is None else cfg.environ
    raw = env.get(name, default)
    if raw is None:
        return None, f"`{text}` ({where}): {name} not set, and its default not read"
    low = raw.lower()
    if reader == "envs-str":  # `envs.N.get() == "x"`: an EnvStr is its text as set
        got: bool | None = raw == value[3]
    elif reader == "get_bool_env_var":  # true for "true"/"1", else false (0.5.23 utils/common.py:1424-1441)
        got = low in ("true", "1")
    else:  # EnvBool.parse (0.5.23 environ.py:143-150); anything else: not decided
        got = True if low in ("true", "1", "yes", "y") else \
            False if low in ("false", "0", "no", "n") else None
    if got is None:
        return None, f"`{text}` ({where}): {name}={raw!r} is no boolean"
    src = f"{name}={raw}" if name in env else f"{name} unset, default {default}" + (
        f" ({at})" if at else "")
    return got == (op == "=="), f"env: {src} (`{text}`, {where})"


def decide(site: Any, cfg: SpecConfig, mode: str, version: str | None,
           platform: str | None = None, models: dict[str, Any] | None = None,
           relay: Any = None) -> Decision:
    """A census site on one forward mode, for the configuration: a guard decided false makes it
    unreachable (every path passes each of its guards), all decided true live, else depends."""
    undecided, held, on_config = [], [], False
    for g in site.guards:
        ok, why = decide_guard(g, cfg, mode, version, platform, models, relay)
        if ok is False:
            return Decision("unreachable", why)
        (held if ok else undecided).append(why)
        fact = g[2][1][0] if g[0] == "on" else g[0]
        on_config = on_config or (ok is None and not fact.startswith(
            ("mirror:", "data:", "bind:", "spec:", "any")))
    if undecided:
        return Decision("depends", "; ".join(undecided), on_config)
    return Decision("live", "; ".join(held))


def release_paths(site: Any, version: str | None, never_drafts: dict[str, str] | None = None
                  ) -> tuple[str, ...]:
    """The site's per-step paths (the census's, from the call graph) less those a fact of the
    release alone rules out: a host mirror the release's callers always set on that mode
    (`MIRRORS_SET`), a parameter every call of that mode passes as None
    (census.reach.mode_binds), or a spec input a multi-step draft backend sets before each
    per-step call (census.draft_steps). 0.5.23 flashinfer_backend.py:1962 lies on the extend branch, but
    its `.item()` runs only without `extend_prefix_lens_cpu`, which every target-extend batch
    has (forward_batch_info.py:1240): not a target-extend path. With `never_drafts`
    (`backends.never_draft_extends` of the release): draft-extend too where the site's class
    serves no draft-extend batch (0.5.23 wave_backend.py:301)."""
    paths = tuple(site.paths)
    if never_drafts and site.backend in never_drafts:
        paths = tuple(m for m in paths if m != "draft-extend")
    facts = [g for g in site.guards if (g[2][1][0] if g[0] == "on" else g[0]).startswith(
        ("mirror:", "bind:", "spec:", "any"))]
    if not facts:
        return paths
    cfg = SpecConfig()
    return tuple(m for m in paths
                 if all(decide_guard(g, cfg, m, version)[0] is not False for g in facts))


def decide_modes(site: Any, cfg: SpecConfig, modes: list[str] | tuple[str, ...],
                 version: str | None, platform: str | None = None,
                 models: dict[str, Any] | None = None, relay: Any = None
                 ) -> dict[str, Decision]:
    return {m: decide(site, cfg, m, version, platform, models, relay) for m in modes}
