"""The values a server starts with for the facts a configuration under audit leaves out.

Why: a server started without `--dcp-size` runs with SGLang's default (1), so a census site
behind `if self.dcp_size > 1:` cannot run there; leaving it `depends` ("dcp_size not given")
made every configured per-phase count an upper bound on releases with decode-context
parallelism (0.5.15+). Likewise the page size a backend reads (`self.page_size == 64`) is the
one SGLang resolves at start (a model or backend may force it over `--page-size`), not the
flag as given. Only a configuration under audit is filled in: with none, the census stays the
release's upper bound over every configuration.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

from diag.context import SpecConfig
from diag.probes.startup.auto_steps import auto_steps
from diag.probes.startup.resolve import (
    IMPLIED_MODEL,
    Model,
    PageSize,
    Where,
    env_of,
    read_model,
    resolve_page_size,
)
from diag.target import Target

# where a release declares its server arguments: the field modules (0.5.20+, `dcp_size: A[int,
# Arg(...)] = 1`, 0.5.23 arg_groups/fields/parallel.py:52-58), else the ServerArgs dataclass
# (0.5.15 - 0.5.19 server_args.py, e.g. 0.5.19 :945-951)
FIELD_FILES = ("srt/arg_groups/fields/parallel.py", "srt/server_args.py")
# where the argument handling may assign one after parsing (hooks, overrides)
HANDLING = ("srt/server_args.py", "srt/arg_groups")
# the integer server arguments whose default decides census guards (census.guards.CONFIG_NAMES)
# and that no release's argument handling sets: `dcp_size` is read, never assigned, by every
# hook of 0.5.15 - 0.5.23 (arg_groups/*.py, server_args.py); checked again per release below
DEFAULTED = ("dcp_size",)
# on HIP the default page size follows this variable (`_page_size_default`)
LAYOUT = "SGLANG_AITER_KV_CACHE_LAYOUT"


def _declared(target: Target, name: str) -> tuple[int, Where] | None:
    """The integer default of server argument `name` where the release declares it."""
    head = re.compile(rf"^    {name}\s*:")
    same = re.compile(r"=\s*(-?\d+)\s*(#.*)?$")
    close = re.compile(r"^    \]\s*=\s*(-?\d+)\s*(#.*)?$")
    for rel in FIELD_FILES:
        path = target.file(rel)
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for i, text in enumerate(lines):
            if not head.match(text):
                continue
            m = same.search(text)
            if m is None and text.rstrip().endswith("["):  # `name: A[ ... ] = 1`
                m = next((c for t in lines[i + 1:i + 40] if (c := close.match(t))), None)
            if m is not None:
                return int(m.group(1)), Where(target.relpath(path), i + 1)
    return None


def _assigned(target: Target, name: str) -> Where | None:
    """The first place the release's argument handling assigns `name` after parsing."""
    rx = re.compile(rf"\.{name}[ \t]*=(?!=)|setattr\([^,\n]+,\s*[\"']{name}[\"']")
    root = target.file(HANDLING[1])
    files = [target.file(HANDLING[0])] + (sorted(root.rglob("*.py")) if root.is_dir() else [])
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if name.encode() not in data:
            continue
        text = data.decode("utf-8", "replace")
        m = rx.search(text)
        if m is not None:
            return Where(target.relpath(path), text.count("\n", 0, m.start()) + 1)
    return None


def _page(target: Target, platform: str, cfg: SpecConfig, model: Model, backend: str | None
          ) -> PageSize | None:
    """The page size SGLang resolves where the model is known (given, or the one family the
    backend serves): a model or backend override wins over --page-size; with neither, the
    default, `_page_size_default` (0.5.23 arg_groups/overrides.py:1341-1363): 1, but 64 on HIP
    under SGLANG_AITER_KV_CACHE_LAYOUT=vectorized_5d, which on HIP is decided only where the
    server's environment is (`--env`, or this process sets the variable). None: not decided."""
    if model.arch is None:  # no model: an override it may bring is unknown
        return None
    page = resolve_page_size(target, platform, cfg, model, env_of(cfg), backend,
                             env_given=cfg.environ is not None)
    if page.value is None:
        return None
    if platform == "hip" and page.why.startswith("default page_size") \
            and cfg.environ is None and LAYOUT not in os.environ:
        return None
    return page


def start_values(target: Target, platform: str, cfg: SpecConfig, backend: str | None
                 ) -> SpecConfig:
    """`cfg` with the facts it leaves out that the release fixes at start filled in (the
    default `dcp_size`; the steps, topk and draft tokens SGLang picks where no steps are given,
    probes.startup.auto_steps), and the page size as SGLang resolves it for `backend`
    (`_page`), each fact's source in `cfg.start_values`. A configuration not under audit, or
    a live server's (its /server_info holds what it resolved), is returned as it is."""
    if not cfg.given or cfg.source == "server":  # a live server's arguments are resolved
        return cfg
    filled: dict[str, int] = {}
    why: list[tuple[str, str]] = []
    for name in DEFAULTED:
        if getattr(cfg, name) is not None:
            continue
        got = _declared(target, name)
        if got is None:  # the release has no such argument: nothing to decide
            continue
        moved = _assigned(target, name)
        if moved is not None:  # the argument handling may change it: not decided here
            continue
        filled[name] = got[0]
        why.append((name, f"not given: SGLang's default {got[0]} ({got[1]})"))
    model = read_model(target, cfg.model or IMPLIED_MODEL.get(backend or ""))
    auto = auto_steps(target, cfg, model)  # no steps given: SGLang's own choice, if it makes one
    if auto is not None and auto.chosen is not None:
        names = ("speculative_num_steps", "speculative_eagle_topk",
                 "speculative_num_draft_tokens")
        filled.update(zip(names, auto.chosen))
        why += [(n, auto.words) for n in names]
        cfg = replace(cfg, **dict(zip(names, auto.chosen)))
    page = _page(target, platform, cfg, model, backend)
    if page is not None and page.value != cfg.page_size:
        filled["page_size"] = page.value
        why.append(("page_size", f"as SGLang resolves it: {page.why}"))
    if not filled:
        return cfg
    return replace(cfg, **filled, start_values=tuple(why))
