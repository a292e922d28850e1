"""`diag diagnose` runs the torch probes in one worker process (diag.cli.probe_worker): the
parent never imports torch, and the findings are those of the same probes run in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

# Runs `diag diagnose --json` in this interpreter and prints whether torch got imported here.
_SCRIPT = """
import sys
from diag.cli import main
try:
    main(["diagnose", "--sglang", sys.argv[1], "--json"])
except SystemExit:
    pass
print("TORCH-IN-PARENT", "torch" in sys.modules)
"""


def _diagnose(version: str, worker: bool, *args: str) -> tuple[list[dict], bool]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, DIAG_NO_CACHE="1", DIAG_PROBE_WORKER="1" if worker else "0",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    script = _SCRIPT.replace('"--json"]', '"--json", *sys.argv[2:]]')
    p = subprocess.run([sys.executable, "-c", script, version, *args], capture_output=True,
                       text=True, env=env, timeout=300)
    out, _, last = p.stdout.rpartition("TORCH-IN-PARENT")
    return json.loads(out)["findings"], last.strip() == "True"


def _worker(*probes: str) -> subprocess.Popen:
    """The torch worker for `probes`, started as `diag diagnose` starts it (this tree first on
    the path, nothing cached), its stderr kept apart."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, DIAG_NO_CACHE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    return subprocess.Popen([sys.executable, "-m", "diag.cli.probe_worker", *probes],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)


@pytest.mark.release
def test_worker_and_in_process_runs_agree_and_the_parent_skips_torch(release):
    release("0.5.17")
    remote, torch_in_parent = _diagnose("0.5.17", worker=True)
    assert torch_in_parent is False  # metadata builders and the profiler check ran in the worker
    local, torch_here = _diagnose("0.5.17", worker=False)
    assert torch_here is True

    def key(fs):
        return [(f["probe"], f["status"], f["title"]) for f in fs]

    assert key(remote) == key(local)
    by_probe = {}
    for f in remote:
        by_probe.setdefault(f["probe"], []).append(f)
    # the real builder ran (in the worker): its measured counts are in the evidence
    ms = [e for e in by_probe["metadata-syncs"][0]["evidence"]
          if e.get("kind") == "metric" and "measured syncs per call" in e.get("metric", "")]
    # 0.5.17 deepseek_v4_backend_hip_radix.py:1116: torch.repeat_interleave(..., extend_seq_lens)
    # without output_size, on both paths: two syncs per call
    assert {e["value"] for e in ms} == {2}
    runtime = by_probe["profiler-teardown"][1]
    assert "only gc.collect() frees it" in runtime["summary"]


@pytest.mark.release
def test_a_configured_worker_agrees_with_the_in_process_run(release):
    """With a backend configured the worker computes the configuration's static facts (the
    host-lengths relay, the roles' classes, the forward census) from the head the parent sends
    ahead of the job, while the parent computes the census (`Probe.static_early`): the
    metadata-syncs finding is the in-process one, every metric and row."""
    release("0.5.23")
    args = ("--platform", "hip", "--attention-backend", "aiter", "--speculative-num-steps", "3")
    remote, torch_in_parent = _diagnose("0.5.23", True, *args)
    local, _ = _diagnose("0.5.23", False, *args)
    assert torch_in_parent is False

    def syncs(fs):
        [f] = [f for f in fs if f["probe"] == "metadata-syncs"]
        return [(e.get("kind"), e.get("metric"), e.get("value"), e.get("detail"))
                for e in f["evidence"]]

    got = syncs(remote)
    assert got == syncs(local)
    assert any((m or "").startswith("attention-forward syncs per layer, eager draft-extend")
               for _, m, _, _ in got)


@pytest.mark.release
def test_the_worker_judges_the_fixes_in_its_wait_as_the_parent_would(release):
    """The worker judges every fix's applicability for the head's target, platform and
    configuration while the parent computes the census, and sends it at once
    (`probe_worker._send_resolved`); the parent takes it (`resolved_early`) instead of judging
    them itself. It is the answer `fixes.advice.resolve` gives here, fix by fix; a parent
    whose context is another one gets none (it judges them itself), and the answer that
    follows is the job's, whichever way."""
    import time

    from diag.cli import probe_worker
    from diag.context import Context, SpecConfig
    from diag.fixes.advice import resolve

    target = release("0.5.23")
    cfg = SpecConfig(attention_backend="aiter", speculative_num_steps=3)
    want = resolve(Context(target=target, platform="hip", config=cfg))
    for key_cfg, judged in ((cfg, True), (SpecConfig(attention_backend="triton"), False)):
        proc = _worker("profiler-teardown")
        probe_worker.send_head(proc, probe_worker.Head(target, "hip", cfg))
        time.sleep(12)  # the job comes after the worker's wait (torch imported), as a census would
        got = probe_worker.resolved_early(proc, (target, "hip", key_cfg))
        if judged:
            assert got is not None and set(got) == set(want)
            assert {k: (a.status, a.reason) for k, a in got.items()} == \
                {k: (a.status, a.reason) for k, a in want.items()}
        else:
            assert got is None
        assert probe_worker.send(proc, probe_worker.Job(
            ["profiler-teardown"], target, "hip", cfg, None, None, False, False, False))
        found = probe_worker.collect(proc)
        assert found and {f.probe for f in found} == {"profiler-teardown"}


