"""How an engine process died, named by `diag fix status` (diag/engine/last_words.py): real
processes under the real agent (`diag run`), real faulthandler dumps, SGLang's real assertion.

- The SIGSEGV children crash on purpose (a null read through ctypes) inside torch's profiler stop
  (`on_trace_ready`), so the dump holds real torch profiler frames: the crash of issue 29 itself
  (the cyclic GC freeing a stopped profiler) needs a GPU and a real server (the GPU lane's
  `--only crash`).
- SGLang's V2 refusal: the `assert profile_by_stage, ("only support profile_by_stage=true now")`
  statement of 0.5.23 `sglang/srt/utils/profile_utils.py:111` (`ProfileManager.configure`), cut
  out of the release's own file and run with `profile_by_stage=False` (what a plain
  /start_profile passes: io_struct.py:2387 `profile_by_stage: bool = False`), logged as the
  scheduler logs it (managers/scheduler.py:6372 "Scheduler hit an exception: {traceback}").
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap

from diag.engine import last_words, rundir

sys.path.insert(0, os.path.dirname(__file__))
import report_schema  # noqa: E402

DIAG = [sys.executable, "-m", "diag"]

IN_PROFILER_STOP = """
import ctypes, torch
p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                           on_trace_ready=lambda prof: ctypes.string_at(0))
p.start()
torch.ones(4).sum()
p.stop()
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DIAG_") or k == "DIAG_CACHE_DIR"}


