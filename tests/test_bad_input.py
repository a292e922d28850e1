"""Bad input and checks that could not run, through real `diag` processes: one clear line on
stderr, the documented exit code, and never `ok` (or exit 0) for a check that did not happen.

Real parts: a virtualenv without torch (`notorch_python`, conftest), real SGLang release
sources, pip against a refused / silent port on 127.0.0.1 and against the real index, a
read-only bind mount (root ignores file modes), pipes closed before diag writes.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from report_schema import check_report
from standin_sglang_server import StandinSGLangServer, free_port, server_info

from diag.releases import DEFAULT_RELEASE

REPO = Path(__file__).resolve().parent.parent
DIAG = str(Path(sys.executable).with_name("diag"))
TRACEBACK_MARKS = ("Traceback", "Exception ignored", "internal error")


def _env(**extra: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def _run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 240,
         **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=env or _env(), cwd=kw.pop("cwd", "/"), **kw)


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    """The stderr of a failed command: progress lines may precede it, the error is one line."""
    assert not any(m in p.stderr for m in TRACEBACK_MARKS), p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("diag: error:")]
    assert len(errors) == 1, p.stderr
    return errors[0]


# ------------------------------------------------------------------------------ no torch


@pytest.mark.release
@pytest.mark.slow
def test_without_torch_no_profiler_finding_is_ok(notorch_python, release):
    release("0.5.17")
    p = _run([str(notorch_python), "-m", "diag", "probe", "profiler-teardown", "--full",
              "--sglang", "0.5.17", "--platform", "hip", "--json"])
    doc = json.loads(p.stdout)
    check_report(doc)
    statuses = [f["status"] for f in doc["findings"]]
    assert "ok" not in statuses, doc["findings"]
    # 0.5.17 profiler_manager.py:298 `_stop_profile` stops at :320 and drops the profiler at :381
    # with no gc.collect() in the function: the static part fails on HIP (it did run).
    static, runtime, repro = doc["findings"]
    assert static["status"] == "fail" and p.returncode == 1, p.stderr
    assert runtime["status"] == "skip" and "torch does not import" in runtime["summary"]
    assert repro["status"] == "skip"
    assert repro["summary"].startswith("crash reproducer not run: torch does not import in "
                                       "the child"), repro["summary"]
    assert "No module named 'torch'" in repro["summary"]
    rows = [e["data"] for e in repro["evidence"] if e["kind"] == "row"]
    assert rows and all(r["crashes"] == 0 and r["not_run"] == r["tries"] for r in rows), rows


@pytest.mark.release
def test_without_torch_fix_check_is_unverified_not_ok(notorch_python, release, tmp_path):
    release("0.5.17")
    # 0.5.17 eagle_worker_v2.py:396-405: on HIP only AiterMultiStepDraftBackend passes the gate
    # (:450), so draft-extend-allowlist is applicable; nothing here can import the release.
    base = [str(notorch_python), "-m", "diag", "fix", "check", "--require",
            "draft-extend-allowlist", "--sglang", "0.5.17", "--platform", "hip"]
    p = _run(base)
    assert p.returncode == 4, p.stdout + p.stderr
    assert "UNVERIFIED draft-extend-allowlist" in p.stdout
    assert "a required fix is unverified" in p.stdout
    line = [ln for ln in p.stderr.splitlines() if "unverified" in ln]
    assert len(line) == 1 and "--no-dry" in line[0] and "pass --python" in line[0], p.stderr

    p = _run(base + ["--json"])
    doc = json.loads(p.stdout)
    row = {f["id"]: f for f in doc["fixes"]}["draft-extend-allowlist"]
    assert p.returncode == 4 and doc["ok"] is False and doc["verdict"] == "unverified"
    assert row["verdict"] == "unverified" and row["dry"]["status"] == "skipped"

    p = _run(base + ["--no-dry"])  # the static check alone, asked for
    assert p.returncode == 0, p.stdout + p.stderr

    # --python is honoured: an interpreter with nothing installed runs the child, which fails
    # to import diag's own dependencies; that error is the reason shown, in one line.
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    p = _run(base + ["--python", str(bare / "bin" / "python")])
    assert p.returncode == 4, p.stdout + p.stderr
    line = [ln for ln in p.stderr.splitlines() if "unverified" in ln]
    assert len(line) == 1, p.stderr
    assert f"the dry run failed in {bare / 'bin' / 'python'}" in line[0]
    assert "ModuleNotFoundError: No module named 'packaging'" in line[0]  # diag was found

    p = _run(base + ["--python", str(tmp_path / "no-such-python")])
    assert p.returncode == 2
    assert "no such interpreter" in _one_error_line(p)


def test_without_torch_bench_is_operational_error(notorch_python):
    p = _run([str(notorch_python), "-m", "diag", "bench"])
    assert p.returncode == 3 and "torch is not installed" in _one_error_line(p)


def test_reproducer_child_with_a_broken_torch_is_an_error(monkeypatch, tmp_path, release):
    """A torch that is there but fails to import: the reproducer did not run, `error`."""
    pytest.importorskip("torch")
    import diag.probes.profiler_teardown.reproducer as rp
    from diag.context import Context
    from diag.findings import Status
    from diag.probes.profiler_teardown.probe import ProfilerTeardownProbe

    standin = tmp_path / "broken_torch_standin" / "torch"  # why: a broken build cannot be had
    standin.mkdir(parents=True)
    (standin / "__init__.py").write_text("raise RuntimeError('broken torch build (stand-in)')\n")
    monkeypatch.setenv("PYTHONPATH", str(standin.parent))  # children only: this one has torch
    monkeypatch.setattr(rp, "SCENARIOS", {"stop-twice": rp.SCENARIOS["stop-twice"]})
    monkeypatch.setattr(rp, "DEFAULT_TRIES", 1)
    f = ProfilerTeardownProbe().reproducer(Context(target=release("0.5.17"), platform="hip"))
    assert f.status == Status.ERROR, f.summary
    assert "RuntimeError: broken torch build (stand-in)" in f.summary
    assert "no crash" not in f.summary


def test_reproducer_child_that_fails_to_start_is_not_run():
    """A child that exits by itself before the end of its scenario tested nothing."""
    import diag.probes.profiler_teardown.reproducer as rp

    a = rp.Attempt(returncode=1, signal=None, timed_out=False, seconds=0.1, report=None,
                   stderr_tail="Traceback ...\nImportError: cannot import name 'child_main'")
    assert not a.ran and not a.crashed
    assert a.why_not_run().endswith("ImportError: cannot import name 'child_main'")
    res = rp.ScenarioResult("stop-twice", "d", 1, [a])
    assert res.not_run == 1 and not res.no_torch
    assert "not run in 1 of 1 tries" in res.verdict() and "no crash" not in res.verdict()


# ------------------------------------------------------------------------------ downloads


def _pip_env(cache: Path, **extra: str) -> dict[str, str]:
    """pip's index controlled here: no config files (this machine's add find-links and file://
    extra indexes), no find-links, no retries (each costs seconds of back-off)."""
    base: dict[str, str | None] = dict(
        DIAG_CACHE_DIR=str(cache), PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS=None,
        PIP_NO_INDEX=None, PIP_EXTRA_INDEX_URL=None, PIP_RETRIES="0", PIP_DEFAULT_TIMEOUT="2",
        PIP_PROXY=None, https_proxy=None, HTTPS_PROXY=None, http_proxy=None, HTTP_PROXY=None)
    return _env(**{**base, **extra})


def test_unreachable_index_is_exit_3_and_says_so(tmp_path):
    port = free_port()
    env = _pip_env(tmp_path / "cache", PIP_INDEX_URL=f"http://127.0.0.1:{port}/simple")
    p = _run([DIAG, "diagnose", "--sglang", "0.5.17"], env=env)
    assert p.returncode == 3
    line = _one_error_line(p)
    assert line.startswith(f"diag: error: cannot reach the package index (http://127.0.0.1:"
                           f"{port}/simple/sglang/: Connection refused)"), line
    assert "--sglang PATH" in line and "no such release" not in line


def test_unreachable_proxy_is_exit_3_and_says_so(tmp_path):
    port = free_port()
    env = _pip_env(tmp_path / "cache", https_proxy=f"http://127.0.0.1:{port}",
                   PIP_INDEX_URL="https://pypi.org/simple")
    p = _run([DIAG, "fix", "list", "--sglang", "0.5.17"], env=env)
    assert p.returncode == 3
    line = _one_error_line(p)
    assert "cannot reach the package index" in line and "proxy: Connection refused" in line, line


def test_silent_index_times_out_as_unreachable(tmp_path):
    with socket.socket() as s:  # accepts connections (backlog), never answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        env = _pip_env(tmp_path / "cache",
                       PIP_INDEX_URL=f"http://127.0.0.1:{s.getsockname()[1]}/simple")
        p = _run([DIAG, "diagnose", "--sglang", "0.5.17"], env=env)
    assert p.returncode == 3
    line = _one_error_line(p)
    assert "cannot reach the package index" in line and "timed out" in line, line


def test_no_sglang_anywhere_and_no_index(notorch_python, tmp_path):
    """No importable sglang, an empty cache, no index: the default release cannot be had."""
    env = _pip_env(tmp_path / "cache", PIP_INDEX_URL=f"http://127.0.0.1:{free_port()}/simple")
    p = _run([DIAG, "diagnose"], env=env)
    assert p.returncode == 3
    assert "no sglang importable here" in p.stderr
    assert "cannot reach the package index" in _one_error_line(p)
    p = _run([str(notorch_python), "-m", "diag", "diagnose"], env=env)  # a Python without pip
    assert p.returncode == 3
    assert _one_error_line(p).endswith(f"cannot download sglang=={DEFAULT_RELEASE}: "
                                       f"{notorch_python} has no pip; pass --sglang PATH to "
                                       "audit an SGLang tree on disk")


@pytest.mark.release
def test_release_that_does_not_exist_on_the_real_index(tmp_path):
    """PyPI answers; sglang has no 0.0.0.999: 'no such release', not 'cannot reach'."""
    env = _env(DIAG_CACHE_DIR=str(tmp_path / "cache"))
    p = _run([DIAG, "diagnose", "--sglang", "0.0.0.999"], env=env)
    assert p.returncode == 3
    line = _one_error_line(p)
    assert line.startswith("diag: error: no such release: sglang==0.0.0.999 is not on the "
                           "package index (its newest: "), line
    assert "0.5.23" in line and "--sglang PATH" in line and "cannot reach" not in line


def test_a_damaged_wheel_is_a_target_error(tmp_path):
    """Issue 31, defect 6: a wheel with a bad CRC (damaged in pip's cache) was exit 70. Real
    pip, offline, finds it through --find-links (PIP_FIND_LINKS) and copies it unread."""
    import zipfile

    links = tmp_path / "links"
    links.mkdir()
    wheel = links / "sglang-9.9.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("sglang/__init__.py", "x = 1\n" * 2000)
        z.writestr("sglang-9.9.1.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.1\n")
        z.writestr("sglang-9.9.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: t\n"
                   "Root-Is-Purelib: true\nTag: py3-none-any\n")  # pip reads this one
        z.writestr("sglang-9.9.1.dist-info/RECORD", "")
    data = bytearray(wheel.read_bytes())
    at = data.find(b"sglang/__init__.py") + len("sglang/__init__.py") + 5
    data[at] ^= 0xFF  # a byte of the compressed data: its CRC no longer matches
    wheel.write_bytes(bytes(data))
    env = _env(DIAG_CACHE_DIR=str(tmp_path / "cache"), PIP_NO_INDEX="1",
               PIP_FIND_LINKS=str(links))
    p = _run([DIAG, "fix", "list", "--sglang", "9.9.1"], env=env)
    assert p.returncode == 3, p.stderr
    line = _one_error_line(p)
    assert line.startswith("diag: error: the downloaded wheel sglang-9.9.1-py3-none-any.whl "
                           "is damaged ("), line
    assert "pip cache remove sglang" in line
    assert not (tmp_path / "cache" / "releases" / "9.9.1").exists()  # nothing half-unpacked


def test_download_failure_lines_from_pip_output():
    """The classifier on pip's own words (pip/_internal/index/collector.py and resolver)."""
    from diag.releases import download_failure

    refused = ("Could not fetch URL http://127.0.0.1:9/simple/sglang/: connection error: "
               "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: "
               "/simple/sglang/ (Caused by NewConnectionError('<pip._vendor.urllib3.connection."
               "HTTPConnection object at 0x7f>: Failed to establish a new connection: [Errno 111]"
               " Connection refused')) - skipping\nERROR: Could not find a version that "
               "satisfies the requirement sglang==0.5.17 (from versions: none)\n")
    assert download_failure("0.5.17", refused).startswith(
        "cannot reach the package index (http://127.0.0.1:9/simple/sglang/: Connection refused)")
    dns = refused.replace("[Errno 111] Connection refused", "[Errno -3] Temporary failure in "
                                                           "name resolution")
    assert "Temporary failure in name resolution" in download_failure("0.5.17", dns)
    missing = ("ERROR: Could not find a version that satisfies the requirement sglang==9.9 "
               "(from versions: 0.5.9, 0.5.23, 0.5.12.post1)\n")
    assert download_failure("9.9", missing).startswith(
        "no such release: sglang==9.9 is not on the package index (its newest: 0.5.9, "
        "0.5.12.post1, 0.5.23)")
    assert download_failure("1.0", "/x/python: No module named pip\n") == \
        f"cannot download sglang==1.0: {sys.executable} has no pip; pass --sglang PATH to " \
        "audit an SGLang tree on disk"
    assert download_failure("1.0", "Collecting sglang==1.0\nERROR: disk full\n") == \
        "cannot download sglang==1.0: ERROR: disk full"


# ------------------------------------------------------------------------------ --sglang


def test_sglang_spec_errors(tmp_path):
    from click.testing import CliRunner

    from diag.cli import main

    not_tree = tmp_path / "not-a-tree"
    not_tree.mkdir()
    cases = [("banana", 2, "--sglang 'banana' is neither an existing path nor a release version"),
             (str(not_tree), 3, f"{not_tree}: not an SGLang tree (expected sglang/srt/ inside"),
             (str(tmp_path / "missing"), 3, "no such file or directory")]
    for spec, code, text in cases:
        r = CliRunner().invoke(main, ["diagnose", "--sglang", spec], catch_exceptions=False)
        assert r.exit_code == code, (spec, r.output)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("diag: error: ") and text in lines[0], \
            (spec, r.stderr)


def test_versions_are_pep440():
    from diag.releases import looks_like_version

    assert all(map(looks_like_version, ["0.5.17", "0.5.12.post1", "0.0.0.999", "0.5.0rc2"]))
    assert not any(map(looks_like_version, ["banana", "v0.5.17", "0.5.x", ""]))


# ------------------------------------------------------------------------------ diag run


def _read_only(path: Path, argv: list[str]) -> list[str]:
    """argv run with `path` read-only: a read-only bind mount for root (file modes do not stop
    root), the directory's mode for anyone else."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        return argv
    if not shutil.which("unshare"):
        pytest.skip("root without unshare(1): no way to make a read-only directory")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m not permitted here: {probe.stderr.decode().strip()}")
    return ["unshare", "-m", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro '
            '"$0" "$0" && exec "$@"', str(path), *argv]


def test_run_with_unusable_cache_or_run_dir_exits_3(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    ro = tmp_path / "ro"
    ro.mkdir()
    cases = [
        ("cache is a file", [DIAG, "run", "--", "true"],
         dict(DIAG_CACHE_DIR=str(a_file), XDG_RUNTIME_DIR=None), "Not a directory"),
        ("run dir is a file", [DIAG, "run", "--run-dir", str(a_file), "--", "true"], {},
         "is not a directory"),
        ("cache read-only", _read_only(ro, [DIAG, "run", "--", "true"]),
         dict(DIAG_CACHE_DIR=str(ro), XDG_RUNTIME_DIR=None), "Read-only file system"
         if os.geteuid() == 0 else "Permission denied"),
        ("run dir in a read-only dir",
         _read_only(ro, [DIAG, "run", "--run-dir", str(ro / "r"), "--", "true"]), {},
         "Read-only file system" if os.geteuid() == 0 else "Permission denied"),
    ]
    try:
        for name, argv, env, text in cases:
            p = _run(argv, env=_env(**env))
            assert p.returncode == 3, (name, p.returncode, p.stderr)
            line = _one_error_line(p)
            assert text in line, (name, line)
    finally:
        ro.chmod(0o755)
    assert list(ro.iterdir()) == []  # nothing was left behind


# ------------------------------------------------------------------------------ pipes


# Every way output reaches stdout: the group's --help/--version (printed while click parses),
# a subcommand's --help, each command's report (text and JSON). `--platform hip` keeps torch
# out of most of them (the machine is small); `env --json` imports it.
HIP = ["--sglang", "0.5.17", "--platform", "hip"]
PIPE_COMMANDS = [
    ["--help"], ["--version"], ["fix", "--help"], ["run", "--help"], ["tui", "--help"],
    ["probe", "--list"], ["env", "--json"], ["fix", "list", *HIP],
    ["fix", "list", "--json", *HIP], ["fix", "check", "--no-dry", *HIP],
    ["diagnose", "--no-execute", *HIP], ["probe", "draft-extend-graph", "--json", *HIP],
]


@pytest.mark.release
def test_closed_pipe_exits_141_quietly_for_every_command(release):
    release("0.5.17")
    for args in PIPE_COMMANDS:
        r, w = os.pipe()
        os.close(r)  # the reader is gone before diag writes: `diag ... | head` at its worst
        try:
            p = subprocess.run([DIAG, *args], stdout=w, stderr=subprocess.PIPE, text=True,
                               timeout=120, env=_env())
        finally:
            os.close(w)
        assert p.returncode == 141, (args, p.returncode, p.stderr)
        assert not any(m in p.stderr for m in TRACEBACK_MARKS + ("Error",)), (args, p.stderr)


def test_help_into_a_real_shell_pipe():
    """`diag --help | true` as a shell runs it: 141 if the reader was gone, 0 if not; quiet."""
    p = _run(["bash", "-c", f'"{DIAG}" --help | true; echo "rc=${{PIPESTATUS[0]}}"'])
    assert p.stdout.strip() in ("rc=0", "rc=141"), p.stdout
    assert p.stderr == "", p.stderr


# ------------------------------------------------------------------------------ --server


@pytest.mark.release
def test_server_given_but_failed_says_what_failed(release):
    release("0.5.17")
    with StandinSGLangServer() as s:
        s.json("/server_info", {"detail": "boom"}, status=500)
        s.json("/get_server_info", {"detail": "boom"}, status=500)
        p = _run([DIAG, "probe", "draft-extend-graph", "--sglang", "0.5.17", "--platform", "hip",
                  "--server", s.url, "--json"])
    doc = json.loads(p.stdout)
    static, live = doc["findings"]
    # 0.5.17 eagle_worker_v2.py:396-405: HIP admits only the aiter multi-step backend, so the
    # table without a configuration lists eager backends: a `warn` that asks for one.
    assert static["status"] == "warn"
    assert "the server's arguments could not be read" in static["summary"]
    assert "HTTP 500" in static["summary"]
    assert live["status"] == "warn" and "HTTP 500" in live["summary"]
    for f in (static, live):
        assert "--server" not in f["summary"] + (f["hint"] or ""), f

    with StandinSGLangServer() as s:  # answers, but its arguments name no backend
        s.json("/server_info", server_info(attention_backend=None))
        p = _run([DIAG, "probe", "draft-extend-graph", "--sglang", "0.5.17", "--platform", "hip",
                  "--server", s.url, "--json"])
    static = json.loads(p.stdout)["findings"][0]
    assert "the server's arguments name no attention backend" in static["summary"]
    assert "--server" not in static["summary"] + (static["hint"] or "")

    p = _run([DIAG, "diagnose", "--sglang", "0.5.17", "--server",
              f"http://127.0.0.1:{free_port()}"])
    assert p.returncode == 3
    assert "cannot connect" in _one_error_line(p) and "Connection refused" in p.stderr