@pytest.mark.release
def test_the_worker_runs_a_lent_probe_in_its_wait_as_the_parent_would(release):
    """A probe the parent lends (`Head.borrow`: `Probe.runs_early`, no server) runs whole in
    the worker's wait for the census; its findings reach the parent ahead of the answer
    (`borrowed`), the same as `run_probe` here, evidence and all, next to the fixes'
    judgement; another configuration's parent takes none of them (it runs the probe itself).
    """
    import time

    from diag.cli import probe_worker
    from diag.context import Context, SpecConfig
    from diag.probes import get, spec
    from diag.probes.base import run_probe

    assert spec("draft-extend-graph").runs_early
    assert not spec("metadata-syncs").runs_early  # it reads the parent's census
    target = release("0.5.23")
    cfg = SpecConfig(attention_backend="aiter", speculative_num_steps=3)
    want = run_probe(get("draft-extend-graph"), Context(target=target, platform="hip",
                                                        config=cfg))
    proc = _worker("profiler-teardown")
    probe_worker.send_head(proc, probe_worker.Head(target, "hip", cfg, False,
                                                   ("draft-extend-graph",)))
    other = (target, "hip", SpecConfig(attention_backend="triton"))
    got, deadline = None, time.monotonic() + 120
    while got is None and time.monotonic() < deadline:  # as a parent still in its census
        got = probe_worker.borrowed(proc, "draft-extend-graph", (target, "hip", cfg))
        time.sleep(0.2)
    assert got is not None and [f.to_dict() for f in got] == [f.to_dict() for f in want]
    assert probe_worker.borrowed(proc, "draft-extend-graph", other) is None
    assert probe_worker.borrowed(proc, "metadata-syncs", (target, "hip", cfg)) is None
    assert probe_worker.resolved_early(proc, (target, "hip", cfg)) is not None  # sent first
    assert probe_worker.send(proc, probe_worker.Job(
        ["profiler-teardown"], target, "hip", cfg, None, None, False, False, False))
    found = probe_worker.collect(proc)
    assert found and {f.probe for f in found} == {"profiler-teardown"}


def test_a_worker_behind_its_parent_sends_no_judgement_and_its_answer_still_arrives(release):
    """A job that is there before the worker's wait ends (the worker is behind: a slow torch
    import) gets no judgement of the fixes from it: `resolved_early` finds nothing, the parent
    judges them itself, and `collect` takes the answer."""
    from diag.cli import probe_worker
    from diag.context import SpecConfig

    target = release("0.5.23")
    cfg = SpecConfig(attention_backend="aiter", speculative_num_steps=3)
    proc = _worker("profiler-teardown")
    probe_worker.send_head(proc, probe_worker.Head(target, "hip", cfg))
    assert probe_worker.send(proc, probe_worker.Job(
        ["profiler-teardown"], target, "hip", cfg, None, None, False, False, False))
    assert probe_worker.resolved_early(proc, (target, "hip", cfg)) is None  # still importing
    found = probe_worker.collect(proc)
    assert found and {f.probe for f in found} == {"profiler-teardown"}


def test_a_worker_its_parent_gave_up_on_says_nothing():
    """The parent starts the worker before it resolves the target; when the target turns out
    bad (an unreachable index, an unknown release) it gives the worker up, and nothing of the
    worker may reach the user's terminal (CI once saw its EOFError traceback there)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, DIAG_NO_CACHE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    # the parent closed stdin without a job (the worker reads it only once torch is imported)
    p = subprocess.run([sys.executable, "-m", "diag.cli.probe_worker", "metadata-syncs"],
                       input=b"", capture_output=True, env=env, timeout=300)
    assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    # after the head, before the job (the parent failed between the two)
    import pickle

    from diag.cli import probe_worker
    from diag.context import SpecConfig
    from diag.target import Target

    head = pickle.dumps(probe_worker.Head(Target(Path("/nonexistent"), "0", "path"), "hip",
                                          SpecConfig()))
    p = subprocess.run([sys.executable, "-m", "diag.cli.probe_worker", "metadata-syncs"],
                       input=head, capture_output=True, env=env, timeout=300)
    assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    # and through the parent's own stop(), at once and after the worker got going
    for delay in (0.0, 1.5):
        proc = subprocess.Popen([sys.executable, "-m", "diag.cli.probe_worker", "metadata-syncs"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env)
        if delay:
            import time

            time.sleep(delay)
        probe_worker.stop(proc)
        assert proc.stderr.read() == b""


# Which probes `diag diagnose` would hand to a torch worker, asked of the registry in a fresh
# interpreter (this one has torch imported already, which makes the answer "none").
_WANTED = """
from diag.cli import _worker_probes
from diag.probes import specs
print(sorted(_worker_probes(True, [s.id for s in specs() if s.needs_torch])))
"""
_WARM = """
from diag.probes.profiler_teardown import cycle as pt
pt.store_cycle(pt.runtime_cycle(lean=True))
"""


def test_a_warm_run_starts_no_worker_as_the_probes_declare(tmp_path):
    """The worker is skipped when every probe that can tell (`Probe.measured_already`) says its
    measurement is cached: here the profiler cycle check, once stored in an empty cache."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k not in ("DIAG_NO_CACHE", "DIAG_PROBE_WORKER")}
    env.update(DIAG_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))

    def run(code: str) -> str:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, timeout=300)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    assert run(_WANTED) == "['metadata-syncs', 'profiler-teardown']"  # cold: both, in the worker
    run(_WARM)
    assert run(_WANTED) == "[]"


