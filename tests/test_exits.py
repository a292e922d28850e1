"""Honest exits: every command's options checked where they are parsed (2), the machine's
errors mapped to their documented codes (3, 141), never 0 for input that is not what it claims
and never 70 (a bug) for an ordinary error; and the quick start's first screen a person can read.

Real parts: real SGLang release trees (0.5.17, 0.5.23), real `diag` processes for stdout (a pipe
whose reader leaves, a closed fd 1, /dev/full), a stand-in HTTP server that is not SGLang.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import test_fleet_cli
from click.testing import CliRunner
from standin_sglang_server import StandinSGLangServer, free_port
from test_bad_input import _env as bad_input_env

from diag.cli import main

DIAG = str(Path(sys.executable).with_name("diag"))
TRACEBACK_MARKS = ("Traceback", "Exception ignored", "internal error")


def _env(**extra: str | None) -> dict[str, str]:
    """test_bad_input's environment, with the terminal width unset unless a test sets it."""
    return bad_input_env(**{"COLUMNS": None, **extra})


# (argv, exit code, text the one error message holds). Expected texts are what the options
# promise (docs/commands.md, docs/exit-codes.md); release facts from the sources: 0.5.17 registers
# no `qsa` (first in 0.5.20, srt/layers/attention/attention_registry.py:146), 0.5.23 registers
# dsv4 and qsa (:177, :157).
def _cases(tmp: Path) -> list[tuple[list[str], int, str]]:
    missing = str(tmp / "no-such-dir")
    return [
        # diagnose: --server
        (["diagnose", "--server", ""], 2, "empty URL"),
        (["diagnose", "--server", "   "], 2, "empty URL"),
        (["diagnose", "--server", "http://h:abc"], 2, "port must be a number from 1 to 65535"),
        (["diagnose", "--server", "http://127.0.0.1:99999"], 2, "from 1 to 65535"),
        (["diagnose", "--server", "http://127.0.0.1:0"], 2, "from 1 to 65535"),
        (["diagnose", "--server", "http://a host:30000"], 2, "contains a space"),
        (["diagnose", "--server", "ftp://127.0.0.1:21"], 2, "scheme ftp:// is not http"),
        (["diagnose", "--server", "http://:30000"], 2, "no host"),
        # diagnose: the configuration under audit
        (["diagnose", "--attention-backend", ""], 2, "'' is not a name"),
        (["diagnose", "--attention-backend", "ds v4"], 2, "is not a name"),
        (["diagnose", "--sglang", "0.5.23", "--attention-backend", "nonsense"], 2,
         "sglang 0.5.23 has no such attention backend (known: aiter, "),
        (["diagnose", "--sglang", "0.5.17", "--platform", "hip", "--attention-backend", "qsa"],
         2, "sglang 0.5.17 has no such attention backend"),
        (["diagnose", "--sglang", "0.5.23", "--speculative-algorithm", "nonsense"], 2,
         "not a builtin algorithm of sglang 0.5.23 (known: "),
        (["diagnose", "--speculative-algorithm", ""], 2, "is not a name"),
        (["diagnose", "--speculative-num-steps", "1000000"], 2, "1000000 is not in the range"),
        (["diagnose", "--speculative-num-steps", "0"], 2, "0 is not in the range"),
        (["diagnose", "--speculative-num-steps", "three"], 2, "'three' is not a valid integer"),
        (["diagnose", "--fail-on", "maybe"], 2, "'maybe' is not one of 'warn', 'fail'"),
        (["diagnose", "--platform", "rocm"], 2, "'rocm' is not one of 'hip', 'cuda'"),
        (["diagnose", "--sglang", "banana"], 2, "neither an existing path nor a release"),
        (["diagnose", "--sglang", missing], 3, "no such file or directory"),
        (["diagnose", "--run-dir", missing], 3, f"run directory {missing} does not exist"),
        # probe
        (["probe", "--list", "extra"], 2, "--list takes no PROBE_ID (got 'extra')"),
        (["probe", "nope"], 2, "unknown probe 'nope'"),
        (["probe", "draft-extend-graph", "--server", "ftp://x"], 2, "scheme ftp://"),
        # fix
        (["fix", "apply", "draft-extend-allowlist", "--pid", "5"], 2, "give --run-dir DIR too"),
        (["fix", "revert", "draft-extend-allowlist", "--pid", "5"], 2, "give --run-dir"),
        (["fix", "apply", "draft-extend-allowlist", "--pid", "0"], 2, "0 is not in the range"),
        (["fix", "apply", "draft-extend-allowlist", "--timeout", "-1"], 2,
         "-1.0 is not in the range 0<x<=86400"),
        # every number: nan and inf compare false with every bound (a wait that never ends),
        # huge ones overflow a sleep
        (["fix", "apply", "draft-extend-allowlist", "--run-dir", str(tmp), "--timeout", "nan"],
         2, "'nan' is not a finite number of seconds"),
        (["fix", "revert", "draft-extend-allowlist", "--timeout", "inf"], 2,
         "'inf' is not a finite number of seconds"),
        (["fix", "apply", "draft-extend-allowlist", "--timeout", "1e300"], 2,
         "is not in the range 0<x<=86400"),
        (["fix", "apply", "draft-extend-allowlist", "--run-dir", str(tmp), "--pid",
          "99999999999999999999"], 2, "is not in the range 1<=x<=4194304"),
        (["tui", "--poll", "nan"], 2, "'nan' is not a finite number of seconds"),
        (["tui", "--poll", "1e300"], 2, "is not in the range 0.25<=x<=3600"),
        (["tui", "--once", "--width", "99999999999"], 2, "is not in the range 40<=x<=10000"),
        (["fleet", "--prometheus", "http://127.0.0.1:9", "--timeout", "-inf"], 2,
         "'-inf' is not a finite number of seconds"),
        (["bench", "--param", "heap_objects=100000000000"], 2,
         "--param heap_objects='100000000000': must be <= 5e+07"),
        (["bench", "--param", "queue_ms=nan"], 2, "expected a finite number"),
        (["bench", "--param", "cycles=1e400"], 2, "expected an integer"),
        # every id, path and version: empty is not "the default"
        (["fix", "apply", "", "--run-dir", str(tmp)], 2, "Invalid value for 'ID': '' is empty"),
        (["fix", "revert", " ", "--run-dir", str(tmp)], 2, "' ' is empty"),
        (["fix", "check", "--require", ""], 2, "Invalid value for '--require': '' is empty"),
        (["fix", "check", "--python", ""], 2, "Invalid value for '--python': '' is empty"),
        (["fix", "status", "--run-dir", ""], 2, "Invalid value for '--run-dir': '' is empty"),
        (["diagnose", "--run-dir", ""], 2, "Invalid value for '--run-dir': '' is empty"),
        (["diagnose", "--sglang", ""], 2, "Invalid value for '--sglang': '' is empty"),
        (["bench", "--sglang", " "], 2, "Invalid value for '--sglang': ' ' is empty"),
        (["env", "--sglang", ""], 2, "Invalid value for '--sglang': '' is empty"),
        (["tui", "--once", "--run-dir", ""], 2, "Invalid value for '--run-dir': '' is empty"),
        (["tui", "--once", "--export", ""], 2, "Invalid value for '--export': '' is empty"),
        (["run", "--fix", "", "--", "true"], 2, "--fix '': an empty id"),
        (["run", "--fix", "draft-extend-allowlist,,x", "--", "true"], 2, "an empty id"),
        (["run", "--probe", " ", "--", "true"], 2, "--probe ' ': an empty id"),
        (["run", "--run-dir", "", "--", "true"], 2, "Invalid value for '--run-dir': '' is empty"),
        (["run", "--", ""], 127, "the command to run is an empty string"),
        (["fix", "revert", "draft-extend-allowlist", "--timeout", "0"], 2, "not in the range"),
        (["fix", "apply", "nope"], 2, "unknown fix 'nope'"),
        (["fix", "list", "--server", "http://h:65536"], 2, "from 1 to 65535"),
        (["fix", "list", "--speculative-num-steps", "-2"], 2, "not in the range"),
        (["fix", "check", "--require", "nope"], 2, "unknown fix 'nope'"),
        (["fix", "check", "--python", str(tmp / "no-python")], 2, "no such interpreter"),
        (["fix", "status", "--run-dir", missing], 3, "does not exist"),
        # bench: each --param by the bench that declares it, --out before any work
        (["bench", "--param", "heap_objects=-5"], 2,
         "--param heap_objects='-5': must be >= 0 (the bench of profiler-controlled-teardown)"),
        (["bench", "--param", "heap_objects=abc"], 2,
         "--param heap_objects='abc': expected an integer >= 0 (the bench of "
         "profiler-controlled-teardown)"),
        (["bench", "--param", "queue_ms=-1"], 2, "(the bench of repeat-interleave-output-size)"),
        (["bench", "--param", "layers=0"], 2, "(the bench of draft-extend-allowlist)"),
        (["bench", "--param", "preset=huge"], 2, "expected one of"),
        (["bench", "--param", "nope=1"], 2, "--param nope: no selected bench takes it"),
        (["bench", "profiler-controlled-teardown", "--param", "layers=3"], 2,
         "no selected bench takes it (profiler-controlled-teardown: cycles,"),
        (["bench", "--param", "novalue"], 2, "expected KEY=VALUE"),
        (["bench", "--out", str(tmp / "no-such-dir" / "b.json")], 2, "does not exist"),
        (["bench", "--out", str(tmp)], 2, "is a directory, not a file"),
        (["bench", "nope"], 2, "unknown fix 'nope'"),
        # tui
        (["tui", "--once", "--run-dir", missing], 3, "does not exist"),
        (["tui", "--once", "--server", "ftp://x"], 2, "scheme ftp://"),
        (["tui", "--once", "--width", "10"], 2, "10 is not in the range 40<=x<=10000"),
        (["tui", "--poll", "0"], 2, "0.0 is not in the range 0.25<=x<=3600"),
        # fleet
        (["fleet", "--prometheus", "ftp://x"], 2, "is not an http(s) URL"),
        (["fleet", "--prometheus", "http://127.0.0.1:9", "--window", "abc"], 2,
         "is not a duration"),
        (["fleet", "--prometheus", "http://127.0.0.1:9", "--timeout", "0"], 2, "not in the range"),
        # trace
        (["trace", missing], 3, "no such file"),
        (["trace", str(tmp), "--max-captured-bs", "0"], 2, "not in the range x>=1"),
        (["trace", str(tmp), "--kill-switch"], 2, "give --attention-backend too"),
        (["trace", str(tmp / "no-such-dir" / "x.json.gz")], 3, "no such file"),
        (["trace", "--tui"], 2, "No such option '--tui'"),
        # run, env
        (["run", "--fix", "nope", "--", "true"], 2, "unknown fix 'nope'"),
        (["run", "--probe", "nope", "--", "true"], 2, "unknown runtime counter 'nope'"),
        (["run"], 2, "Missing argument 'CMD...'"),
        (["env", "--bogus"], 2, "No such option '--bogus'"),
    ]


