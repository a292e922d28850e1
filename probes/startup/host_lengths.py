"""Whether the decode-side batches (target-verify, draft-decode, draft-extend) carry the host copy
of the sequence lengths, `seq_lens_cpu`, for the configuration under audit.

Why: many metadata builders read lengths from that host copy and fall back to the device tensor
when it is absent (`forward_batch.seq_lens.max().item()`, 0.5.23 dsa_backend.py:1115): a sync
on every eager build, or none. From 0.5.17 the spec-v2 relay decides it at start, for the whole
server (read in 0.5.17, 0.5.19, 0.5.21 and 0.5.23):
- under the overlap scheduler, `FutureMap.resolve_seq_lens_cpu` sets `batch.seq_lens_cpu =
  None` on every decode-side batch when `needs_cpu_seq_lens` is false (0.5.23
  managers/overlap_utils.py:615-619; 0.5.19 :539-542), else copies it to the host;
- `decide_needs_cpu_seq_lens` (0.5.23 :26-52) makes it true under two-batch overlap or NGRAM,
  else when any backend of the worker's `spec_v2_attn_backends` says so: the target's backend,
  the draft's multi-step backend (none with one step) and the draft-extend backend
  (speculative/eagle_worker_v2.py:1375-1385; 0.5.19 :1122-1130), `getattr(b,
  "needs_cpu_seq_lens", True)`: the AttentionBackend default is True
  (layers/attention/base_attn_backend.py:163), DSA, QSA, triton and others opt out;
- the forward batches take the ScheduleBatch's copy as it is (model_executor/
  forward_batch_info.py:1013, speculative/eagle_utils.py:375, eagle_worker_common.py:136).
SGLang turns the overlap scheduler off by itself in some cases (pipeline parallelism, CPU,
mamba radix caches without extra buffers: arg_groups/overrides.py:486, :1627), so without the
server's own `disable_overlap_schedule` nothing is decided; the other path (no overlap) is not
read. The multi-layer and FROZEN_KV_MTP workers list their own backends and are not read.
"""

from __future__ import annotations

from dataclasses import dataclass

from diag.context import SpecConfig
from diag.probes import backends
from diag.probes.startup.resolve import find_line
from diag.target import Target

RELAY = "srt/managers/overlap_utils.py"
ATTR = "needs_cpu_seq_lens"
DECODE_SIDE = frozenset({"target-verify", "decode", "draft-extend"})


@dataclass(frozen=True)
class Mirror:
    """`seq_lens_cpu` on decode-side batches: True (set), False (None), None (not decided)."""

    holds: bool | None
    why: str


def decode_seq_lens_cpu(target: Target, platform: str, cfg: SpecConfig, backend: str | None,
                        draft_backend: str | None = None, mla: bool | None = None,
                        worker: str = "eagle") -> Mirror:
    """The decision for one configuration: `backend` the target's attention backend, the draft
    runs `draft_backend` (default the same); `worker` the speculative worker the verdicts found
    (eagle | multi-layer | frozen)."""
    decide = find_line(target, RELAY, r"def decide_needs_cpu_seq_lens")
    nulls = find_line(target, RELAY, r"if not self\.needs_cpu_seq_lens:")
    if decide is None or nulls is None:
        return Mirror(None, f"sglang {target.version} has no spec-v2 length relay read here")
    if worker != "eagle":
        return Mirror(None, f"the {worker} worker's backends are not read ({decide})")
    if not backend:
        return Mirror(None, "the attention backend is not known")
    if cfg.enable_two_batch_overlap:
        tbo = find_line(target, RELAY, r"enable_two_batch_overlap")
        return _under_overlap(cfg, True, f"two-batch overlap needs the host lengths ({tbo})")
    if (cfg.speculative_algorithm or "").upper() == "NGRAM":
        return Mirror(True, f"NGRAM needs the host lengths ({decide})")
    bm = backends.backend_map(target, platform, mla=mla)
    roles = [("target", backend, "target")]
    draft = draft_backend or backend
    steps = cfg.speculative_num_steps
    dinfo = bm.get(draft)
    min_steps = dinfo.decode_min_steps if dinfo is not None else None
    if steps is None or min_steps is None or steps >= min_steps:
        roles.append(("decode", draft, "draft multi-step"))
    roles.append(("draft-extend", draft, "draft-extend"))
    said, unknown = [], []
    default = find_line(target, RELAY, r'getattr\(b, "needs_cpu_seq_lens", True\)')
    for role, name, words in roles:
        info = bm.get(name)
        rows = info.class_attr(ATTR, role) if info is not None else []
        if not rows:
            unknown.append(f"{words} backend of {name!r}: no class read")
        for cls, value, text, where in rows:
            if value is None and where == "" and default is not None:
                value, text, where = True, f"{cls} sets none: the default", default
            if value is True:
                why = f"the {words} backend {cls} needs the host lengths ({text}, {where})"
                return _under_overlap(cfg, True, why)
            if value is None:
                unknown.append(f"{words} backend {cls}: {text}" + (f" ({where})" if where
                                                                    else ""))
            else:
                said.append(f"{cls} ({where})")
    if unknown:
        return Mirror(None, "; ".join(unknown))
    why = (f"every backend opts out of the host lengths: {', '.join(dict.fromkeys(said))}; "
           f"the relay nulls them ({nulls})")
    return _under_overlap(cfg, False, why)


def _under_overlap(cfg: SpecConfig, holds: bool, why: str) -> Mirror:
    """The decision where the overlap scheduler is known to run; else not decided."""
    if cfg.disable_overlap_schedule is False:
        return Mirror(holds, f"{why}, under the overlap scheduler")
    if cfg.disable_overlap_schedule:
        return Mirror(None, "with --disable-overlap-schedule the relay does not run (that path "
                            "is not read)")
    return Mirror(None, f"under the overlap scheduler {'set' if holds else 'None'}: {why}; "
                        "whether the server runs it (SGLang turns it off for pipeline "
                        "parallelism, CPU, some mamba caches): pass --server, or "
                        "--overlap-schedule / --disable-overlap-schedule")
