"""Step `allowlist`: where the release's draft-extend gate refuses the user's backend, the same
server eager (the kit's) and under `diag run --fix draft-extend-allowlist`: captured, identical
greedy tokens, and the per-token ratio after/before over interleaved rounds with a paired
bootstrap interval (diag.paired, as the GPU lane's allow-list loop). Otherwise one of the two
honest outcomes: already captured, or not applicable (and why)."""

from __future__ import annotations

import time

from diag.kit import checks
from diag.kit.runner import Kit, Step
from diag.kit.steps.base import (
    PROMPTS,
    diag_json,
    engine_counters,
    greedy,
    platform_args,
    ready,
    start_server,
    wait_for,
)

FIX = "draft-extend-allowlist"
CHECKS = ("allowlist-captured", "allowlist-tokens", "allowlist-speed")


class AllowlistStep(Step):
    id = "allowlist"
    title = "draft-extend allow-list fix: eager before, graph after"
    checks = {
        "allowlist-captured": "under the fix draft-extend replays a graph (before: eager)",
        "allowlist-tokens": "greedy tokens identical before and after the fix",
        "allowlist-speed": "per token, after/before below 1 (upper bound of the interval)",
    }

    def _none(self, kit: Kit, outcome: str, why: str, values: dict | None = None) -> None:
        for cid in CHECKS:
            kit.record(cid, "not-run", "", {"outcome": outcome, **(values or {})}, why)

    def run(self, kit: Kit) -> None:
        b = kit.server
        if not kit.gpu:
            return self._none(kit, "not-applicable", "not applicable: no GPU (device "
                              f"{kit.opts.device}), so no phase is captured as a graph and the "
                              "allow-list has no gate to open")
        live = checks.modes(kit.state.get("counters"))
        if live.get("graph"):
            return self._none(kit, "already-captured", "already captured: draft-extend replays "
                              f"a graph on this backend ({live})", {"live": live})
        fl, err = diag_json("fix", "list", "--server", b.url, *platform_args(kit), "--json")
        row = next((f for f in fl.get("fixes", []) if f.get("id") == FIX), None)
        if row is None or row.get("status") != "applicable":
            why = (f"not applicable: {FIX} is {row.get('status')} here: {row.get('reason')}"
                   if row else f"not applicable: diag fix list did not say ({err})")
            return self._none(kit, "not-applicable", why, {"fix_list": row})
        kit.say(f"starting the server again under --fix {FIX}")
        a = ready(kit, start_server(kit, "allowlist", diag_args=("--probe", "all", "--fix", FIX)))
        servers = {"before": b, "after": a}
        toks = {"before": kit.state.get("greedy") or greedy(b, kit.opts.tokens),
                "after": greedy(a, kit.opts.tokens)}
        t = checks.check_equal_tokens("", toks)
        kit.judge("allowlist-tokens", t.ok, t.detail, t.data)
        c0 = {n: engine_counters(s) for n, s in servers.items()}
        times: dict[str, list[float]] = {n: [] for n in servers}
        kit.say(f"{kit.opts.rounds} interleaved rounds of {kit.opts.tokens} tokens")
        for r in range(kit.opts.rounds):
            for n in (("before", "after") if r % 2 == 0 else ("after", "before")):
                t0 = time.perf_counter()
                servers[n].generate(PROMPTS[r % len(PROMPTS)], kit.opts.tokens, timeout=120)
                times[n].append(time.perf_counter() - t0)
        c1 = {n: wait_for(lambda s=s, n=n: (x := engine_counters(s)) and
                          checks.modes(x) != checks.modes(c0[n]) and x, 5) or engine_counters(s)
              for n, s in servers.items()}
        d = {n: checks.delta(checks.modes(c1[n]), checks.modes(c0[n])) for n in servers}
        cap = checks.check_modes("", d["after"], "graph")
        before_eager = d["before"].get("eager", 0) > 0 and not d["before"].get("graph")
        kit.judge("allowlist-captured", cap.ok and before_eager if cap.ok is not None else None,
                  f"draft-extend passes in the timed rounds: before {d['before']}, after "
                  f"{d['after']}", {"passes": d})
        ratio = checks.paired_rounds(times, "before", "after")
        if ratio is None:
            kit.record("allowlist-speed", "not-run", "", {"times": times}, "no paired rounds")
            return
        ms = {n: checks.median_ms_per_token(v, kit.opts.tokens) for n, v in times.items()}
        kit.judge("allowlist-speed", ratio["hi"] < 1.0,
                  f"after/before per token {ratio['ratio']:.3f} ({ratio['lo']:.3f}-"
                  f"{ratio['hi']:.3f}, {ratio['pairs']} pairs); median ms/token before "
                  f"{ms['before']:.3f}, after {ms['after']:.3f}",
                  {"ratio": ratio, "ms_per_token": ms, "outcome": "measured"})