@pytest.mark.release
def test_bad_input_every_command(release, tmp_path):
    """Each case: its documented exit code, its message in one line, no traceback."""
    release("0.5.17")
    release("0.5.23")
    failures = []
    for argv, code, text in _cases(tmp_path):
        r = CliRunner().invoke(main, argv, catch_exceptions=False)
        err = r.stderr
        if r.exit_code != code or text not in err or any(m in err for m in TRACEBACK_MARKS):
            failures.append((argv, r.exit_code, code, text, err[-400:]))
            continue
        if err.startswith("diag: error: ") or "\ndiag: error: " in err:  # DiagError: one line
            lines = [ln for ln in err.splitlines() if ln.startswith("diag: error:")]
            if len(lines) != 1 or text not in lines[0]:
                failures.append((argv, "not one line", err))
    assert not failures, "\n".join(map(repr, failures))


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, env=_env(),
                          cwd="/", **kw)


@pytest.mark.release
def test_server_that_is_not_sglang_is_exit_3(release):
    release("0.5.23")
    base = ["diagnose", "--sglang", "0.5.23", "--platform", "hip", "--no-execute", "--server"]
    with StandinSGLangServer() as s:  # answers HTTP, serves neither /server_info nor the old path
        r = CliRunner().invoke(main, [*base, s.url], catch_exceptions=False)
        assert r.exit_code == 3, r.output
        assert f"{s.url} is not an SGLang server: /server_info and /get_server_info answer " \
               "HTTP 404" in r.stderr
        s.text("/server_info", "<html>hello</html>", ctype="text/html")
        r = CliRunner().invoke(main, [*base, s.url, "--json"], catch_exceptions=False)
        assert r.exit_code == 3 and "/server_info is not JSON" in r.stderr, r.output
        assert r.stdout == ""
    r = CliRunner().invoke(main, [*base, f"http://127.0.0.1:{free_port()}"],
                           catch_exceptions=False)
    assert r.exit_code == 3 and "cannot connect" in r.stderr


