"""What a probe or fix is evaluated against: target, platform, configuration, live sources."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diag.target import Target

# the counts a configuration holds are sizes and step numbers: a negative one, or one past this,
# is no value a server runs with (SGLang takes any positive integer; its own checks refuse the
# rest at start): a typo or garbage, never taken
MAX_COUNT = 1 << 20


@dataclass
class SpecConfig:
    """The speculative-decoding configuration under audit (from options or a live server).

    Why each field: SGLang resolves at start what a server really runs from these (the model
    family picks the backend class and may force a page size, topk > 1 is refused for some
    families and backends, the environment decides the page size on HIP for some backends,
    parallelism can force eager); None means "not given" (a verdict then says `depends`).
    """

    attention_backend: str | None = None
    draft_attention_backend: str | None = None
    speculative_num_steps: int | None = None
    speculative_algorithm: str | None = None
    disable_cuda_graph: bool = False
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    page_size: int | None = None
    model: str | None = None  # a model path (its config.json is read) or a family/architecture name
    draft_model: str | None = None  # the draft model's path (a server's; its config.json is read)
    environ: dict[str, str] | None = None  # SGLANG_* switches under audit (None: the process's own)
    tp_size: int | None = None
    dp_size: int | None = None
    enable_dp_attention: bool | None = None
    dcp_size: int | None = None
    enable_multi_layer_eagle: bool | None = None  # a server's (some models switch it on)
    # the overlap scheduler and two-batch overlap decide whether decode-side batches carry the
    # host lengths (probes.startup.host_lengths); None: not given
    disable_overlap_schedule: bool | None = None
    enable_two_batch_overlap: bool | None = None
    # adaptive speculation swaps each phase's runner for the active state's at run time
    # (probes.draft_extend_graph.dispatch); None: not given
    speculative_adaptive: bool | None = None
    # the GPU's arch (gcnArchName stem: gfx942 = MI300X/MI325X, gfx950 = MI350/MI355): SGLang's
    # `is_gfx95_supported()` and kin pick kernels and metadata paths by it; a host fact, not a
    # server argument (so not in `_FACTS`); None: not given and no AMD GPU here
    gpu_arch: str | None = None
    # the server's Triton version: on ROCm the DSA page size follows it (aiter's preshuffle paged
    # MQA path); a host fact like gpu_arch; None: not given and not this host's
    triton_version: str | None = None
    source: str = "options"  # "options" | "server"
    # facts not given that the server starts with, filled in for the census's decisions
    # (probes.startup.start_values): (fact, where its value comes from)
    start_values: tuple[tuple[str, str], ...] = ()

    # the fields that describe a configuration (everything but the bookkeeping `source`)
    _FACTS = ("attention_backend", "draft_attention_backend", "speculative_num_steps",
              "speculative_algorithm", "speculative_eagle_topk", "speculative_num_draft_tokens",
              "page_size", "model", "draft_model", "environ", "tp_size", "dp_size",
              "enable_dp_attention", "dcp_size", "enable_multi_layer_eagle",
              "disable_overlap_schedule", "enable_two_batch_overlap", "speculative_adaptive")

    @property
    def given(self) -> bool:
        """The one test of "is a configuration under audit" (any fact given, or graphs off)."""
        return self.disable_cuda_graph or any(getattr(self, f) is not None for f in self._FACTS)

    @classmethod
    def from_server_args(cls, args: dict[str, Any]) -> SpecConfig:
        def num(name: str) -> int | None:  # a count out of any server's range: not taken
            v = args.get(name)
            return v if isinstance(v, int) and not isinstance(v, bool) \
                and 0 <= v <= MAX_COUNT else None

        def text(name: str) -> str | None:  # a name of another type is not taken as one
            v = args.get(name)
            return v if isinstance(v, str) and v else None

        def flag(name: str) -> bool | None:
            v = args.get(name)
            return v if isinstance(v, bool) else None

        dpa = args.get("enable_dp_attention")
        mle = args.get("enable_multi_layer_eagle")
        return cls(
            attention_backend=text("attention_backend"),
            draft_attention_backend=text("speculative_draft_attention_backend")
            or text("speculative_attention_backend"),
            speculative_num_steps=num("speculative_num_steps"),
            speculative_algorithm=text("speculative_algorithm"),
            disable_cuda_graph=args.get("disable_cuda_graph") is True,
            speculative_eagle_topk=num("speculative_eagle_topk"),
            speculative_num_draft_tokens=num("speculative_num_draft_tokens"),
            page_size=num("page_size"),
            model=text("model_path"),
            draft_model=text("speculative_draft_model_path"),
            tp_size=num("tp_size"),
            dp_size=num("dp_size"),
            enable_dp_attention=dpa if isinstance(dpa, bool) else None,
            dcp_size=num("dcp_size"),
            enable_multi_layer_eagle=mle if isinstance(mle, bool) else None,
            disable_overlap_schedule=flag("disable_overlap_schedule"),
            enable_two_batch_overlap=flag("enable_two_batch_overlap"),
            speculative_adaptive=flag("speculative_adaptive"),
            source="server",
        )


@dataclass
class Context:
    target: Target
    platform: str
    config: SpecConfig = field(default_factory=SpecConfig)
    server_url: str | None = None
    run_dir: str | None = None
    execute: bool = True  # run real builders / cheap runtime checks when possible
    full: bool = False  # also the slow parts (e.g. the whole crash reproducer)
    log: Callable[[str], None] = lambda msg: None
    cache: dict[str, Any] = field(default_factory=dict)  # shared per run (e.g. the server info)