@pytest.mark.release
def test_diagnose_pauses_the_collector_and_gives_it_back(release):
    """The parent of `diag diagnose` runs with the cyclic GC paused (it only reads sources;
    their trees stay cached to the exit); a probe that runs torch there gets the collector
    back as the process had it, and the caller has it back after the command."""
    import gc

    from click.testing import CliRunner

    from diag import cli
    from diag.probes import get

    seen = {}
    real = cli._run_probes

    def spy(ctx, ids, verbose, worker=None):
        seen["paused"] = not gc.isenabled()
        with cli._collector_for(get("profiler-teardown")):
            seen["torch probe"] = gc.isenabled()
        with cli._collector_for(get("draft-extend-graph")):
            seen["source probe"] = gc.isenabled()
        return real(ctx, ids, verbose, worker)

    release("0.5.17")
    assert gc.isenabled()
    cli._run_probes = spy
    try:
        CliRunner().invoke(cli.main, ["probe", "draft-extend-graph", "--sglang", "0.5.17",
                                      "--no-execute", "--json"])
    finally:
        cli._run_probes = real
        if gc.get_freeze_count():
            gc.unfreeze()
    assert seen == {"paused": True, "torch probe": True, "source probe": False}
    assert gc.isenabled()


@pytest.mark.release
@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH is new in Python 3.11")
def test_a_stray_module_in_the_working_folder_does_not_reach_the_worker(release, tmp_path):
    """`python -m` puts the working folder first on the worker's path: a user's `timeit.py`
    (torch imports timeit) would break its torch import. The worker starts with PYTHONSAFEPATH,
    so its probes run as they do from any other folder."""
    release("0.5.17")
    (tmp_path / "timeit.py").write_text("raise SystemExit('a stray timeit.py was imported')\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, DIAG_NO_CACHE="1", DIAG_PROBE_WORKER="1",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, "-c", _SCRIPT, "0.5.17"], capture_output=True,
                       text=True, env=env, timeout=300, cwd=tmp_path)
    out, _, last = p.stdout.rpartition("TORCH-IN-PARENT")
    assert last.strip() == "False", p.stderr[-2000:]  # the worker, not the parent, ran torch
    findings = json.loads(out)["findings"]
    ms = [e for f in findings if f["probe"] == "metadata-syncs" for e in f["evidence"]
          if e.get("kind") == "metric" and "measured syncs per call" in e.get("metric", "")]
    assert {e["value"] for e in ms} == {2}  # the builder ran in the worker, as in the test above


_SUBREAPER = """
import ctypes, os, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER: orphans come here, none reaped
    print("NO-SUBREAPER"); sys.exit(0)
p = subprocess.run([sys.executable, "-m", "diag", "diagnose", "--sglang", sys.argv[1]],
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
time.sleep(1.0)  # a worker left behind would have exited by now, unreaped
ps = subprocess.run(["ps", "-o", "stat=,args=", "--ppid", str(os.getpid())],
                    capture_output=True, text=True).stdout
print("RC", p.returncode, "ADOPTED", [l for l in ps.splitlines() if l.startswith("Z")])
"""


@pytest.mark.release
def test_the_worker_is_reaped_before_diagnose_ends(release):
    """The parent takes the worker's answer without waiting for its exit, but waits for it
    before the process ends: in a container whose PID 1 reaps nothing (`tail -f /dev/null`, a
    Python entry point), a worker left behind would stay a zombie. Here a subreaper that reaps
    nothing stands for that PID 1 (Linux `prctl`); before the join, one zombie came to it on
    each diagnose."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_CHILD_SUBREAPER is Linux's")
    release("0.5.23")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, DIAG_NO_CACHE="1", DIAG_PROBE_WORKER="1",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, "-c", _SUBREAPER, "0.5.23"], capture_output=True,
                       text=True, env=env, timeout=300)
    assert "NO-SUBREAPER" not in p.stdout
    assert "RC 0 ADOPTED []" in p.stdout, (p.stdout, p.stderr[-2000:])
