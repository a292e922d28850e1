"""Record, on the GPU machine, what the CPU test suite reads as real input (run through
benchmarks/gpu_engine/device.sh with LANE_SCRIPT=record.py):

- torch-profiler traces of a real SGLang server (the `diag trace` fixtures), each from
  `/start_profile` as a user sends it, CPU+GPU activities, stacks on:
    captured-bs1      graphs captured, one request at a time
    killswitch-bs1    SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1 (draft-extend eager)
    captured-bs16     16 concurrent requests, above the largest captured batch (8)
    stage-*           SGLANG_PROFILE_V2=1 stage profiling (`profile_by_stage`, a file per stage)
- the profiler-teardown crash on real servers, side by side: plain servers and servers under
  `diag run --fix profiler-controlled-teardown`, all SGLANG_PROFILE_V2=1, each given stage
  profiles with stacks while serving, up to TRIES times; per server: alive or dead, exit code,
  the crash lines of its log.

Nothing here is judged: the files are the evidence (traces.tgz, crash.json, logs) that the tests
and the lane's checks read.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import sys
import tarfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import lane  # noqa: E402  (its path set-up puts tests/ on sys.path)
from lane import engine_models, es  # noqa: E402

KILL = lane.KILL
FIX = lane.FIX
V2 = {"SGLANG_PROFILE_V2": "1"}
STAGE_BODY = {"activities": ["CPU", "GPU"], "profile_by_stage": True, "num_steps": 3,
              "with_stack": True}
CLASSIC_BODY = {"activities": ["CPU", "GPU"], "num_steps": 6, "with_stack": True}
# 16 concurrent requests: every phase eager above the captured sizes, many launches per step;
# without stacks and fewer steps the trace stays a few MB
WIDE_BODY = {"activities": ["CPU", "GPU"], "num_steps": 3, "with_stack": False}
CRASH_MARKS = ("Segmentation fault", "Fatal Python error", "SIGSEGV", "ProfilerResult",
               "double free", "AssertionError", "core dumped", "Aborted")


def start(name: str, work: Path, models: dict, *, under_diag: bool, env: dict | None = None,
          diag_args: tuple[str, ...] = ()) -> es.Server:
    lane.MEM_FRACTION.setdefault(name, 0.85)
    return lane.start(name, work, models, under_diag=under_diag, env=env, diag_args=diag_args)


def traffic(s: es.Server, stop: threading.Event, width: int = 1, n: int = 48) -> None:
    """Requests until `stop` (errors end the loop: a dead server is seen by the caller)."""
    try:
        while not stop.is_set():
            if width == 1:
                s.generate(lane.PROMPTS[0], n, timeout=60)
            else:
                lane.concurrent_batch(s, width, n)
    except Exception:  # noqa: BLE001 - the server's state is read by the caller
        return


def traces_in(d: Path) -> list[Path]:
    return sorted(d.rglob("*.json.gz")) + sorted(d.rglob("*.json")) if d.exists() else []


def profile_once(s: es.Server, out: Path, body: dict, *, width: int = 1, wait_s: float = 60.0
                 ) -> dict:
    """One /start_profile while requests flow; wait for trace files (or death)."""
    out.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    th = threading.Thread(target=traffic, args=(s, stop, width), daemon=True)
    th.start()
    t0 = time.monotonic()
    try:
        code, text = s.post("/start_profile", {**body, "output_dir": str(out)}, timeout=90)
    except OSError as e:
        code, text = None, f"{type(e).__name__}: {e}"
    files: list[Path] = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and s.proc.poll() is None:
        files = traces_in(out)
        if files and time.monotonic() - t0 > 8:
            break
        time.sleep(1.0)
    time.sleep(3.0)  # let the stop finish writing (gz) and a collection happen
    stop.set()
    th.join(30)
    return {"start_code": code, "start_body": (text or "")[:300],
            "files": [str(p.relative_to(out)) for p in traces_in(out)],
            "bytes": sum(p.stat().st_size for p in traces_in(out)),
            "alive": s.proc.poll() is None, "secs": round(time.monotonic() - t0, 1)}


def after_profile(s: es.Server, n: int = 6) -> bool:
    """Serve a few more requests (the stopped profiler is freed at some later collection)."""
    try:
        for i in range(n):
            s.generate(lane.PROMPTS[i % len(lane.PROMPTS)], 32, timeout=60)
        return s.proc.poll() is None
    except Exception:  # noqa: BLE001
        return False


def crash_lines(log: Path) -> list[str]:
    text = log.read_text(errors="replace") if log.exists() else ""
    return [ln[:300] for ln in text.splitlines() if any(m in ln for m in CRASH_MARKS)][:40]


def crash_side(s: es.Server, work: Path, tries: int) -> dict:
    rec: dict = {"profiles": []}
    for t in range(tries):
        if s.proc.poll() is not None:
            break
        p = profile_once(s, work / f"prof-{s.extra['name']}-{t}", STAGE_BODY)
        p["alive_after_serving"] = after_profile(s)
        rec["profiles"].append(p)
        if not p["alive_after_serving"]:
            break
    time.sleep(2.0)
    rec["alive_at_end"] = s.proc.poll() is None
    rec["returncode"] = s.proc.returncode
    rec["crash_lines"] = crash_lines(s.log)
    return rec


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpu-lane"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--crash-servers", type=int, default=3)
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--warm", action="store_true", help="JIT/triton caches restored: start all at once")
    a = ap.parse_args()
    work, out = a.work, a.out
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "servers": {}}
    t0 = time.monotonic()
    models = engine_models.make_models(work / "models", 0, "gpu")
    servers: dict[str, es.Server] = {}
    try:
        # one cold start alone (JIT kernels and triton caches), then the rest on warm caches
        servers["captured"] = start("captured", work, models, under_diag=False)
        if not a.warm:
            lane.ready(servers["captured"], 420)
        servers["killswitch"] = start("killswitch", work, models, under_diag=False,
                                      env={KILL: "1"})
        if a.crash_servers == 0:  # the stage-profiling trace from a plain V2 server of its own
            servers["stage"] = start("stage", work, models, under_diag=False, env=V2)
        for i in range(a.crash_servers):
            servers[f"plain{i}"] = start(f"plain{i}", work, models, under_diag=False, env=V2)
            servers[f"fix{i}"] = start(f"fix{i}", work, models, under_diag=True, env=V2,
                                       diag_args=("--probe", "profiler-teardown", "--fix", FIX))
        for n, s in servers.items():
            if not s.ready_s:
                try:
                    lane.ready(s, 300)
                except RuntimeError as e:
                    res["servers"][n] = {"ready_error": str(e)[-600:]}
        for n, s in servers.items():
            res["servers"].setdefault(n, {})["ready_s"] = round(s.ready_s or 0, 1)
        print(f"record: {len(servers)} servers up after {time.monotonic() - t0:.0f} s", flush=True)
        # the crash sides run together (threads); the trace recordings beside them
        with cf.ThreadPoolExecutor(2 * a.crash_servers + 3) as ex:
            crash = {n: ex.submit(crash_side, s, work, a.tries) for n, s in servers.items()
                     if n.startswith(("plain", "fix")) and s.ready_s}
            tr = {}
            cap, ks = servers["captured"], servers["killswitch"]
            tr["captured-bs1"] = ex.submit(profile_once, cap, work / "tr-captured-bs1", CLASSIC_BODY)
            tr["killswitch-bs1"] = ex.submit(profile_once, ks, work / "tr-killswitch-bs1",
                                             CLASSIC_BODY)
            if "stage" in servers:
                tr["stage"] = ex.submit(profile_once, servers["stage"], work / "tr-stage",
                                        STAGE_BODY)
            tr = {k: (f.result() if hasattr(f, "result") else f) for k, f in tr.items()}
            tr["captured-bs16"] = profile_once(cap, work / "tr-captured-bs16", WIDE_BODY,
                                               width=16)
            tr["killswitch-bs16"] = profile_once(ks, work / "tr-killswitch-bs16", WIDE_BODY,
                                                 width=16)
            res["traces"] = tr
            res["crash"] = {n: f.result() for n, f in crash.items()}
        for side in ("plain", "fix"):
            rows = [v for n, v in res["crash"].items() if n.startswith(side)]
            res[f"{side}_summary"] = {
                "servers": len(rows), "died": sum(not r["alive_at_end"] for r in rows),
                "profiles": sum(len(r["profiles"]) for r in rows)}
    except Exception as e:  # keep what ran
        import traceback
        res["error"] = f"{type(e).__name__}: {e}"[:2000]
        res["traceback"] = traceback.format_exc()[-4000:]
    finally:
        for s in servers.values():
            s.stop()
    res["wall_s"] = round(time.monotonic() - t0, 1)
    (out / "record.json").write_text(json.dumps(res, indent=1, default=str))
    # traces: one archive per recording (what comes back is limited per file)
    for d in sorted(work.glob("tr-*")):
        with tarfile.open(out / f"{d.name}.tar", "w") as tf:  # the traces are gz already
            tf.add(d, arcname=d.name)
    if a.crash_servers == 0:
        return 0
    with tarfile.open(out / "crashlogs.tgz", "w:gz") as tf:
        for n in servers:
            log = work / f"server-{n}.log"
            if log.exists():
                tf.add(log, arcname=log.name)
        for d in sorted(work.glob("run-*")):
            tf.add(d, arcname=d.name)
    print(json.dumps({k: res.get(k) for k in ("plain_summary", "fix_summary", "wall_s", "error")}))
    for n, t in (res.get("traces") or {}).items():
        print(f"trace {n}: {t.get('files')} {t.get('bytes')} B alive={t.get('alive')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
