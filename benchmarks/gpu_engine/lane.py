"""The GPU engine lane: diag on a real SGLang server on a GPU, CUDA graphs on (run it on the GPU
machine through benchmarks/gpu_engine/device.sh; tests/test_engine_gpu.py runs it under pytest).

Three real `python -m sglang.launch_server` processes of one release, tiny bf16 models made at
set-up (tests/engine_models.py, profile "gpu"), EAGLE, triton attention, graphs on:
  diag   under `diag run --probe all --fix profiler-controlled-teardown`
  plain  the same server without diag (reference tokens, overhead baseline)
  eager  under diag with SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH=1 and SGLANG_PROFILE_V2=1 (the
         kill switch: draft-extend runs eager; V2 stage profiling)
  lite   under `diag run --probe draft-extend-graph` only (what the phase counters cost alone,
         without the sync counter's GPU sync-debug scope around every metadata build)
The checks (benchmarks/gpu_engine/checks.py) are recorded, never asserted here; then the timed
part: interleaved greedy requests, one server after the other, per round (side by side in one
run): overhead of diag (diag / plain) and eager draft-extend's cost (eager / diag), next to diag's
own estimate of it from the counters. Writes lane.json and prints a summary.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO / "tests")]

import checks  # noqa: E402
import engine_models  # noqa: E402
import engine_server as es  # noqa: E402

FIX = "profiler-controlled-teardown"
KILL = "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"
MAX_BS = 8  # --cuda-graph-max-bs-decode: the largest batch every runner captures
PROMPTS = [[5, 6, 7], [11, 42, 99, 7], [250, 3], [17, 18, 19, 20, 21], [300], [64, 65]]


# Three servers on one card: SGLang sizes the KV pool as what is free at its start minus
# (1 - --mem-fraction-static) of the whole card, so a server that starts after another one took
# its pool finds none ("Loaded weights leave no GPU memory for the KV cache"). A fixed, small
# pool (--max-total-tokens) under a high fraction fits in any start order.
MEM_FRACTION = dict.fromkeys(("diag", "plain", "eager", "lite"), 0.85)
MAX_TOTAL_TOKENS = 65536


def server_cmd(py: str, models: dict[str, Path], port: int, mem: float) -> list[str]:
    return [py, "-m", "sglang.launch_server", "--model-path", str(models["bigram"]),
            "--speculative-draft-model-path", str(models["draft"]), *es.EAGLE_ARGS,
            "--device", "cuda", "--attention-backend", "triton", "--host", "127.0.0.1",
            "--port", str(port), "--mem-fraction-static", str(mem),
            "--max-total-tokens", str(MAX_TOTAL_TOKENS),
            "--cuda-graph-max-bs-decode", str(MAX_BS), "--disable-prefill-cuda-graph",
            "--max-running-requests", "32", "--enable-metrics"]


def start(name: str, work: Path, models: dict[str, Path], *, under_diag: bool,
          env: dict[str, str] | None = None, diag_args: tuple[str, ...] = ()) -> es.Server:
    port = es.free_port()
    py = sys.executable
    cmd = server_cmd(py, models, port, MEM_FRACTION[name])
    run_dir = work / f"run-{name}" if under_diag else None
    if run_dir is not None:
        probes = () if "--probe" in diag_args else ("--probe", "all")
        cmd = [py, "-m", "diag", "run", *probes, *diag_args, "--run-dir", str(run_dir), "--", *cmd]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    full_env.update(PYTHONUNBUFFERED="1", **(env or {}))
    log = work / f"server-{name}.log"
    fh = open(log, "wb")
    proc = subprocess.Popen(cmd, env=full_env, stdout=fh, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    fh.close()
    return es.Server(proc=proc, url=f"http://127.0.0.1:{port}", log=log, run_dir=run_dir,
                     started=time.monotonic(), extra={"name": name})


def ready(s: es.Server, timeout: float) -> es.Server:
    es.wait_ready(s, timeout)
    s.ready_s = time.monotonic() - s.started
    return s


def diag_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAG_")}
    return subprocess.run([sys.executable, "-m", "diag", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def status(s: es.Server) -> dict:
    """`diag fix status --json` of the server's run directory: the engine process's row."""
    r = diag_cli("fix", "status", "--run-dir", str(s.run_dir), "--json")
    doc = json.loads(r.stdout) if r.stdout.strip() else {}
    procs = [p for run in doc.get("runs", []) for p in run.get("processes", [])]
    eng = [p for p in procs if p.get("engine") and p.get("alive")]
    return {"engine": eng[0] if eng else None, "processes": procs, "rc": r.returncode}


def counters(s: es.Server) -> dict | None:
    eng = status(s)["engine"]
    return eng.get("counters") if eng else None


def wait_for(pred, timeout: float = 30.0, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    return last


def greedy(s: es.Server, n: int = 32) -> list[list[int]]:
    return [s.generate(p, n)["output_ids"] for p in PROMPTS]


def timed(s: es.Server, prompt: list[int], n: int) -> float:
    t0 = time.perf_counter()
    s.generate(prompt, n, timeout=120)
    return time.perf_counter() - t0


def concurrent_batch(s: es.Server, width: int, n: int) -> list[dict]:
    with cf.ThreadPoolExecutor(width) as ex:
        futs = [ex.submit(s.generate, [7 + i, 8, 9], n, 120) for i in range(width)]
        return [f.result() for f in futs]


def profile(s: es.Server, out: Path, body: dict, want_stops: int, events_kind: str = "profiler_stop",
            timeout: float = 120) -> dict:
    """Start a profile (`/start_profile` with CUDA activities), drive requests until the agent has
    recorded `want_stops` new profiler stops, then check the server still serves."""
    before = ((counters(s) or {}).get(events_kind) or {}).get("stops", 0)
    code, text = s.post("/start_profile", {**body, "output_dir": str(out)}, timeout=60)
    res = {"start_code": code, "start_body": text[:200]}

    def stopped():
        s.generate([5, 6, 7], 8)
        n = ((counters(s) or {}).get(events_kind) or {}).get("stops", 0)
        return n - before >= want_stops and n

    res["stops"] = (wait_for(stopped, timeout, 0.5) or 0) - before
    res["section"] = (counters(s) or {}).get(events_kind)
    res["traces"] = sorted(p.name for p in out.glob("*.trace.json.gz")) if out.exists() else []
    res["alive"] = s.proc.poll() is None
    res["serves"] = bool(res["alive"] and s.generate([5, 6], 4)["output_ids"])
    return res


def run(work: Path, rounds: int, tokens: int) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    res: dict = {"checks": [], "timings": {}, "servers": {}}
    add = lambda c: res["checks"].append(c.as_dict())  # noqa: E731
    t0 = time.monotonic()
    models = engine_models.make_models(work / "models", 0, "gpu")
    servers: dict[str, es.Server] = {}
    try:
        # diag first (alone: a cold start builds the JIT kernels and triton caches), then the
        # other three together on warm caches.
        servers["diag"] = ready(start("diag", work, models, under_diag=True,
                                      diag_args=("--fix", FIX)), 420)
        servers["plain"] = start("plain", work, models, under_diag=False)
        servers["eager"] = start("eager", work, models, under_diag=True, diag_args=("--fix", FIX),
                                 env={KILL: "1", "SGLANG_PROFILE_V2": "1"})
        servers["lite"] = start("lite", work, models, under_diag=True,
                                diag_args=("--probe", "draft-extend-graph"))
        for n in ("plain", "eager", "lite"):
            ready(servers[n], 300)
        for n, s in servers.items():
            res["servers"][n] = {"ready_s": round(s.ready_s or 0, 1), "url": s.url}
        d, k = servers["diag"], servers["eager"]
        logs = {n: s.log.read_text(errors="replace") for n, s in servers.items()}
        all3 = dict.fromkeys(checks.PHASES, True)
        add(checks.check_captures("capture: diag server, all three phases", logs["diag"], all3))
        add(checks.check_captures("capture: plain server, all three phases", logs["plain"], all3))
        add(checks.check_captures("capture: kill switch, draft extend not captured", logs["eager"],
                                  {**all3, "draft extend": False}))
        add(checks.check_captures("capture: phase counters alone, all three phases", logs["lite"],
                                  all3))
        # greedy tokens, with and without diag (and with the kill switch)
        toks = {n: greedy(s) for n, s in servers.items()}
        add(checks.check_equal_tokens("greedy tokens identical with and without diag", toks))
        meta = d.generate(PROMPTS[0], 32)["meta_info"]
        res["accept_length"] = meta.get("spec_accept_length")
        # draft-extend counter: graph when captured, eager with the kill switch, eager above the
        # largest captured batch (a run-time fallback)
        c0 = checks.modes(counters(d))
        d.generate(PROMPTS[1], 32)
        c1 = checks.modes(counters(d))
        add(checks.check_modes("draft-extend counted as graph replays (captured runner)",
                               checks.delta(c1, c0), "graph"))
        wait_for(lambda: checks.phase_modes(counters(d), "draft-decode"), 5)
        cd = counters(d)
        for phase in ("target-verify", "draft-decode"):
            add(checks.check_modes(f"{phase} counted as graph replays at batch 1",
                                   checks.phase_modes(cd, phase), "graph"))
        k0 = checks.modes(counters(k))
        k.generate(PROMPTS[1], 32)
        add(checks.check_modes("draft-extend counted eager with the kill switch",
                               checks.delta(checks.modes(counters(k)), k0), "eager", KILL))
        why = checks.phase_reasons(counters(k), "draft-extend")
        add(checks.Check("kill switch named as the reason", set(why) == {"kill-switch"},
                         f"eager reasons {why}", {"reasons": why}))
        before = counters(d)
        concurrent_batch(d, 2 * MAX_BS, 48)
        after = counters(d)
        big = checks.delta(checks.modes(after), checks.modes(before))
        add(checks.Check("draft-extend eager above the largest captured batch",
                         big.get("eager", 0) > 0,
                         f"{2 * MAX_BS} concurrent requests: passes by mode {big}",
                         {"passes": big, "draft_extend": (after or {}).get("draft_extend")}))
        time.sleep(1.5)  # the phase counters flush at most once a second
        after = counters(d)
        for phase in ("target-verify", "draft-decode", "draft-extend"):
            why = checks.phase_reasons(after, phase)
            add(checks.Check(f"{phase} eager above the largest captured batch, with the reason",
                             why.get("batch-above-captured", 0) > 0, f"eager reasons {why}",
                             {"reasons": why}))
        res["phase_lines"] = {n: checks.phase_lines(counters(s)) for n, s in
                              (("diag", d), ("eager", k))}
        # syncs per step per phase: the runtime counter (GPU sync debug mode in the scheduler)
        # next to the static census for this configuration
        measured = checks.syncs_per_step(after)
        probe = diag_cli("probe", "metadata-syncs", "--server", d.url, "--no-execute", "--json",
                         timeout=300)
        rep = json.loads(probe.stdout) if probe.stdout.strip().startswith("{") else {}
        res["census_report"] = rep
        res["syncs_by_phase"] = checks.syncs_by_phase(after)
        census = checks.census_per_phase(rep)
        add(checks.check_syncs_agree("runtime syncs per step per phase agree with the census",
                                     measured, census, checks.census_exact(rep)))
        add(checks.check_syncs_bounded("runtime syncs per step within the census's upper bound",
                                       measured, census))
        res["counters"] = {"diag": counters(d), "eager": counters(k)}
        # profiles with CUDA activities through the controlled teardown
        classic = profile(d, work / "prof-classic", {"num_steps": 3, "activities": ["CPU", "GPU"]}, 1)
        add(checks.Check("classic /start_profile with CUDA activities: stopped, serving after",
                         classic["stops"] >= 1 and classic["serves"], json.dumps(classic)[:400],
                         classic))
        v2 = profile(k, work / "prof-v2", {"num_steps": 2, "activities": ["CPU", "GPU"],
                                           "profile_by_stage": True}, 2)
        add(checks.Check("V2 stage profiling with CUDA activities: both stages stopped, serving",
                         v2["stops"] >= 2 and v2["serves"], json.dumps(v2)[:400], v2))
        # fix round trip acknowledged by the engine
        rt = {}
        for action in ("revert", "apply"):
            r = diag_cli("fix", action, FIX, "--run-dir", str(d.run_dir), "--json", "--timeout", "60")
            rows = json.loads(r.stdout)["processes"] if r.stdout.strip().startswith("{") else []
            rt[action] = {"rc": r.returncode, "engine_acks": [
                (row["pid"], row["ok"], row["state"]) for row in rows if row.get("engine")],
                "stderr": r.stderr.strip()[-200:]}
        add(checks.Check("fix revert/apply acknowledged by every engine process",
                         all(v["rc"] == 0 and v["engine_acks"] and all(a[1] for a in v["engine_acks"])
                             for v in rt.values()), json.dumps(rt), rt))
        code, body = d.get("/metrics")
        diag_lines = [ln for ln in body.splitlines() if ln.startswith("diag_")]
        graph_line = [ln for ln in diag_lines if ln.startswith('diag_draft_extend_passes_total{mode="graph"}')]
        add(checks.Check("diag_* series on the server's /metrics", code == 200 and bool(graph_line),
                         f"{len(diag_lines)} diag_ samples; {graph_line[:1]}"))
        tui = diag_cli("tui", "--once", "--run-dir", str(d.run_dir), "--width", "140")
        res["tui_once"] = tui.stdout[-4000:]
        add(checks.check_tui_share("diag tui --once --run-dir shows the live graph/eager share",
                                   tui.returncode, tui.stdout))
        res["timings"] = timings(servers, rounds, tokens)
        # last: without flashinfer's JIT sampling kernel building, a sampled request ends the
        # scheduler (SGLang's own failure, not diag's), and nothing may come after it
        sampled = {}
        for n in ("diag", "eager"):
            try:
                code, body = servers[n].post("/generate", {"input_ids": [5, 6, 7], "sampling_params": {
                    "max_new_tokens": 16, "temperature": 0.8, "top_p": 0.9, "top_k": 20}})
                sampled[n] = {"code": code, "n": len(json.loads(body).get("output_ids", []))
                              if code == 200 else body[:200]}
            except OSError as e:
                sampled[n] = {"code": None, "error": f"{type(e).__name__}: {e}"}
        add(checks.Check("sampled (non-greedy) requests", all(v["code"] == 200 for v in sampled.values()),
                         json.dumps(sampled), sampled))
        for n, s in servers.items():
            res["servers"][n]["alive_at_end"] = s.proc.poll() is None
            res["servers"][n]["log_errors"] = checks.log_errors(s.log.read_text(errors="replace"))
    except Exception as e:  # keep what ran: the partial result is the evidence
        import traceback
        res["error"] = f"{type(e).__name__}: {e}"[:2000]
        res["traceback"] = traceback.format_exc()[-4000:]
        add(checks.Check("lane ran to the end", False, res["error"][:300]))
    finally:
        for s in servers.values():
            s.stop()
    res["wall_s"] = round(time.monotonic() - t0, 1)
    return res


def timings(servers: dict[str, es.Server], rounds: int, tokens: int) -> dict:
    """Interleaved: each round sends one greedy request of `tokens` tokens (batch 1) to each
    server in turn (rotating the order), so drift hits all three alike."""
    names = [n for n in ("plain", "diag", "eager", "lite") if n in servers]
    times: dict[str, list[float]] = {n: [] for n in names}
    for s in servers.values():  # warm-up
        timed(s, [5, 6, 7], tokens)
    c_before = {n: counters(servers[n]) for n in ("diag", "eager")}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            times[n].append(timed(servers[n], PROMPTS[r % len(PROMPTS)], tokens))
    c_after = {n: counters(servers[n]) for n in ("diag", "eager")}
    out: dict = {"rounds": rounds, "tokens": tokens}
    for n in names:
        out[n] = {"median_s": statistics.median(times[n]), "iqr_s": checks.iqr(times[n]),
                  "ms_per_token": checks.median_ms_per_token(times[n], tokens)}
    out["overhead_diag_vs_plain"] = checks.ratio(out["diag"]["median_s"], out["plain"]["median_s"])
    if "lite" in out:
        out["overhead_lite_vs_plain"] = checks.ratio(out["lite"]["median_s"],
                                                     out["plain"]["median_s"])
    out["eager_vs_captured"] = checks.ratio(out["eager"]["median_s"], out["diag"]["median_s"])
    out["measured_eager_cost_ms_per_token"] = out["eager"]["ms_per_token"] - out["diag"]["ms_per_token"]

    def window(n: str, mode: str) -> tuple[int, float]:
        a = ((c_after[n] or {}).get("draft_extend") or {}).get(mode) or {}
        b = ((c_before[n] or {}).get("draft_extend") or {}).get(mode) or {}
        return a.get("passes", 0) - b.get("passes", 0), a.get("seconds", 0.0) - b.get("seconds", 0.0)

    gp, gs = window("diag", "graph")
    ep, es_ = window("eager", "eager")
    out["counter"] = {"diag_graph_passes": gp, "diag_graph_mean_s": gs / gp if gp else None,
                      "eager_eager_passes": ep, "eager_eager_mean_s": es_ / ep if ep else None}
    ppt = ep / (rounds * tokens) if ep else None
    out["counter"]["passes_per_token"] = ppt
    out["diag_estimate_eager_cost_ms_per_token"] = checks.eager_estimate(
        out["counter"]["diag_graph_mean_s"], out["counter"]["eager_eager_mean_s"], ppt)
    return out


def summary(res: dict) -> str:
    lines = []
    for c in res["checks"]:
        mark = {True: "PASS", False: "FAIL", None: "NOT RUN"}[c["ok"]]
        lines.append(f"{mark:7} {c['name']}: {c['detail'][:300]}")
    t = res.get("timings") or {}
    if t.get("plain"):
        lines.append(f"per token (median of {t['rounds']} interleaved requests of {t['tokens']}): "
                     + ", ".join(f"{n} {t[n]['ms_per_token']:.3f} ms (IQR {1e3 * (t[n]['iqr_s'] or 0) / t['tokens']:.3f})"
                                 for n in ("plain", "diag", "eager", "lite") if n in t))
        lines.append(f"overhead diag/plain {t['overhead_diag_vs_plain']:.3f}x; phase counters "
                     f"alone (lite)/plain {t.get('overhead_lite_vs_plain') or float('nan'):.3f}x; eager/captured "
                     f"{t['eager_vs_captured']:.3f}x; eager cost measured "
                     f"{t['measured_eager_cost_ms_per_token']:.3f} ms/token, diag's estimate "
                     f"{t['diag_estimate_eager_cost_ms_per_token'] or float('nan'):.3f} ms/token")
    for n, pl in (res.get("phase_lines") or {}).items():
        lines.append(f"phases ({n} server): " + "; ".join(pl))
    if res.get("syncs_by_phase") is not None:
        lines.append(f"runtime syncs by phase (diag server): {res['syncs_by_phase']}")
    lines.append(f"servers: {json.dumps(res.get('servers'))}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpu-lane"))
    ap.add_argument("--out", type=Path, default=None, help="write lane.json and summary.txt here")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()
    res = run(a.work, a.rounds, a.tokens)
    text = summary(res)
    print(text)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "lane.json").write_text(json.dumps(res, indent=1, default=str))
        (a.out / "summary.txt").write_text(text + "\n")
    return 0 if all(c["ok"] for c in res["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
