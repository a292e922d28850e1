"""What the census finds: a sync-prone call site (`Site`), the verdicts it can get, the census of
a release (`Census`), and the names that tell a builder, a backend and a device value.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from diag.probes.source import unparse as _unparse

ATTENTION_DIR = "srt/layers/attention"
_ATTENTION_PKG = "sglang." + ATTENTION_DIR.replace("/", ".") + "."
# Helper packages outside the attention tree whose functions a builder calls and the census
# follows (their syncs count for the calling builder): decode-context parallelism's planner,
# whose `plan_dcp_decode_metadata` reads the local lengths back when the caller has no host
# copy (0.5.23 layers/dcp/planner.py:157-163; called from aiter_backend.py:2631-2657).
HELPER_DIRS = ("srt/layers/dcp",)
_HELPER_PKGS = tuple("sglang." + d.replace("/", ".") + "." for d in HELPER_DIRS)

# ForwardBatch / metadata fields that hold device tensors (their host mirrors end in `_cpu`).
_DEVICE_FIELDS = {"extend_seq_lens", "seq_lens", "req_pool_indices", "extend_prefix_lens",
                  "positions", "out_cache_loc", "extend_start_loc", "accept_length",
                  "cu_seqlens_q", "cu_seqlens_k", "cache_seqlens_int32", "page_table",
                  "encoder_lens",
                  # the mamba prefix-cache tracking tensors: the ScheduleBatch makes them on the
                  # device (0.5.23 managers/schedule_batch.py:3117-3121, 3343-3345, 3830) and
                  # ForwardBatch.init_new hands them on (forward_batch_info.py:1060-1062)
                  "mamba_track_mask", "mamba_track_indices", "mamba_track_seqlens"}
_HOST_READ_METHODS = {"item": 1, "tolist": 1, "cpu": 1, "numpy": 1}
_DYNAMIC = {"nonzero", "unique", "masked_select", "unique_consecutive", "argwhere", "bincount"}
# torch factories whose positional arguments are sizes (`full`: the first only): a device
# scalar there is read back (`torch.empty(cu[-1])`)
_SIZED = {"empty": None, "zeros": None, "ones": None, "rand": None, "randn": None,
          "arange": None, "full": 1, "new_empty": None, "new_zeros": None, "new_ones": None,
          "new_full": 1}
# the per-request (or per-token) 1-D ones: an element at a Python integer is a 0-dim tensor
_ONE_D = {"extend_seq_lens", "seq_lens", "req_pool_indices", "extend_prefix_lens",
          "extend_start_loc", "accept_length", "encoder_lens", "cache_seqlens_int32",
          "cu_seqlens_q", "cu_seqlens_k", "positions", "out_cache_loc"}
_REDUCTIONS = {"sum", "max", "min", "any", "all", "prod", "amax", "amin"}
_SCALAR_CALLS = {"int", "len", "sum", "float", "bool", "round", "math.ceil", "cdiv"}
_FACTORIES = {"tensor", "as_tensor", "arange", "zeros", "ones", "empty", "full", "rand",
              "randn", "randint", "linspace", "from_numpy"}
_SAME_KIND = {"to", "long", "int", "clamp", "clamp_min", "clamp_max", "cumsum", "contiguous",
              "flatten", "view", "reshape", "squeeze", "unsqueeze", "clone", "sum", "max", "min",
              "type", "detach", "narrow", "expand", "repeat", "nonzero", "unique", "argwhere",
              "masked_select", "bincount", "diff", "abs", "ne", "eq", "gt", "lt", "ge", "le",
              "logical_not", "bool", "float", "sort", "argsort", "cummax", "index_select",
              "any", "all", "prod", "amax", "amin", "argmax", "argmin", "count_nonzero",
              "cumprod", "mean", "neg", "add", "sub", "mul", "minimum", "maximum",
              "logical_and", "logical_or", "remainder"}

# Backends on each platform's draft-extend path: the HIP gate's allow-list over the releases,
# plus the backends it tests (sglang 0.5.23 srt/speculative/eagle_worker_v2.py:560-564; `nsa`
# built NativeSparseAttnBackend up to 0.5.12.post1, srt/layers/attention/attention_registry.py:99);
# CUDA's graph_supported_backend_types (0.5.23 eagle_worker_v2.py:567).
DRAFT_EXTEND_BACKENDS = {
    "hip": {"DeepseekV4HipRadixBackend", "DeepseekSparseAttnBackend", "QwenSparseAttnBackend",
            "AiterAttnBackend", "AiterMultiStepDraftBackend", "NativeSparseAttnBackend",
            "TritonAttnBackend"},
    "cuda": {"DeepseekV4AttnBackend", "DeepseekSparseAttnBackend", "NativeSparseAttnBackend",
             "QwenSparseAttnBackend", "FlashAttentionBackend", "FlashInferAttnBackend",
             "TritonAttnBackend", "TRTLLMHAAttnBackend", "TRTLLMMLABackend",
             "FlashMLABackend", "FlashInferMLAAttnBackend"},
}
# config.attention_backend name -> backend classes (attention_registry.py)
BACKEND_NAMES = {
    "aiter": {"AiterAttnBackend", "AiterMultiStepDraftBackend"},
    "dsv4": {"DeepseekV4HipRadixBackend", "DeepseekV4AttnBackend"},
    "dsa": {"DeepseekSparseAttnBackend"}, "nsa": {"NativeSparseAttnBackend",
                                                  "DeepseekSparseAttnBackend"},
    "qsa": {"QwenSparseAttnBackend"}, "triton": {"TritonAttnBackend"},
    "fa3": {"FlashAttentionBackend"}, "flashinfer": {"FlashInferAttnBackend"},
}

# Helpers that build metadata but are called from forward(), not from init_forward_metadata*.
_NAMED_BUILDER = re.compile(r"^_?(build|make|prepare|attach|compute)_\w*meta")

VERDICTS = ("syncs", "host-mirror", "capture-only", "once", "unreachable", "cannot-tell")


# A guard: (fact, op, value, where, text): `fact` a SpecConfig field or `mirror:<name>` (a
# ForwardBatch host mirror tested against None), `where` the `file:line` of the test.
Guard = tuple


@dataclass(frozen=True)
class Site:
    file: str  # relative to the target root (sglang/...)
    line: int
    function: str  # Class.method or function
    backend: str  # the class (or module stem) the builder belongs to
    call: str  # source text of the call, shortened
    kind: str  # repeat_interleave | item | tolist | cpu | numpy | nonzero | ... | int()
    verdict: str  # one of VERDICTS
    why: str
    syncs: int  # syncs each time the call runs, when it reads a device tensor (else 0); it
    # counts per step only where verdict == "syncs" (not capture-only or unreachable)
    col: int = 0  # column of the call: two calls on one line are two sites
    paths: tuple[str, ...] = ()  # MODES that reach it per step (eager run or graph replay)
    path_class: str = "per-step"  # one of PATH_CLASSES
    # the calls that reach its function, `file:line Caller.qualname`, for each helper up to an
    # entry point (a chain one caller wide at each level, the first reaching caller)
    callers: tuple[str, ...] = ()
    # the configuration / host-mirror tests every path to it passes (`Guard`s), in order
    guards: tuple[Guard, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy() | {"paths": list(self.paths), "callers": list(self.callers),
                                       "guards": [list(g) for g in self.guards]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Site:
        return cls(**(d | {"paths": tuple(d.get("paths", ())),
                           "callers": tuple(d.get("callers", ())),
                           "guards": _tuples(d.get("guards", ()))}))

    def reach(self, modes: set[str] | frozenset[str]) -> str:
        """`reaches` | `not-on-path` | `capture-only` | `unreachable` | `cannot-tell` for a
        configuration whose per-step paths are `modes`."""
        if self.path_class != "per-step":
            return self.path_class
        return "reaches" if set(self.paths) & set(modes) else "not-on-path"


def _tuples(x: Any) -> Any:
    """JSON's lists back to the tuples a guard is made of (a guard's value may nest them:
    per-mode bindings, a disjunction's parts)."""
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


