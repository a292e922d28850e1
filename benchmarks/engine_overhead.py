"""What `diag run` costs a real SGLang server: time to ready and per-request latency.

The same server (SGLang 0.5.23 on CPU, EAGLE, the tiny target + draft of tests/engine_models.py,
the sgl_kernel stand-in of tests/engine_standins) is started plainly and under
`diag run --probe all`, interleaved (plain, diag, diag, plain, ...) for a few rounds. Per start:
seconds from spawn to the first answered 1-token request (after SGLang's own warm-up), then
`--requests` greedy requests of `--tokens` tokens, one at a time; the request latency is their
median. Reported: medians over rounds and the ratios diag/plain. Targets: <= 1.10x ready,
<= 1.05x latency. Needs the SGLang environment (scripts/sglang-env.sh, scripts/engine-env.sh).

    python benchmarks/engine_overhead.py [--rounds 3] [--requests 20] [--tokens 32] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import engine_models  # noqa: E402
import engine_server  # noqa: E402


def _one(release_root: Path, models: dict, tmp: Path, diag: bool, n: int, tokens: int,
         tag: str) -> dict:
    s = engine_server.start(release_root, models["bigram"], tmp / f"{tag}.log",
                            draft=models["draft"], run_dir=(tmp / f"{tag}-run") if diag else None)
    try:
        s.generate([5, 6, 7], tokens)  # one untimed request
        lat = []
        for i in range(n):
            t0 = time.perf_counter()
            doc = s.generate([5 + i % 50, 6, 7], tokens)
            lat.append(time.perf_counter() - t0)
            assert len(doc["output_ids"]) == tokens
        return {"ready_s": s.ready_s, "latency_s": statistics.median(lat)}
    finally:
        s.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    why = engine_server.missing_env()
    if why:
        print(f"engine_overhead: {why}", file=sys.stderr)
        return 3
    from diag.target import from_release

    release_root = from_release("0.5.23").root
    runs: dict[str, list[dict]] = {"plain": [], "diag": []}
    with tempfile.TemporaryDirectory(prefix="diag-engine-bench-") as td:
        tmp = Path(td)
        made = engine_models.in_env(engine_server.VENV_PY, "make", tmp / "models", 0)
        models = {k: Path(v) for k, v in made.items()}
        for r in range(a.rounds):
            order = ("plain", "diag") if r % 2 == 0 else ("diag", "plain")
            for kind in order:
                res = _one(release_root, models, tmp, kind == "diag", a.requests, a.tokens,
                           f"{kind}{r}")
                runs[kind].append(res)
                print(f"round {r} {kind:<5} ready {res['ready_s']:.1f} s  "
                      f"latency {res['latency_s'] * 1e3:.1f} ms", file=sys.stderr)
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("ready_s", "latency_s")}
           for k, v in runs.items()}
    ratio = {m: med["diag"][m] / med["plain"][m] for m in ("ready_s", "latency_s")}
    doc = {"rounds": a.rounds, "requests": a.requests, "tokens": a.tokens, "runs": runs,
           "median": med, "ratio": ratio, "targets": {"ready_s": 1.10, "latency_s": 1.05}}
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"{'':<8}{'ready (s)':>12}{'latency (ms)':>15}")
        for k in ("plain", "diag"):
            print(f"{k:<8}{med[k]['ready_s']:>12.2f}{med[k]['latency_s'] * 1e3:>15.2f}")
        print(f"{'ratio':<8}{ratio['ready_s']:>11.3f}x{ratio['latency_s']:>14.3f}x"
              "   (targets 1.10x, 1.05x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
