"""What a probe or fix is evaluated against: target, platform, configuration, live sources."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diag.target import Target


@dataclass
class SpecConfig:
    """The speculative-decoding configuration under audit (from options or a live server)."""

    attention_backend: str | None = None
    draft_attention_backend: str | None = None
    speculative_num_steps: int | None = None
    speculative_algorithm: str | None = None
    disable_cuda_graph: bool = False
    source: str = "options"  # "options" | "server"

    @property
    def given(self) -> bool:
        return self.attention_backend is not None or self.speculative_num_steps is not None

    @classmethod
    def from_server_args(cls, args: dict[str, Any]) -> SpecConfig:
        steps = args.get("speculative_num_steps")
        return cls(
            attention_backend=args.get("attention_backend"),
            draft_attention_backend=args.get("speculative_draft_attention_backend")
            or args.get("speculative_attention_backend"),
            speculative_num_steps=int(steps) if steps is not None else None,
            speculative_algorithm=args.get("speculative_algorithm"),
            disable_cuda_graph=bool(args.get("disable_cuda_graph", False)),
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
