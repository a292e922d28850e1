"""The public in-process API (`import diag.api`), for `sglang.Engine` users and notebooks.

It lives on the engine side (`diag.engine.api`); this module keeps the documented import path.
"""

from typing import Any

from diag.engine.api import applied, apply, fixes_applied, revert, safe_point

__all__ = ["applied", "apply", "fixes_applied", "revert", "safe_point"]
# controlled_teardown and controlled_profile come through __getattr__ (from their fix).


def __getattr__(name: str) -> Any:
    from diag.engine import api

    return getattr(api, name)