@dataclass
class Census:
    root: str
    files: int = 0
    builders: dict[str, list[str]] = field(default_factory=dict)  # file -> builder qualnames
    sites: list[Site] = field(default_factory=list)
    with_output_size: list[Site] = field(default_factory=list)  # repeat_interleave with it
    errors: list[str] = field(default_factory=list)  # files that did not parse

    def by_backend(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for s in self.sites:
            row = out.setdefault(s.backend, dict.fromkeys(VERDICTS, 0) | {"sync_count": 0})
            row[s.verdict] += 1
            row["sync_count"] += s.syncs if s.verdict == "syncs" else 0
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "files": self.files, "builders": self.builders,
                "sites": [s.to_dict() for s in self.sites],
                "with_output_size": [s.to_dict() for s in self.with_output_size],
                "errors": self.errors}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Census:
        return cls(d["root"], d["files"], {k: list(v) for k, v in d["builders"].items()},
                   [Site.from_dict(s) for s in d["sites"]],
                   [Site.from_dict(s) for s in d["with_output_size"]], list(d["errors"]))

    def syncing(self, backends: set[str] | None = None) -> list[Site]:
        return [s for s in self.sites if s.verdict == "syncs"
                and (backends is None or s.backend in backends)]


def _src(node: ast.AST, limit: int = 90) -> str:
    text = " ".join(_unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _root_name(e: ast.AST) -> str | None:
    while isinstance(e, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(e, ast.Attribute) and e.attr.endswith("_cpu"):
            return e.attr
        e = e.func if isinstance(e, ast.Call) else e.value
    return e.id if isinstance(e, ast.Name) else None
