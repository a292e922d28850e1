"""`diag bench overhead`: what the runtime counters cost a live server, measured inside it.

Why inside one server: two servers on one GPU differ by more than the 1-2 % at stake (the
issue's H200 runs: two identical `--probe all` servers 7 % apart). So the counters are switched
off and on in the same server, between batches, through the control path fixes use (a request
`probe:<id>` apply/revert in the run directory, acknowledged by every engine process at its
next batch boundary: `diag.engine.agent`), and the same load runs in paired windows: one with
the counters off (A), one with the condition's counters on (B), in alternating order (AB, BA,
...). Per pair the per-token time ratio B/A; reported: the median ratio with its bootstrap 95 %
interval (`diag.paired`), per condition (all counters, each alone), next to the noise floor of
the same method with nothing switched: pairs of adjacent windows in one state, the requests
sent all the same (`paired.neighbours`). Every pair ends in the state the next one starts in
(AB|BA|AB), so each boundary is such a pair and the floor costs no window of its own; with
per-counter shares no two conditions' neighbours share a state, and an off/off pair is timed
per pair as well. A counter is asked to switch only where its state changes: the state every engine process last
acknowledged is in place already, and asking again only cost time between windows.

A window is `requests` greedy requests of `tokens` new tokens (`ignore_eos`), sent in waves of
`concurrency` (a wave's requests go together and the next wave waits for all of them: the batch
stays at `concurrency` for the whole wave, never a mix of stragglers and new prefills); its
per-token time is its wall time over the tokens the server says it generated
(`meta_info.completion_tokens`). The counters are left on at the end.

What no switch toggles is reported beside the ratios: the agent's own time (its poll, flush and
control work, `agent_time` events, `diag_agent_seconds_total`) over the measurement, as a share
of its wall time, from the engine processes' folded counters before and after.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from diag import paired
from diag.engine import rundir
from diag.engine.agent import PROBE_PREFIX
from diag.errors import DiagError
from diag.schemas import SCHEMA_VERSION

PROMPT = [5, 6, 7, 8]
FLOOR = "noise-floor"  # the condition with nothing on: a window pair of its own (with shares)
FLOOR_BASIS = "adjacent windows in one state (nothing switched between them)"
SWITCHABLE = ("on", "off")


def engine_probes(run_dir: Path) -> tuple[list[str], list[int]]:
    """(the probes whose counter is on or off in every live engine process, those processes)."""
    st = rundir.read_state(run_dir)
    live = st.live
    engines = [p for p in live if p.engine] or [p for p in live if p.probes]
    if not engines:
        raise DiagError(f"{run_dir}: no live engine process (is the server running under "
                        "`diag run --run-dir`?)")
    sets = [{pid for pid, s in p.probes.items() if (s or {}).get("state") in SWITCHABLE}
            for p in engines]
    common = set.intersection(*sets)
    return sorted(common), [p.pid for p in engines]


class Switcher:
    """Switches the counters of the engine processes `pids` and waits for their answers with
    readers kept across switches (`rundir.wait_ack(readers=...)`: each poll reads only the new
    bytes). Why: a switch before most windows, and an engine's events file grows the whole run;
    read whole for every request, the switches took a second each and more as the run went on."""

    def __init__(self, run_dir: Path, pids: list[int]) -> None:
        self.run_dir, self.pids = run_dir, pids
        self.readers: dict[int, rundir.ProcessReader] = {}
        # each control's state as every engine process last acknowledged it: a window whose
        # state is already in place is not preceded by a request (half the switches of a run,
        # ~0.1-0.2 s each at the agent's 0.2 s poll, went to asking for the state in place)
        self.acked_state: dict[str, bool] = {}

    def acked(self, rid: str) -> bool:
        return any(r.fold.acks.get(rid) is not None for r in self.readers.values())

    def switch(self, probes: list[str], on: set[str], timeout: float) -> int:
        """Ask every engine process to set each probe's counter on (in `on`) or off, where its
        acknowledged state differs; wait for each one's acknowledgement. How many; a DiagError
        (exit 3) when one is missing or not ok."""
        rids = {p: rundir.request(self.run_dir, PROBE_PREFIX + p,
                                  "apply" if p in on else "revert", acked=self.acked)
                for p in probes if self.acked_state.get(PROBE_PREFIX + p) != (p in on)}
        for p in rids:  # unknown until every process answers (a wait that fails leaves it so)
            self.acked_state.pop(PROBE_PREFIX + p, None)
        n = 0
        for p, rid in rids.items():
            n += self._wait(f"probe {p}", rid, timeout)
            self.acked_state[PROBE_PREFIX + p] = p in on
        return n

    def send(self, control_id: str, apply: bool, timeout: float) -> int:
        """One control request (`control_id`, apply or revert) to every engine process, waited
        for like a switch; how many acknowledged."""
        if self.acked_state.get(control_id) == apply:
            return 0
        rid = rundir.request(self.run_dir, control_id, "apply" if apply else "revert",
                             acked=self.acked)
        self.acked_state.pop(control_id, None)
        n = self._wait(control_id, rid, timeout)
        self.acked_state[control_id] = apply
        return n

    def _wait(self, what: str, rid: str, timeout: float) -> int:
        acks = rundir.wait_ack(self.run_dir, rid, timeout=timeout, interval=0.02,
                               engines_only=True, readers=self.readers)
        for pid in self.pids:
            a = acks.get(pid)
            if a is None:
                raise DiagError(f"{what}: process {pid} did not acknowledge the switch "
                                f"within {timeout:g} s")
            if not a.get("ok"):
                raise DiagError(f"{what}: process {pid} refused the switch: {a.get('reason')}")
        return len(self.pids)


def _generate(url: str, tokens: int, timeout: float) -> int:
    doc = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": tokens, "temperature": 0,
                                                   "ignore_eos": True}}
    req = urllib.request.Request(url.rstrip("/") + "/generate", data=json.dumps(doc).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise DiagError(f"{url}/generate: {e}") from None
    body = body[0] if isinstance(body, list) and body else body
    got = (body.get("meta_info") or {}).get("completion_tokens") if isinstance(body, dict) else None
    return int(got) if isinstance(got, int) and got > 0 else tokens


def window(url: str, requests: int, tokens: int, concurrency: int, timeout: float,
           pool: ThreadPoolExecutor | None = None) -> tuple[float, int]:
    """(seconds per generated token, tokens generated) over one window of requests, sent in
    waves of `concurrency` (module docstring)."""
    made = 0
    t0 = time.perf_counter()
    if concurrency <= 1 or pool is None:
        made = sum(_generate(url, tokens, timeout) for _ in range(requests))
    else:
        left = requests
        while left > 0:
            wave = min(concurrency, left)
            made += sum(pool.map(lambda _i: _generate(url, tokens, timeout), range(wave)))
            left -= wave
    return (time.perf_counter() - t0) / max(1, made), made


def agent_seconds(run_dir: Path, pids: list[int]) -> float:
    """The agent's own time so far (every `where`), summed over the processes `pids`."""
    total = 0.0
    for pid in pids:
        sec = (rundir.read_process(run_dir, pid).counters or {}).get("agent") or {}
        total += sum(float((v or {}).get("seconds") or 0.0) for v in sec.values())
    return total