def test_broken_tree_that_still_parses_is_a_target_error(release, tmp_path):
    """A tree without the attention package, or whose worker lost its classes: exit 3 with
    the path, not a `warn` "gate not recognised"."""
    real = release("0.5.23").root / "sglang"
    root = tmp_path / "tree"
    spec = root / "sglang" / "srt" / "speculative"
    spec.mkdir(parents=True)
    for name in ("eagle_worker_v2.py", "draft_utils.py"):
        (spec / name).write_text((real / "srt" / "speculative" / name).read_text())
    r = CliRunner().invoke(main, ["probe", "draft-extend-graph", "--sglang", str(root),
                                  "--platform", "hip"], catch_exceptions=False)
    assert r.exit_code == 3, r.output
    attn = root / "sglang" / "srt" / "layers" / "attention"
    assert r.stderr.strip() == (f"diag: error: {attn}: missing: not a complete SGLang tree "
                                "(every release has this package); reinstall it or pass "
                                "--sglang VERSION")
    attn.parent.mkdir(parents=True)
    attn.symlink_to(real / "srt" / "layers" / "attention")
    worker = spec / "eagle_worker_v2.py"
    worker.write_text("# the worker classes and the gate are gone\nX = 1\n")
    r = CliRunner().invoke(main, ["probe", "draft-extend-graph", "--sglang", str(root),
                                  "--platform", "hip", "--json"], catch_exceptions=False)
    assert r.exit_code == 3 and r.stdout == "", r.output
    assert f"{worker}: no class EagleDraftWorker or EAGLEWorkerV2 in it" in r.stderr
    # issue 31, defect 6: a symlink loop in the user's tree was "probe crashed ... report it"
    worker.unlink()
    worker.symlink_to(worker.name)  # a link to itself: ELOOP on every read
    r = CliRunner().invoke(main, ["diagnose", "--sglang", str(root), "--platform", "hip",
                                  "--no-execute"], catch_exceptions=False)
    assert r.exit_code == 3, r.output
    assert r.stderr.strip() == (f"diag: error: {worker}: a symbolic link that leads nowhere (a "
                                "loop, or its target is gone): not a readable SGLang tree; fix "
                                "the link or pass --sglang VERSION")


