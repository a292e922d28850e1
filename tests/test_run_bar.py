"""`diag run` end to end in real subprocess trees (stand-in programs: tests/agent_standins)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STANDINS = HERE / "agent_standins"
DIAG = [sys.executable, "-m", "diag"]
INSTALLED = Path(sys.executable).with_name("diag")

PROG = """
import multiprocessing as mp, os, sys
def child():
    print("child", os.getpid(), flush=True)
if __name__ == "__main__":
    mp.set_start_method("spawn")
    p = mp.Process(target=child)
    p.start(); p.join()
    sys.exit(7 if p.exitcode == 0 else 99)
"""

USER_SITE = """
import os
with open(os.environ["USER_SITE_MARK"], "a") as fh:
    fh.write(f"{os.getpid()}\\n")
"""


def _events(d: Path) -> dict[int, list[dict]]:
    out = {}
    for f in d.glob("events-*.jsonl"):
        evs = [json.loads(line) for line in f.read_text().splitlines()]
        out[evs[0]["pid"]] = evs
    return out


def test_bar_fix_all_spawned_child(tmp_path):
    """The issue's bar: exit code is the program's, D is 0700, events from both processes, the
    user's sitecustomize ran in both, `diag fix status --run-dir D --json` succeeds."""
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "sitecustomize.py").write_text(USER_SITE)
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    mark = tmp_path / "mark"
    d = tmp_path / "D"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "user"), "USER_SITE_MARK": str(mark)}
    env.pop("DIAG_RUN_DIR", None)
    cmd = [str(INSTALLED), "run", "--fix", "all", "--run-dir", str(d), "--",
           sys.executable, str(prog)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 7, r.stderr
    assert f"run directory {d}" in r.stderr
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    child_pid = int(r.stdout.split()[1])
    events = _events(d)
    launcher = [p for p, evs in events.items() if evs[0]["argv"] == [str(prog)]]
    assert len(launcher) == 1 and child_pid in events
    for pid in (launcher[0], child_pid):
        start = events[pid][0]
        assert start["kind"] == "start" and start["pid"] == pid
        assert start["fixes_requested"] == ["draft-extend-allowlist",
                                            "repeat-interleave-output-size",
                                            "profiler-controlled-teardown"]
        # No SGLang in this program: every real fix waits for it, none is applied, no crash.
        assert {s["state"] for s in start["fixes"].values()} == {"pending"}
    assert events[child_pid][0]["ppid"] == launcher[0]
    ran = [int(x) for x in mark.read_text().split()]
    assert launcher[0] in ran and child_pid in ran
    st = subprocess.run([str(INSTALLED), "fix", "status", "--run-dir", str(d), "--json"],
                        capture_output=True, text=True, timeout=60)
    assert st.returncode == 0, st.stderr
    doc = json.loads(st.stdout)
    procs = {p["pid"]: p for p in doc["runs"][0]["processes"]}
    assert {launcher[0], child_pid} <= set(procs)
    assert procs[child_pid]["ppid"] == launcher[0] and procs[child_pid]["alive"] is False
    assert doc["runs"][0]["meta"]["fixes"] == start["fixes_requested"]


def test_signal_and_exit_code_pass_through(tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("import os, signal, sys, time\n"
                    "signal.signal(signal.SIGUSR1, lambda *a: sys.exit(42))\n"
                    "print('ready', flush=True)\n"
                    "time.sleep(60)\n")
    p = subprocess.Popen([*DIAG, "run", "--run-dir", str(tmp_path / "D"), "--",
                          sys.executable, str(prog)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGUSR1)  # same pid: diag exec'd the program
    assert p.wait(timeout=30) == 42
    r = subprocess.run([*DIAG, "run", "--run-dir", str(tmp_path / "D2"), "--", sys.executable,
                        "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
                       capture_output=True, timeout=60)
    assert r.returncode == -signal.SIGTERM


def test_refuses_unsafe_run_dir(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    os.chmod(open_dir, 0o755)
    r = subprocess.run([*DIAG, "run", "--run-dir", str(open_dir), "--", "true"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3
    assert r.stderr.strip().splitlines() == [
        f"diag: error: refusing run directory {open_dir}: mode 0755 lets group/others in "
        "(chmod 700 it)"]
    if os.getuid() == 0:  # only root can give a directory to someone else
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        r = subprocess.run([*DIAG, "run", "--run-dir", str(theirs), "--", "true"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 3 and "owned by uid 65534" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_usage_errors(tmp_path):
    r = subprocess.run([*DIAG, "run", "--fix", "nope", "--run-dir", str(tmp_path / "D"), "--",
                        "true"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown fix 'nope'" in r.stderr
    assert not (tmp_path / "D").exists()
    r = subprocess.run([*DIAG, "run", "--run-dir", str(tmp_path / "D"), "--",
                        str(tmp_path / "no-such-program")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 127 and "cannot run" in r.stderr
    assert not (tmp_path / "D").exists()  # nothing ran: no run directory left behind


def test_user_sitecustomize_error_and_no_agent_without_env(tmp_path):
    """A failing user sitecustomize is reported like Python does and the program still runs;
    with no DIAG_* variables the bootstrap loads nothing of diag."""
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "sitecustomize.py").write_text("raise ValueError('user site broke')\n")
    boot = Path(__import__("diag.engine.bootstrap", fromlist=["x"]).directory())
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(boot), str(tmp_path / "user")])
    r = subprocess.run([sys.executable, "-c",
                        "import sys; print('diag.engine.agent' in sys.modules, 'diag.fixes' in sys.modules)"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert r.stdout.split() == ["False", "False"]
    assert "Error in sitecustomize" in r.stderr and "ValueError: user site broke" in r.stderr


def test_discovery_finds_live_run(tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("import sys, time\nprint('ready', flush=True)\nsys.stdin.readline()\n")
    d = tmp_path / "D"
    p = subprocess.Popen([*DIAG, "run", "--run-dir", str(d), "--", sys.executable, str(prog)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        while not list(d.glob("events-*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.05)
        from diag.engine import rundir

        assert d in rundir.discover()
        st = subprocess.run([*DIAG, "fix", "status", "--json"], capture_output=True, text=True,
                            timeout=60)
        assert st.returncode == 0
        assert str(d) in [r["run_dir"] for r in json.loads(st.stdout)["runs"]]
        env = subprocess.run([*DIAG, "env", "--json"], capture_output=True, text=True,
                             timeout=120)
        assert env.returncode == 0, env.stderr
        runs = {r["run_dir"]: r for r in json.loads(env.stdout)["agent_runs"]}
        assert [p_["pid"] for p_ in runs[str(d)]["processes"]] == [p.pid]
    finally:
        p.communicate("\n", timeout=30)
    assert p.returncode == 0
    from diag.engine import rundir

    assert d not in rundir.discover()


def test_standin_engine_exit_code(tmp_path):
    """The stand-in engine's launcher exit code comes back through diag run."""
    env = {**os.environ, "PYTHONPATH": str(STANDINS)}
    r = subprocess.run([*DIAG, "run", "--run-dir", str(tmp_path / "D"), "--", sys.executable,
                        str(STANDINS / "standin_engine.py"), str(tmp_path / "out"),
                        str(tmp_path / "stop"), "2", "0", "exit=5"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 5, r.stderr
    assert len((tmp_path / "out").read_text().splitlines()) == 2
