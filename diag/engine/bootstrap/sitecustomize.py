"""diag's bootstrap, first on PYTHONPATH under `diag run`, so it runs in every Python process of
the engine (spawned children are fresh interpreters that run `site` again).

It runs the user's own `sitecustomize` (the next one on sys.path after this directory), then
starts the diag agent only when the `DIAG_*` environment asks for it. It never raises: a failure
is printed as one line on stderr and the process goes on as if diag were not there.
"""

import os
import sys


def _chain_user_sitecustomize(here: str) -> None:
    import importlib.machinery
    import importlib.util

    paths = []
    for p in sys.path:
        try:
            if os.path.realpath(p or os.getcwd()) != here:
                paths.append(p)
        except Exception:
            paths.append(p)
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # what site.py itself does with a failing sitecustomize
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                         f"{type(err).__name__}: {err}\n")


def _start_agent() -> None:
    env = os.environ
    if env.get("DIAG_AGENT") == "0" or not (
            env.get("DIAG_AGENT") == "1" or env.get("DIAG_RUN_DIR") or env.get("DIAG_FIXES")
            or env.get("DIAG_PROBES")):
        return
    import importlib.util

    home = env.get("DIAG_HOME")
    if home and importlib.util.find_spec("diag") is None:
        sys.path.append(home)  # last: never shadows the program's own modules
    from diag.engine import agent

    agent.start("bootstrap")


def _diag_bootstrap() -> None:
    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    try:
        _chain_user_sitecustomize(here)
    except Exception as e:
        sys.stderr.write(f"diag bootstrap: user sitecustomize not run: {type(e).__name__}: {e}\n")
    try:
        _start_agent()
    except Exception as e:
        sys.stderr.write(f"diag bootstrap: agent not started: {type(e).__name__}: {e}\n")


_diag_bootstrap()
del _diag_bootstrap