# ------------------------------------------------------------------------------ stdout


def test_stdout_closed_before_the_start_is_141():
    p = _run(["bash", "-c", f'"{DIAG}" env >&-; echo "rc=$?"'])
    assert p.stdout.strip() == "rc=141", (p.stdout, p.stderr)
    assert not any(m in p.stderr for m in TRACEBACK_MARKS), p.stderr


@pytest.mark.release
def test_pipe_closed_mid_report_is_141(release):
    """The reader takes 10 bytes of a report larger than a pipe's buffer (64 KiB) and leaves:
    the rest cannot arrive, so the exit is 141, not 0."""
    release("0.5.23")
    r, w = os.pipe()
    proc = subprocess.Popen([DIAG, "diagnose", "--sglang", "0.5.23", "--platform", "hip",
                             "--no-execute", "--json"], stdout=w, stderr=subprocess.PIPE,
                            env=_env(), cwd="/")
    os.close(w)
    try:
        assert len(os.read(r, 10)) == 10
    finally:
        os.close(r)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 141, err
    assert not any(m in err.decode() for m in TRACEBACK_MARKS), err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_report_to_a_full_disk_is_exit_3():
    p = _run(["bash", "-c", f'"{DIAG}" probe --list > /dev/full'])
    assert p.returncode == 3, p.stderr
    assert p.stderr.strip() == "diag: error: No space left on device (writing the output)"


# ------------------------------------------------------------------------------ garbage


