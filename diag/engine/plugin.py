"""SGLang plugin entry point (`sglang.srt.plugins` group, name `diag`; SGLang 0.5.11+).

SGLang calls `load_plugins()` early in every engine process (the launcher in `Engine`, each
scheduler in `run_scheduler_process`, the detokenizer, the DP controller). It loads every
entry point of the group unless `SGLANG_PLUGINS` is set: then only the names in that comma list
are loaded (`load_plugins_by_group`, checked in 0.5.23's `sglang/srt/plugins/__init__.py`), and
distributions of an unselected `SGLANG_PLATFORM` plugin are skipped. So:

- `SGLANG_PLUGINS` unset or empty: `diag.engine.plugin:load` is called in every engine process;
- `SGLANG_PLUGINS=a,b`: add `diag` to the list (`SGLANG_PLUGINS=a,b,diag`) or it is not loaded.

`load` does nothing unless the `DIAG_*` environment asks for the agent (`DIAG_RUN_DIR`,
`DIAG_FIXES`, `DIAG_PROBES` or `DIAG_AGENT=1`), so installing diag changes no engine by itself.
Called after `sglang.srt.managers.scheduler` is imported, the agent patches the already-loaded
modules at once. The bootstrap (`diag run`) and the plugin may both run in one process: the
agent starts once. Never raises (SGLang would log it and go on anyway).
"""

from __future__ import annotations


def load() -> None:
    try:
        from diag.engine import agent

        if agent.wanted():
            agent.start("plugin")
    except Exception as e:  # never into SGLang's plugin loader
        import logging

        logging.getLogger("diag.agent").warning("diag plugin: %s: %s", type(e).__name__, e)
