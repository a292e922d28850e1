"""Programs the metrics and fleet tests run in real subprocesses (not a test module).

`spawn`: a stand-in for SGLang's launcher pattern (it sets `PROMETHEUS_MULTIPROC_DIR` the way
`set_prometheus_multiproc_dir` does, then starts children with `multiprocessing` spawn, as
`entrypoints/engine.py` does). The children emit diag telemetry; the parent reads their `diag_*`
series with `prometheus_client`'s `MultiProcessCollector` and prints them as JSON lines.

`serve`: a small exporter for the Prometheus test: two spawned children emit telemetry in a loop
and, on SIGUSR1, one fix goes from `reverted` to `applied` (syncs drop to 0, draft-extend goes
from eager to graph). The parent serves the merged multiprocess registry over
HTTP on 127.0.0.1. It also records a stand-in `sglang:inter_token_latency_seconds` histogram
(the real name, written by this stand-in, not by SGLang) so `diag fleet`'s SGLang queries have
data.

Neither imports `prometheus_client` before the variable is set.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import time

FIX = "repeat-interleave-output-size"


def _install_sink(via_agent: bool) -> str:
    """Under `diag run` the agent installs the sink; otherwise install it here."""
    import diag.engine.metrics

    if not via_agent:
        diag.engine.metrics.install()
    return diag.engine.metrics.status()


def spawn_child(index: int, via_agent: bool, ready, release) -> None:
    from diag import telemetry

    status = _install_sink(via_agent)
    telemetry.emit("fix", fix=FIX, state="applied", reason="test")
    for _ in range(3 + index):
        telemetry.emit("syncs", builder="DeepseekV4HipRadixBackend._attach_unified_kv_prefill_meta",
                       count=2, seconds=0.01)
    telemetry.emit("draft_extend", mode="eager", seconds=0.0011, batch=8)
    telemetry.emit("draft_extend", mode="graph", seconds=0.0002, batch=8)
    telemetry.emit("profiler_stop", seconds=0.25, collected=77, teardown="cycle-broken",
                   teardown_s=0.001)
    line = json.dumps({"child": index, "pid": os.getpid(), "status": status,
                       "prometheus_client_loaded": "prometheus_client" in sys.modules})
    os.write(1, (line + "\n").encode())  # one write (< PIPE_BUF): lines of children never mix
    ready.set()
    release.wait(60)


def _samples() -> list[dict]:
    from prometheus_client import CollectorRegistry, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    out = []
    for family in registry.collect():
        for s in family.samples:
            if s.name.startswith("diag_"):
                out.append({"name": s.name, "labels": s.labels, "value": s.value})
    return out


def main_spawn(args: argparse.Namespace) -> None:
    # The stand-in launcher: what set_prometheus_multiproc_dir does, then spawn.
    loaded_before = "prometheus_client" in sys.modules
    made = None
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        made = os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="diag-prom-")
    try:
        _spawn_and_read(args, loaded_before)
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)


def _spawn_and_read(args: argparse.Namespace, loaded_before: bool) -> None:
    ctx = mp.get_context("spawn")
    release = ctx.Event()
    readies, procs = [], []
    for i in range(args.children):
        ready = ctx.Event()
        p = ctx.Process(target=spawn_child, args=(i, args.via_agent, ready, release))
        p.start()
        readies.append(ready)
        procs.append(p)
    ok = all(r.wait(60) for r in readies)
    print(json.dumps({"parent": os.getpid(), "children_ready": ok,
                      "children": [p.pid for p in procs],
                      "prometheus_client_loaded_before_var": loaded_before,
                      "samples_live": _samples()}), flush=True)
    release.set()
    for p in procs:
        p.join(60)
    print(json.dumps({"exitcodes": [p.exitcode for p in procs],
                      "samples_after_exit": _samples()}), flush=True)


def serve_child(index: int, flip, stop) -> None:
    # The parent stops us through `stop`; a child killed by a signal while it holds the
    # Event's lock would leave the parent waiting forever on stop.set().
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import diag.engine.metrics
    from diag import telemetry

    diag.engine.metrics.install()
    from prometheus_client import Histogram

    # Stand-in for SGLang's histogram of the same name (SGLang is not running here).
    itl = Histogram("sglang:inter_token_latency_seconds", "stand-in", registry=None,
                    buckets=(0.005, 0.01, 0.02, 0.05, 0.1))
    applied = False
    telemetry.emit("fix", fix=FIX, state="reverted", reason="start")
    builder = "DeepseekSparseAttnBackend.init_forward_metadata"
    while not stop.is_set():
        if not applied and flip.is_set():
            applied = True
            telemetry.emit("fix", fix=FIX, state="applied", reason="flip")
        telemetry.emit("syncs", builder=builder, count=0 if applied else 2,
                       seconds=0.0002 if applied else 0.011)
        telemetry.emit("draft_extend", mode="graph" if applied else "eager",
                       seconds=0.0002 if applied else 0.0011, batch=8)
        itl.observe(0.018 if applied else 0.021)
        stop.wait(0.05)


def main_serve(args: argparse.Namespace) -> None:
    made = os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="diag-prom-serve-")
    try:
        _serve(args)
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _serve(args: argparse.Namespace) -> None:
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    ctx = mp.get_context("spawn")
    stop, flip = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=serve_child, args=(i, flip, stop))
             for i in range(args.children)]
    for p in procs:
        p.start()
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    print(json.dumps({"port": server.server_port}), flush=True)

    # Signal handlers only set plain flags: setting a multiprocessing Event inside a handler can
    # deadlock with the main thread waiting on it.
    asked: set[str] = set()
    signal.signal(signal.SIGTERM, lambda *_: asked.add("stop"))
    signal.signal(signal.SIGINT, lambda *_: asked.add("stop"))
    signal.signal(signal.SIGUSR1, lambda *_: asked.add("flip"))
    while "stop" not in asked and all(p.is_alive() for p in procs):
        if "flip" in asked and not flip.is_set():
            flip.set()
        time.sleep(0.1)
    stop.set()
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("spawn")
    sp.add_argument("--children", type=int, default=2)
    sp.add_argument("--via-agent", action="store_true",
                    help="the diag agent (diag run) installs the sink, not this program")
    sv = sub.add_parser("serve")
    sv.add_argument("--children", type=int, default=2)
    args = parser.parse_args()
    main_spawn(args) if args.cmd == "spawn" else main_serve(args)


if __name__ == "__main__":
    main()
