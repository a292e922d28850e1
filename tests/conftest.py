"""Shared test set-up: real SGLang releases (downloaded once with pip, cached), GPU marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from diag.target import Target

# The releases the suite runs against: one before #29202 (0.5.17: `_stop_profile` of
# srt/managers/scheduler_components/profiler_manager.py has no gc.collect()), the first with it
# (0.5.18: gc.collect() at :385, `supports_hip_draft_extend_graph` in
# srt/speculative/eagle_worker_v2.py:403), the one that added DSA to the gate (0.5.19,
# eagle_worker_v2.py:429), and the newest. Others are fetched by tests that need them.
RELEASES = ("0.5.9", "0.5.12.post1", "0.5.17", "0.5.18", "0.5.19", "0.5.23")
NEWEST = "0.5.23"

# Keep the cache across CI runs on the same machine; tests never write into it by hand.
os.environ.setdefault("DIAG_CACHE_DIR", str(Path.home() / ".cache" / "diag"))


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _sigterm(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


def pytest_configure(config):
    """A SIGTERM (a CI timeout, `kill`) ends the run as Ctrl-C does, so the session's fixtures
    tear down: the real SGLang servers the engine tests start are stopped, not orphaned (a
    killed run left one serving for 78 minutes, 2026-12-06)."""
    import signal

    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm)


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a GPU (CUDA or ROCm torch with a device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


_targets: dict[str, Target] = {}


def release_target(version: str) -> Target:
    """A real SGLang release tree (pip download sglang==X --no-deps, unpacked, cached)."""
    from diag.target import from_release

    if version not in _targets:
        _targets[version] = from_release(version)
    return _targets[version]


@pytest.fixture(scope="session")
def release():
    """`release("0.5.17")` → Target of that real release."""
    return release_target


# diag's runtime dependencies that the CLI paths under test import (textual only for the TUI).
_RUNTIME_DEPS = ("click", "psutil", "packaging", "prometheus_client", "wrapt", "ijson")


@pytest.fixture(scope="session")
def notorch_python(tmp_path_factory) -> Path:
    """The python of a real virtualenv without torch (and without SGLang), built once a session.

    Why not pip: resolving the index takes half a minute on a loaded machine. The venv is made
    with `venv --without-pip`; diag's runtime dependencies are linked from this test
    environment's site-packages (the same installed packages), and this checkout is on its path
    through a `.pth` file, as an editable install puts it."""
    import importlib.util
    import subprocess
    import sys
    import sysconfig

    root = tmp_path_factory.mktemp("notorch") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    py = root / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], check=True, capture_output=True,
                               text=True).stdout.strip())
    here = Path(sysconfig.get_paths()["purelib"])
    for dep in _RUNTIME_DEPS:
        spec = importlib.util.find_spec(dep)
        assert spec is not None and spec.origin, f"{dep} is not installed in the test venv"
        pkg = Path(spec.origin).parent
        (site / pkg.name).symlink_to(pkg)
        for dist in here.glob(f"{dep.replace('_', '[-_]')}-*.dist-info"):
            (site / dist.name).symlink_to(dist)
    (site / "diag_checkout.pth").write_text(str(Path(__file__).resolve().parent.parent) + "\n")
    check = subprocess.run([str(py), "-c", "import importlib.util as u; import diag.cli; "
                            "print(u.find_spec('torch'), u.find_spec('sglang'))"],
                           capture_output=True, text=True, env=_without_pythonpath())
    assert check.stdout.split() == ["None", "None"], check.stdout + check.stderr
    return py


def _without_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(autouse=True)
def _unfrozen_gc():
    """`diag diagnose` calls `gc.freeze()` as it exits (diag.cli._emit); a test that runs the CLI
    in this process would leave the whole heap frozen for the tests after it, which then measure
    collections over a few hundred objects (test_profiler_runtime counts the tracked objects)."""
    yield
    import gc

    if gc.get_freeze_count():
        gc.unfreeze()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The engine lane's tiny models (tests/engine_models.py), made once per module by the SGLang
    environment's python; skips where that environment is absent."""
    import engine_models
    import engine_server

    why = engine_server.missing_env()
    if why:
        pytest.skip(why)
    made = engine_models.in_env(engine_server.VENV_PY, "make", tmp_path_factory.mktemp("models"), 0)
    return {k: Path(v) for k, v in made.items()}

