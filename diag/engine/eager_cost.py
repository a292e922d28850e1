"""`diag bench eager-cost`: what running draft-extend eager costs a live server, inside it.

Why inside one server: the kill switch's cost measured across two servers on one GPU moved by
±25 % between runs (tests/gpu_lane/lane-h200-run{5,6,9}: identical servers differ by 3-7 %).
Here the diag server's own draft-extend is forced eager and released between batches (a
`mode:draft-extend-eager` control request, acknowledged by every engine process at its next
batch boundary: `diag.engine.agent`, `probes.draft_extend_graph.runtime.FORCE`), the same load
runs in paired windows (graph A, forced eager B, alternating order), and the result is the
per-token difference B - A (ms/token, median with its bootstrap 95 % interval) and the ratio
B/A, next to the noise floor of the same method: adjacent windows in one state, nothing
switched between them (the boundaries of the alternating pairs, `paired.neighbours`). A
forced pass takes SGLang's
own eager path, the one a batch above the largest captured size takes; it is counted eager
with the reason `forced-eager`. The draft-extend graph is released at the end, and a force not
renewed lapses after `FORCE_HOLD_S` (a bench killed mid-way leaves no engine eager).

Next to the measurement, the prediction diag makes from counters alone (`prediction`): the
model `diag fix status` and the allow-list advice use (`runtime.replay_saving`), fed with the
first engine process's counters over these same windows, times the forced passes per eager
token. Why here: across two servers the card's per-token time moved between two levels (1.37
and 1.9 ms at batch 1 inside one server, tests/gpu_lane/lane-h100-run28), so a prediction read
on one server and a cost measured later on another differ by that drift (+22 % and -22 % in
lane-h100-run25 and -run28); over the same windows the model is tested alone.

Windows as in `diag bench overhead` (`overhead.window`). On a server without a captured
draft-extend graph (CPU, or the kill switch) forcing changes nothing: no pass is counted forced
(`forced_passes` 0), the cost and ratio are null (`measured` false, never a number from
windows that compared the graph with itself) and the command exits 3.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from diag import paired
from diag.engine import overhead, rundir
from diag.engine.agent import DE_EAGER
from diag.errors import DiagError
from diag.schemas import SCHEMA_VERSION


def forced_passes(run_dir: Path, pids: list[int]) -> int:
    """Draft-extend passes the engine processes `pids` counted eager because forced, so far."""
    from diag.probes.draft_extend_graph.runtime import FORCED

    n = 0
    for pid in pids:
        de = (rundir.read_process(run_dir, pid).counters or {}).get("draft_extend") or {}
        reasons = (de.get("eager") or {}).get("reasons") or {}
        v = reasons.get(FORCED)
        n += v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0
    return n


def measure(run_dir: str | Path, url: str, windows: int = 20, requests: int = 3,
            tokens: int = 64, concurrency: int = 1, ack_timeout: float = 30.0,
            progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """The paired-windows measurement (module docstring) as a document (eager-cost-v1)."""
    d = rundir.check_run_dir(run_dir)
    found, pids = overhead.engine_probes(d)
    if "draft-extend-graph" not in found:
        raise DiagError(f"{d}: the draft-extend counter is not on in the engine (it carries the "
                        "switch: start the server with `diag run --probe draft-extend-graph` or "
                        "`--probe all`)")
    sw = overhead.Switcher(d, pids)
    timeout = max(60.0, 4.0 * tokens)
    pool = ThreadPoolExecutor(concurrency) if concurrency > 1 else None
    graph: list[float] = []
    eager: list[float] = []
    states: list[bool] = []  # every window's state (forced eager or not), in the order they ran
    spts: list[float] = []
    acks = 0
    forced0 = forced_passes(d, pids)
    before = rundir.read_process(d, pids[0]).counters or {}
    eager_tokens = 0
    try:
        overhead.window(url, concurrency, tokens, concurrency, timeout, pool)  # warm-up
        t0 = time.perf_counter()
        for i, (first, _second) in enumerate(paired.order(windows)):
            for side in (first, "B" if first == "A" else "A"):
                force = side == "B"
                acks += sw.send(DE_EAGER, force, ack_timeout)  # sent where the state changes
                spt, made = overhead.window(url, requests, tokens, concurrency, timeout, pool)
                (eager if force else graph).append(spt)
                eager_tokens += made if force else 0
                states.append(force)
                spts.append(spt)
            progress(f"pair {i + 1}/{windows} done")
        wall = time.perf_counter() - t0
    finally:
        acks += sw.send(DE_EAGER, False, ack_timeout)  # the graph again, whatever happened
        if pool is not None:
            pool.shutdown()
    time.sleep(1.2)  # the counters flush at most once a second
    forced = forced_passes(d, pids) - forced0
    after = rundir.read_process(d, pids[0]).counters or {}
    ratio = paired.paired_ratio(graph, eager)
    med, lo, hi = paired.difference(graph, eager)
    # the floor: adjacent windows in one state (the boundaries B|B, A|A between pairs)
    floor_a, floor_b = paired.neighbours(states, spts)
    floor = paired.paired_ratio(floor_a, floor_b)
    # nothing forced: the windows compared the graph with itself, so no cost was measured
    measured = forced > 0
    return {"schema_version": SCHEMA_VERSION, "kind": "eager-cost", "server": url,
            "run_dir": str(d), "windows": windows, "requests_per_window": requests,
            "tokens": tokens, "concurrency": concurrency, "engine_processes": pids,
            "acks": acks, "wall_s": wall,
            "forced_passes": forced, "measured": measured,
            "eager_cost": {"ms_per_token": 1e3 * med, "lo": 1e3 * lo, "hi": 1e3 * hi}
            if measured else None,
            "ratio": {**ratio.to_dict(), "within_noise": ratio.within(floor)}
            if measured else None,
            "graph_s_per_token": graph, "eager_s_per_token": eager,
            "noise_floor": {**floor.to_dict(), "basis": overhead.FLOOR_BASIS,
                            "a_s_per_token": floor_a,
                            "b_s_per_token": floor_b},
            "prediction": prediction(after, before, eager_tokens,
                                     1e3 * med if measured else None)}


def prediction(after: dict, before: dict, eager_tokens: int, measured_ms: float | None
               ) -> dict[str, Any] | None:
    """What the counters alone predict the eager cost to be over the windows (module
    docstring): the per-pass saving of `replay_saving` times forced passes per eager token, and
    its error against the measured cost where there is one. None without forced passes."""
    from diag.probes.draft_extend_graph.runtime import FORCED, replay_saving, window_counters

    got = replay_saving(window_counters(after, before), (FORCED,))
    if got is None or eager_tokens <= 0:
        return None
    per_pass, passes, basis = got
    ppt = passes / eager_tokens
    out: dict[str, Any] = {"per_token_ms": per_pass * ppt, "per_pass_ms": per_pass,
                           "passes": passes, "passes_per_token": ppt, "basis": basis,
                           "error": None}
    if measured_ms:
        out["error"] = out["per_token_ms"] / measured_ms - 1
    return out


def render(doc: dict[str, Any]) -> str:
    c, r, f = doc["eager_cost"], doc["ratio"], doc["noise_floor"]
    lines = [f"draft-extend forced eager vs graph, inside one server ({doc['windows']} paired "
             f"windows of {doc['requests_per_window']} requests x {doc['tokens']} tokens, "
             f"concurrency {doc['concurrency']}; median with its 95 % interval)"]
    if c is None or r is None:
        lines.append("  not measured: no pass was forced; this server runs draft-extend eager "
                     "already (no captured graph), so there is nothing to compare")
    else:
        lines += [f"  eager cost      {c['ms_per_token']:.3f} ms/token "
                  f"({c['lo']:.3f}-{c['hi']:.3f})",
                  f"  eager/graph     {r['ratio']:.3f} ({r['lo']:.3f}-{r['hi']:.3f})"
                  + ("  within the noise floor" if r["within_noise"] else "")]
    p = doc.get("prediction")
    if p:
        err = "" if p["error"] is None else f", {100 * p['error']:+.1f} % of the measured cost"
        lines.append(f"  counters predict {p['per_token_ms']:.3f} ms/token ({p['per_pass_ms']:.3f} "
                     f"ms a pass x {p['passes_per_token']:.3f} passes a token{err}): "
                     f"{p['basis']}")
    lines += [f"  noise floor     {f['ratio']:.3f} ({f['lo']:.3f}-{f['hi']:.3f})",
              f"  {doc['forced_passes']} draft-extend passes forced eager; {doc['acks']} "
              f"switches acknowledged by {len(doc['engine_processes'])} engine process(es)"]
    return "\n".join(lines)