def test_garbage_in_a_run_dir_never_prints_none(tmp_path):
    d = tmp_path / "run"
    d.mkdir(mode=0o700)
    (d / "run.json").write_text("[1, 2]\n")  # not an object
    (d / "events-4242.jsonl").write_text(
        'garbage\n{"kind": "start", "pid": 4242, "ppid": null, "argv": null}\n'
        '{"kind": "fix", "fix": "draft-extend-allowlist", "state": null}\n')
    r = CliRunner().invoke(main, ["fix", "status", "--run-dir", str(d)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "None" not in r.stdout, r.stdout
    assert "pid 4242 (parent ?)" in r.stdout


# ------------------------------------------------------------------------------ quick start


@pytest.mark.release
@pytest.mark.parametrize("columns", ["80", "100", None])
def test_quick_start_first_screen(notorch_python, release, columns):
    """`diag diagnose` with no torch, no sglang, no configuration (the README's quick start):
    no line wider than COLUMNS (100 when unset and not a terminal), the counts add up, a word
    on torch for the skipped measured checks, advice that fits 0.5.23, a final verdict."""
    release("0.5.23")
    width = int(columns or 100)
    p = subprocess.run([str(notorch_python), "-m", "diag", "diagnose"], capture_output=True,
                       text=True, timeout=240, env=_env(COLUMNS=columns), cwd="/")
    assert p.returncode == 0, p.stderr  # warnings only: 0.5.23 fails nothing unconfigured
    lines = p.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= width, [ln for ln in lines if len(ln) > width]
    text = " ".join(p.stdout.split())
    # 0.5.23's default profiler stop already collects (srt/managers/scheduler_components/
    # profiler_manager.py:404-405; PR #29202, in since 0.5.18)
    assert "upgrade to >= 0.5.18" not in text
    assert "pip install torch" in text and "measured checks skipped" in text
    m = re.search(r"… (\d+) more: (.*?) \(-v or --json\)", text)
    assert m, text
    assert int(m.group(1)) == sum(int(n) for n in re.findall(r"(\d+) [a-z-]+", m.group(2)))
    counts = re.search(r"(\d+) findings: (.*?) (?:measured|verdict)", text)
    assert counts and int(counts.group(1)) == sum(
        int(n) for n in re.findall(r"(\d+) (?:ok|warn|fail|error|skip)", counts.group(2)))
    last = lines[max(i for i, ln in enumerate(lines) if ln.startswith("verdict:")):]
    verdict = " ".join(" ".join(last).split())
    assert verdict.startswith("verdict: no failure, but nothing is proven for a server")
    assert "next: diag diagnose --attention-backend NAME --speculative-num-steps N" in verdict
    assert all(ln.startswith("  ") for ln in last[1:])  # the verdict is the report's end


def test_read_only_cache_with_releases_is_exit_3(tmp_path):
    """A cache whose `releases/` exists but cannot be written: the machine's state (3)."""
    from test_bad_input import _read_only

    cache = tmp_path / "cache"
    (cache / "releases").mkdir(parents=True)
    argv = _read_only(cache / "releases", [DIAG, "fix", "list", "--sglang", "0.0.0.998"])
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/",
                           env=_env(DIAG_CACHE_DIR=str(cache)))
    finally:
        (cache / "releases").chmod(0o755)
    assert p.returncode == 3, p.stderr
    assert not any(m in p.stderr for m in TRACEBACK_MARKS), p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("diag: error:")]
    assert len(errors) == 1 and str(cache / "releases") in errors[0], p.stderr
    assert ("Read-only file system" if os.geteuid() == 0 else "Permission denied") in errors[0]


standin_prometheus = test_fleet_cli.standin_prometheus  # the loopback stand-in (a fixture)


@pytest.mark.parametrize("data", [
    '{"resultType": "vector", "result": 5}',
    '{"resultType": "vector", "result": ["x"]}',
    '{"resultType": "vector", "result": [{"metric": {}, "value": 7}]}',
    '{"resultType": "matrix", "result": [{"metric": {}, "values": [["t", "1"]]}]}',
    '[1, 2]',
])
def test_prometheus_answer_of_the_wrong_shape_is_exit_3(standin_prometheus, data):  # noqa: F811
    """A Prometheus API answer (`status: success`) whose data is not a list of series: the
    server's fault, one line, exit 3 (it was 70)."""
    host, port = standin_prometheus.server_address[:2]
    standin_prometheus.answer = (200, "application/json",
                                 f'{{"status": "success", "data": {data}}}', 0.0)
    r = CliRunner().invoke(main, ["fleet", "--prometheus", f"http://{host}:{port}"],
                           catch_exceptions=False)
    assert r.exit_code == 3, r.output
    assert "did not answer like a Prometheus API" in r.stderr, r.stderr
