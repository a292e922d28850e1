"""What the census starts from: the metadata builders (`BUILDERS`, the default) or the attention
forward (`FORWARD`). Why two: the builders run once per batch on every path, graph replay
included; the forward runs once per layer and only on an eager pass (a graph replay runs no
Python), so a sync there costs a stall per layer of every eager pass — the draft-extend fallback
the gate causes — and is counted apart from the builders' per-step totals.

The forward's entry points are the backend's `forward_extend` and `forward_decode`, which the
base `AttentionBackend.forward` picks by forward mode: IDLE returns before either, DECODE runs
`forward_decode`, every other mode (the target's extend, the draft's extend, target-verify, the
dLLM modes) `forward_extend` (sglang 0.5.23 layers/attention/base_attn_backend.py:332-355,
0.5.19 :260-283; on NPU a MIXED batch runs `forward_mixed`, not read here). A backend that
overrides `forward` itself is read from there (0.5.17 deepseek_v4_backend_hip_radix.py:1385).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from diag.probes.metadata_syncs.census.paths import (
    _EXTERNAL,
    _MODEL_ENTRY,
    NONE,
    RUN_PHASES,
    _modes,
    seed_state,
)
from diag.probes.metadata_syncs.census.sites import _NAMED_BUILDER

_FORWARD_ENTRY = {"forward_extend": {"target-extend", "draft-extend", "target-verify", "other"},
                  "forward_decode": {"decode"},
                  # a backend that overrides `forward` itself dispatches every mode but IDLE
                  # (0.5.17 deepseek_v4_backend_hip_radix.py:1385)
                  "forward": {"target-extend", "draft-extend", "target-verify", "decode",
                              "other"}}


@dataclass(frozen=True)
class Scope:
    name: str
    seed_text: re.Pattern  # a textual superset of a seed's `def` line: other files are skipped

    def is_seed(self, qual: str) -> bool:
        name = qual.rsplit(".", 1)[-1]
        if self.name == "forward":
            return name in _FORWARD_ENTRY
        return name.startswith("init_forward_metadata") or bool(_NAMED_BUILDER.search(name)) \
            or name in _MODEL_ENTRY

    def follows(self, qual: str) -> bool:
        """Whether a call to `qual` is read as part of this scope. The forward does not read
        the metadata builders it may call lazily (0.5.23 qwen_sparse_attn_backend.py:1328-1330
        `_resolve_metadata`: `init_forward_metadata` only when `self.forward_metadata is
        None`): the model runner builds the metadata before every eager forward (0.5.23
        model_executor/runner/eager_runner.py:257 decode, :328 extend; 0.5.19
        model_executor/model_runner.py:1553), and the builders' census counts that build once
        per step."""
        return self.name != "forward" or not qual.rsplit(".", 1)[-1].startswith(
            "init_forward_metadata")

    def external(self, name: str) -> bool:
        """Called from outside the module (the model runner, the graph runners, the layer)."""
        return name in _FORWARD_ENTRY if self.name == "forward" else bool(_EXTERNAL.match(name))

    def seed_state(self, name: str) -> frozenset:
        if self.name == "forward":
            # eager passes ("step") and the capture run of a captured mode ("capture")
            return _modes(_FORWARD_ENTRY[name], RUN_PHASES) if name in _FORWARD_ENTRY else NONE
        return seed_state(name)


BUILDERS = Scope("builders", re.compile(r"\bdef\s+(init_forward_metadata|_?(build|make|prepare|"
                                        r"attach|compute)_\w*meta)"))
FORWARD = Scope("forward", re.compile(r"\bdef\s+forward(_extend|_decode)?\b"))
SCOPES = {s.name: s for s in (BUILDERS, FORWARD)}
