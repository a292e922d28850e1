"""The header: target, platform, GPU, and the live figures beside them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diag.errors import DiagError
from diag.tui.data.common import NA

# ---------------------------------------------------------------- header: target, platform, GPU


@dataclass
class Header:
    target: str = "resolving…"
    version: Any = NA
    platform: Any = NA
    gpu: Any = NA
    error: str | None = None
    sources: dict[str, str] = field(default_factory=dict)  # release | platform | config → from
    gpu_arch: str | None = None  # the AMD arch the audit decides by (hip only), shown beside it


def gpu_text() -> str:
    """The local GPU(s) as torch sees them (imports torch: call from a worker)."""
    from diag.gpu_platform import torch_info

    info = torch_info()
    if not info.present:
        return f"no torch ({info.error})" if info.error else "no torch"
    if info.devices:
        return f"{', '.join(info.devices)} (torch {info.version}, {info.runtime})"
    return f"none (torch {info.version}, CPU)"


def resolve_context(sglang: str | None, platform: str | None, run_dir: str | None,
                    server_url: str | None, execute: bool, log: Callable[[str], None],
                    config: dict[str, Any] | None = None):
    """(Context, Header) for the target; raises DiagError when the target cannot be had.

    `config` holds the configuration options `diag diagnose` takes (SpecConfig's fields:
    attention_backend, speculative_eagle_topk, page_size, model, environ, ...). With a run
    directory and/or a server, what the options do not give is the engine's own
    (`diag.engine.facts`, as `diag fix list`)."""
    from diag.context import Context, SpecConfig
    from diag.target import resolve

    cfg = SpecConfig(**{k: v for k, v in (config or {}).items() if v is not None})
    info, server_error = None, None
    if server_url:
        from diag import server
        from diag.errors import ServerError

        try:
            info = server.get_server_info(server_url, timeout=2.0)
        except ServerError as e:  # unreachable: the probes say so; the header shows the state
            server_error = str(e)
    sources: dict[str, str] = {}
    if run_dir or info is not None:
        from diag.engine.facts import resolve as engine_facts

        res = engine_facts(sglang, platform, cfg, run_dir, info, server_url)
        sglang, platform, sources = res.sglang, res.platform, res.sources
    try:
        tgt = resolve(sglang, log=log)
    except DiagError as e:
        if sglang is None or sources.get("release", "--sglang") == "--sglang":
            raise
        sources["release"] = f"{sources['release']}, not available here ({e}): the default"
        tgt = resolve(None, log=log)
    if platform is None:
        from diag.gpu_platform import default_platform

        platform = default_platform()
        if run_dir or server_url:
            sources["platform"] = "this machine's torch (the engine recorded none)"
    from diag.gpu_platform import fill_host_facts

    fill_host_facts(cfg, platform, server_url)  # as `diag diagnose` does
    ctx = Context(target=tgt, platform=platform, config=cfg, server_url=server_url,
                  run_dir=run_dir, execute=execute, log=log)
    ctx.cache["sources"] = sources
    if info is not None:
        ctx.cache["server_info"] = info
    if server_error:
        ctx.cache["server_error"] = server_error
    elif server_url:  # the configuration from /server_info, as `diag diagnose --server` takes it
        from diag import server
        from diag.errors import ServerError

        try:
            server.attach(ctx, timeout=2.0)
        except ServerError as e:
            ctx.cache["server_error"] = str(e)
    head = Header(target=f"sglang {tgt.version or '?'} [{tgt.origin}]", version=tgt.version or NA,
                  platform=platform, sources=sources,
                  gpu_arch=cfg.gpu_arch if platform == "hip" and cfg.gpu_arch else None)
    return ctx, head


def live_figures(state: Any, server_url: str | None, families: list | None,
                 info: Any = None) -> Any:
    """The engine's live figures (`diag.engine.live`, what `diag fix status` prints): a run
    directory's engine processes pooled, with the server's accept length and per-token time
    when there is a server too; else the server's own diag_* series; None when none counted."""
    from diag.engine import live

    speed = live.speed(server_url, info, families) if server_url else None
    if state is not None:
        return live.of_run(state, speed)
    if server_url and families is not None:
        return live.of_families(server_url, families, info)
    return None