def measure(run_dir: str | Path, url: str, windows: int = 8, requests: int = 4,
            tokens: int = 32, concurrency: int = 1, probes: list[str] | None = None,
            ack_timeout: float = 30.0, shares: bool = True, max_seconds: float | None = None,
            progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """The paired-windows measurement (module docstring) as a document (overhead-v1.json).
    `max_seconds` bounds the timed pairs (a job with a time limit): no pair starts once it is
    spent (two pairs at least), and `windows` says how many ran. Stopping on time, never on a
    result, leaves the interval honest: it is only as wide as the pairs that ran."""
    d = rundir.check_run_dir(run_dir)
    found, pids = engine_probes(d)
    chosen = list(probes) if probes else found
    missing = [p for p in chosen if p not in found]
    if missing:
        raise DiagError(f"probe {missing[0]!r} has no switchable counter in this run "
                        f"(switchable: {', '.join(found) or 'none'})")
    if not chosen:
        raise DiagError(f"{d}: no runtime counter is on in the engine (start it with "
                        "`diag run --probe all`)")
    conditions: list[tuple[str, set[str]]] = [("all", set(chosen))]
    if shares and len(chosen) > 1:
        conditions += [(p, {p}) for p in chosen]
        # between conditions no two neighbours share a state: a floor pair of its own per pair
        conditions.append((FLOOR, set()))
    samples: dict[str, tuple[list[float], list[float]]] = {c: ([], []) for c, _ in conditions}
    states: list[frozenset[str]] = []  # every window's counters, in the order they ran
    spts: list[float] = []
    sw = Switcher(d, pids)
    acks = made = 0
    timeout = max(60.0, 4.0 * tokens)
    pool = ThreadPoolExecutor(concurrency) if concurrency > 1 else None
    try:
        window(url, concurrency, tokens, concurrency, timeout, pool)  # warm-up (one wave)
        agent0, wall0 = agent_seconds(d, pids), time.perf_counter()
        done = 0
        for i, (first, _second) in enumerate(paired.order(windows)):
            if max_seconds is not None and i >= 2 and time.perf_counter() - wall0 >= max_seconds:
                break
            for name, on in conditions:
                a, b = samples[name]
                for side in (first, "B" if first == "A" else "A"):
                    state = on if side == "B" else set()
                    acks += sw.switch(chosen, state, ack_timeout)
                    spt, n = window(url, requests, tokens, concurrency, timeout, pool)
                    (b if side == "B" else a).append(spt)
                    states.append(frozenset(state))
                    spts.append(spt)
                    made += n
            done = i + 1
            progress(f"pair {done}/{windows} done")
        wall = time.perf_counter() - wall0
    finally:
        acks += sw.switch(chosen, set(chosen), ack_timeout)  # leave the counters on
        if pool is not None:
            pool.shutdown()
    agent = max(0.0, agent_seconds(d, pids) - agent0)
    floor_a, floor_b = paired.neighbours(states, spts)
    floor = paired.paired_ratio(floor_a, floor_b)
    results = []
    for name, on in conditions:
        if name == FLOOR:
            continue
        a, b = samples[name]
        r = paired.paired_ratio(a, b)
        results.append({"condition": name, "probes_on": sorted(on), **r.to_dict(),
                        "within_noise": r.within(floor), "off_s_per_token": a,
                        "on_s_per_token": b})
    return {"schema_version": SCHEMA_VERSION, "kind": "overhead", "server": url,
            "run_dir": str(d), "windows": done, "windows_asked": windows,
            "max_seconds": max_seconds, "requests_per_window": requests,
            "tokens": tokens, "concurrency": concurrency, "probes": chosen,
            "engine_processes": pids, "acks": acks, "results": results,
            "agent_own": {"seconds": agent, "wall_s": wall, "share": agent / wall if wall else None,
                          "tokens": made, "s_per_token": agent / made if made else None},
            "noise_floor": {**floor.to_dict(), "basis": FLOOR_BASIS, "a_s_per_token": floor_a,
                            "b_s_per_token": floor_b}}


def render(doc: dict[str, Any]) -> str:
    f = doc["noise_floor"]
    asked = doc.get("windows_asked", doc["windows"])
    cut = f" of {asked} asked, stopped at --max-seconds {doc['max_seconds']:g}" \
        if asked != doc["windows"] else ""
    lines = [f"counters' cost per token, inside one server ({doc['windows']}{cut} paired windows of "
             f"{doc['requests_per_window']} requests x {doc['tokens']} tokens, concurrency "
             f"{doc['concurrency']}; ratio on/off, median with its 95 % interval)"]
    for r in doc["results"]:
        what = "every counter" if r["condition"] == "all" else r["condition"]
        note = "  within the noise floor" if r["within_noise"] else ""
        lines.append(f"  {what:<24} {r['ratio']:.3f} ({r['lo']:.3f}-{r['hi']:.3f}){note}")
    lines.append(f"  {'noise floor':<24} {f['ratio']:.3f} ({f['lo']:.3f}-{f['hi']:.3f}, "
                 f"{f['pairs']} pairs of neighbours in one state)")
    own = doc.get("agent_own") or {}
    if own.get("share") is not None:
        lines.append(f"  the agent's own work (poll, flush, control; on in every window): "
                     f"{own['seconds'] * 1e3:.1f} ms in {own['wall_s']:.0f} s, "
                     f"{own['share'] * 100:.2f} % of the wall time")
    lines.append(f"  {doc['acks']} switches acknowledged by {len(doc['engine_processes'])} "
                 "engine process(es)")
    return "\n".join(lines)