def _run(run_dir, code: str, *py_flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([*DIAG, "run", "--run-dir", str(run_dir), "--", sys.executable,
                           *py_flags, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=180, env=_env())


def _status(run_dir, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    t = subprocess.run([*DIAG, "fix", "status", "--run-dir", str(run_dir), *extra],
                       capture_output=True, text=True, timeout=120, env=_env())
    j = subprocess.run([*DIAG, "fix", "status", "--run-dir", str(run_dir), "--json", *extra],
                       capture_output=True, text=True, timeout=120, env=_env())
    assert j.returncode == 0, j.stderr
    doc = json.loads(j.stdout)
    report_schema.check("fix-status-v1.json", doc)
    return t, doc


def _v2_assertion_source(release) -> str:
    """The assert statement of ProfileManager.configure that names profile_by_stage."""
    t = release("0.5.23")
    src = t.file("srt/utils/profile_utils.py").read_text()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Name) \
                and node.test.id == "profile_by_stage":
            assert node.lineno == 111  # where the module docstring cites it
            return ast.get_source_segment(src, node)
    raise AssertionError("no `assert profile_by_stage` in 0.5.23 profile_utils.py")


def test_sigsegv_in_the_profiler_is_named_from_the_agents_file(tmp_path):
    d = tmp_path / "run"
    r = _run(d, IN_PROFILER_STOP)
    assert r.returncode == -11, r.stderr[-2000:]  # diag run execs: the child's own end
    (pid,) = [p for p in rundir.pids_in(d)]
    dump = (d / f"fatal-{pid}.txt").read_text()
    assert "Fatal Python error: Segmentation fault" in dump
    t, doc = _status(d)
    (proc,) = doc["runs"][0]["processes"]
    assert proc["alive"] is False
    death = proc["death"]
    assert death["cause"] == "profiler" and death["signal"] == "SIGSEGV"
    assert death["source"] == f"fatal-{pid}.txt"
    assert any("torch/profiler/profiler.py" in f and f.endswith(" in stop") for f in death["frames"])
    # the text says the same, from the same reading
    assert f"process {pid} died: {death['summary']}" in t.stdout
    assert f"pid {pid} (parent" in t.stdout and " died  " in t.stdout
    assert death["summary"].startswith("SIGSEGV in torch's profiler (")


def test_v2_refusal_logged_by_the_scheduler_is_named(tmp_path, release):
    stmt = _v2_assertion_source(release)
    d = tmp_path / "run"
    code = f"""
    import logging, sys, traceback
    # as SGLang's configure_logger does (0.5.23 utils/common.py:2631): root handlers dropped
    logging.basicConfig(level=logging.INFO, force=True)
    logger = logging.getLogger("sglang.srt.managers.scheduler")
    def configure(profile_by_stage):
    {textwrap.indent(stmt, "    ")}
    try:
        configure(profile_by_stage=False)
    except Exception:
        logger.error(f"Scheduler hit an exception: {{traceback.format_exc()}}")
        sys.exit(1)
    """
    r = _run(d, code)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "AssertionError: only support profile_by_stage=true now" in r.stderr  # the real one
    t, doc = _status(d)
    (proc,) = doc["runs"][0]["processes"]
    death = proc["death"]
    assert death["cause"] == "v2-profiler-refused"
    assert "only support profile_by_stage=true now" in death["summary"]
    assert "profile_utils.py:111" in death["summary"]
    assert "profile_by_stage=true" in death["hint"]
    assert f"died: {death['summary']}" in t.stdout and death["hint"] in t.stdout


def test_a_program_with_its_own_faulthandler_keeps_it_and_the_log_names_the_death(tmp_path):
    # SGLang's scheduler enables faulthandler on stderr itself: the agent leaves that alone, so
    # the dump is in the engine's log, which --log reads (for an engine process only)
    d = tmp_path / "run"
    r = _run(d, IN_PROFILER_STOP, "-X", "faulthandler")
    assert r.returncode == -11
    assert "Fatal Python error: Segmentation fault" in r.stderr
    (pid,) = rundir.pids_in(d)
    assert last_words.read_file(d, pid) == ""  # nothing taken from the program's stderr
    log = tmp_path / "engine.log"
    log.write_text(r.stderr)
    _, doc = _status(d, "--log", str(log))
    assert doc["runs"][0]["processes"][0]["death"] is None  # not an engine process: not blamed
    state = rundir.read_state(d)
    state.processes[pid].engine = True  # as a scheduler is (its per-batch hook ran)
    got = last_words.deaths(state, r.stderr, str(log))[pid]
    assert got.cause == "profiler" and got.source == str(log)


def test_a_clean_exit_leaves_no_death(tmp_path):
    d = tmp_path / "run"
    r = _run(d, "print('ok')")
    assert r.returncode == 0
    _, doc = _status(d)
    assert [p["death"] for p in doc["runs"][0]["processes"]] == [None]


def test_missing_log_is_a_usage_error(tmp_path):
    d = tmp_path / "run"
    _run(d, "pass")
    r = subprocess.run([*DIAG, "fix", "status", "--run-dir", str(d), "--log",
                        str(tmp_path / "nope.log")], capture_output=True, text=True, timeout=60,
                       env=_env())
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_classify_teardown_signature_with_the_gc_line():
    text = ("Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f0000000001 (most "
            "recent call first):\n  Garbage-collecting\n  File \"/x/scheduler.py\", line 9 in "
            "run_batch\n\nExtension modules: torch._C\n"
            "  #3 torch::profiler::impl::ProfilerResult::~ProfilerResult()\n")
    d = last_words.classify(text, "log")
    # the native frame is after the dump's end (Extension modules): not part of this dump
    assert d.cause == "fatal-signal"
    text = text.replace("  File", "  #3 torch::autograd::profiler::ProfilerResult::"
                        "~ProfilerResult()\n  File", 1)
    d = last_words.classify(text, "log")
    assert d.cause == "profiler-teardown"
    assert d.summary == "SIGSEGV in the profiler teardown (cyclic GC freed a stopped profiler)"


def test_the_tui_shows_the_death_fix_status_shows(tmp_path):
    from diag.tui import data
    from diag.tui.fixes_view import engine_text
    from diag.tui.model import Model

    d = tmp_path / "run"
    _run(d, IN_PROFILER_STOP)
    _, doc = _status(d)
    want = doc["runs"][0]["processes"][0]["death"]["summary"]
    state = rundir.read_state(d)
    (pv,) = data.engine_processes(state)
    assert pv.died == want
    m = Model()
    m.engine_procs = [pv]
    assert f"died: {want}" in engine_text(m).plain
    export = data.export_doc(data.Header("t"), [], [], [], [], [], [pv])
    report_schema.check("tui-export-v1.json", json.loads(json.dumps(export, default=str)))
    assert export["engine_processes"][0]["died"] == want


LAUNCHER = '''
import logging, multiprocessing as mp
CHILD = """
import faulthandler, ctypes, torch
faulthandler.enable()  # as SGLang's scheduler does (managers/scheduler.py:6295): on stderr
p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                           on_trace_ready=lambda prof: ctypes.string_at(0))
p.start()
torch.ones(4).sum()
p.stop()
"""
if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, force=True)  # as SGLang's configure_logger
    logger = logging.getLogger("sglang.srt.utils.watchdog")
    proc = mp.get_context("spawn").Process(target=exec, args=(CHILD, {}))
    proc.start()
    proc.join()
    # SGLang 0.5.23 utils/watchdog.py:216-219, word for word
    logger.error(f"Subprocess scheduler_0 (pid={proc.pid}) crashed "
                 f"with exit code {proc.exitcode}. "
                 f"Triggering SIGQUIT for cleanup...")
    print("CHILD", proc.pid, flush=True)
'''


def test_a_child_death_seen_by_sglangs_launcher(tmp_path):
    d = tmp_path / "run"
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    r = subprocess.run([*DIAG, "run", "--run-dir", str(d), "--", sys.executable, str(script)],
                       capture_output=True, text=True, timeout=300, env=_env())
    assert r.returncode == 0, r.stderr[-2000:]
    child = int(r.stdout.split("CHILD")[1].split()[0])
    assert "Fatal Python error: Segmentation fault" in r.stderr  # the child's own dump: stderr
    assert last_words.read_file(d, child) == ""
    t, doc = _status(d)
    procs = {p["pid"]: p for p in doc["runs"][0]["processes"]}
    death = procs[child]["death"]
    assert death["cause"] == "fatal-signal" and death["signal"] == "SIGSEGV"
    assert death["summary"].startswith("SIGSEGV (SGLang's launcher, pid ")
    assert "scheduler_0 end with exit code -11" in death["summary"]
    assert f"process {child} died: SIGSEGV" in t.stdout


def test_a_forked_childs_dump_is_its_own(tmp_path):
    d = tmp_path / "run"
    code = """
    import os, sys
    pid = os.fork()
    if pid == 0:
        import ctypes
        print("CHILD", os.getpid(), flush=True)
        ctypes.string_at(0)
    _, status = os.waitpid(pid, 0)
    sys.exit(0 if os.WIFSIGNALED(status) else 1)
    """
    r = _run(d, code)
    assert r.returncode == 0, r.stderr[-2000:]
    child = int(r.stdout.split("CHILD")[1].split()[0])
    parent = next(p for p in rundir.pids_in(d) if p != child)
    assert "Fatal Python error: Segmentation fault" in last_words.read_file(d, child)
    assert last_words.read_file(d, parent) == ""  # not blamed on the parent
