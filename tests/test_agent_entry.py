"""How the agent gets into a process: the plugin entry point, the in-process API, fork, and an
unusable run directory (the program must run on, unpatched)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diag.engine import rundir

HERE = Path(__file__).resolve().parent
STANDINS = HERE / "agent_standins"


def _py(code: str, env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    env.update(extra)
    return env


def test_entry_point_declared():
    from importlib.metadata import entry_points

    eps = {e.name: e.value for e in entry_points(group="sglang.srt.plugins")}
    assert eps.get("diag") == "diag.engine.plugin:load"


PLUGIN = ("from importlib.metadata import entry_points\n"
          "ep = [e for e in entry_points(group='sglang.srt.plugins') if e.name == 'diag'][0]\n"
          "ep.load()()\n"
          "from diag.engine import agent\n"
          "a = agent.current()\n"
          "print(json.dumps(None if a is None else {'fixes': a.fix_ids, 'source': a.source}))\n")


def test_plugin_does_nothing_without_diag_env():
    r = _py("import json\n" + PLUGIN, _clean_env())
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) is None


def test_plugin_starts_agent_when_asked(tmp_path):
    d = rundir.create_run_dir(tmp_path / "D")
    r = _py("import json\n" + PLUGIN + "ep.load()()\nprint(agent.current().source)\n",
            _clean_env(DIAG_RUN_DIR=str(d), DIAG_FIXES="profiler-controlled-teardown"))
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert json.loads(first) == {"fixes": ["profiler-controlled-teardown"], "source": "plugin"}
    assert second == "plugin"  # loaded twice (bootstrap + plugin, or two load_plugins): once
    (ps,) = rundir.read_state(d).processes.values()
    assert ps.start["source"] == "plugin"
    assert ps.fixes["profiler-controlled-teardown"]["state"] == "pending"


def test_unsafe_run_dir_program_runs_on(tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    boot = str(Path(__import__("diag.engine.bootstrap", fromlist=["x"]).directory()))
    r = _py("print('ran')", _clean_env(PYTHONPATH=boot, DIAG_RUN_DIR=str(d), DIAG_FIXES="all"))
    assert r.returncode == 0 and r.stdout.strip() == "ran"
    assert "run directory not used" in r.stderr and "lets group/others in" in r.stderr
    assert list(d.iterdir()) == []  # nothing written into a directory others can read


def test_forked_child_writes_its_own_events(tmp_path):
    d = rundir.create_run_dir(tmp_path / "D")
    boot = str(Path(__import__("diag.engine.bootstrap", fromlist=["x"]).directory()))
    code = ("import multiprocessing as mp, os, time\n"
            "from diag import telemetry\n"
            "def child():\n"
            "    telemetry.emit('syncs', builder='child.build', count=2, seconds=0.0)\n"
            "if __name__ == '__main__':\n"
            "    p = mp.get_context('fork').Process(target=child); p.start(); p.join()\n"
            "    telemetry.emit('syncs', builder='parent.build', count=1, seconds=0.0)\n"
            "    print(p.pid)\n")
    r = _py(code, _clean_env(PYTHONPATH=boot, DIAG_RUN_DIR=str(d)))
    assert r.returncode == 0, r.stderr
    child = int(r.stdout)
    st = rundir.read_state(d)
    assert child in st.processes
    assert list(st.processes[child].counters["syncs"]) == ["child.build"]
    assert st.processes[child].ppid in st.processes
    assert list(st.processes[st.processes[child].ppid].counters["syncs"]) == ["parent.build"]


@pytest.fixture
def standin_registry(monkeypatch):
    from diag import fixes

    monkeypatch.syspath_prepend(str(STANDINS))
    monkeypatch.setitem(fixes.REGISTRY, "standin-toggle", "standin_fixes:StandinToggleFix")
    monkeypatch.delenv("DIAG_FIXES", raising=False)
    yield fixes
    fixes._instances.pop("standin-toggle", None)
    sys.modules.pop("standin_scheduler", None)


def test_api_apply_revert_context_manager(standin_registry):
    import standin_scheduler as s

    from diag.engine import api
    from diag.errors import FixError

    assert api.applied() == []
    with api.fixes_applied("standin-toggle") as states:
        assert states == {"standin-toggle": {"state": "applied", "reason": ""}}
        assert s.compute() == "fixed"
        assert api.applied() == ["standin-toggle"]
        assert os.environ["DIAG_FIXES"] == "standin-toggle"  # children started now get it
    assert s.compute() == "plain" and api.applied() == []
    assert "DIAG_FIXES" not in os.environ
    api.apply("standin-toggle")
    assert s.compute() == "fixed"
    api.revert("standin-toggle")
    assert s.compute() == "plain"
    with pytest.raises(FixError, match="unknown fix 'nope'"):
        api.apply("nope")


def test_api_reexports_profiler_context_managers():
    from diag.engine import api

    assert callable(api.controlled_teardown) and callable(api.controlled_profile)


def test_manual_control_waits_for_safe_point(tmp_path):
    """DIAG_CONTROL=manual: requests apply only when the program calls diag.api.safe_point()."""
    d = rundir.create_run_dir(tmp_path / "D")
    boot = str(Path(__import__("diag.engine.bootstrap", fromlist=["x"]).directory()))
    code = ("import os, sys, time\n"
            "import standin_scheduler as s\n"
            "from diag import api\nfrom diag.engine import rundir\n"
            "rid = rundir.request(os.environ['DIAG_RUN_DIR'], 'standin-toggle', 'apply')\n"
            "time.sleep(0.5)\n"
            "before = s.compute()\n"
            "api.safe_point()\n"
            "print(before, s.compute())\n")
    r = _py(code, _clean_env(PYTHONPATH=os.pathsep.join([boot, str(STANDINS)]),
                             DIAG_RUN_DIR=str(d), DIAG_CONTROL="manual",
                             DIAG_CONTROL_POLL="0.05"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["plain", "fixed"]
    (ps,) = rundir.read_state(d).processes.values()
    assert [a["ok"] for a in ps.acks.values()] == [True]
