"""`diag bench overhead`: the runtime counters' cost per token in a live server, switched off
and on inside it in paired windows (`diag.engine.overhead`); `diag bench eager-cost`: what
draft-extend eager costs it, forced and released inside it the same way
(`diag.engine.eager_cost`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import click

from diag.cli.common import RUN_DIR, _server_url, guarded, log
from diag.errors import EXIT_OPERATIONAL


def window_options(windows: int, windows_help: str, requests: int, tokens: int,
                   schema: str) -> Callable:
    """The options both live-server benches take (run dir, server, the paired windows' shape,
    --json); each its own defaults."""
    opts = [
        click.option("--run-dir", "run_dir", required=True, type=RUN_DIR,
                     help="The run directory of the server (`diag run --run-dir D --probe ...`)."),
        click.option("--server", "server", required=True, callback=_server_url, metavar="URL",
                     help="The server's URL (its /generate is timed)."),
        click.option("--windows", type=click.IntRange(2, 1000), default=windows,
                     show_default=True, help=windows_help),
        click.option("--requests-per-window", "requests", type=click.IntRange(1, 10000),
                     default=requests, show_default=True, help="Requests timed in one window."),
        click.option("--tokens", type=click.IntRange(1, 100000), default=tokens,
                     show_default=True, help="New tokens per request (greedy, ignore_eos)."),
        click.option("--concurrency", type=click.IntRange(1, 1024), default=1,
                     show_default=True,
                     help="Requests in flight at once (the batch size the server sees)."),
        click.option("--json", "as_json", is_flag=True,
                     help=f"Print the result as JSON (diag/schemas/{schema})."),
    ]

    def decorate(f: Callable) -> Callable:
        for opt in reversed(opts):
            f = opt(f)
        return f

    return decorate


@click.command()
@window_options(8, "Pairs of windows per condition (counters off / on, alternating order).",
                4, 32, "overhead-v1.json")
@click.option("--probe", "probes", multiple=True, metavar="ID",
              help="Only these probes' counters (default: every one on in the engine).")
@click.option("--shares/--no-shares", default=True, show_default=True,
              help="Also each counter alone (its share); --no-shares: every counter together, "
                   "its noise floor from the pairs' boundaries: k + 2 times the pairs in the "
                   "same time for k counters.")
@click.option("--max-seconds", type=click.FloatRange(1, 86400), default=None,
              help="A time budget for the timed pairs: no pair starts once it is spent (two "
                   "at least); the result says how many ran.")
@guarded
def overhead(run_dir: str, server: str, windows: int, requests: int, tokens: int,
             concurrency: int, probes: tuple[str, ...], shares: bool, max_seconds: float | None,
             as_json: bool) -> None:
    """What the runtime counters cost per token, switched off and on inside one live server
    between batches, in paired windows, next to the noise floor of the same method."""
    from diag.engine import overhead as ov

    doc = ov.measure(run_dir, server, windows=windows, requests=requests, tokens=tokens,
                     concurrency=concurrency, probes=list(probes) or None, shares=shares,
                     max_seconds=max_seconds, progress=log)
    click.echo(json.dumps(doc, indent=2) if as_json else ov.render(doc))


@click.command()
@window_options(20, "Pairs of windows (graph / forced eager, alternating order), and as many "
                "for the noise floor.", 3, 64, "eager-cost-v1.json")
@guarded
def eager_cost(run_dir: str, server: str, windows: int, requests: int, tokens: int,
               concurrency: int, as_json: bool) -> None:
    """What draft-extend eager costs per token: forced eager and released inside one live
    server between batches (SGLang's own eager path), in paired windows, next to the noise
    floor of the same method. The graph is released at the end. Exit 3 when no pass could be
    forced (no captured draft-extend graph): nothing was measured."""
    from diag.engine import eager_cost as ec

    doc = ec.measure(run_dir, server, windows=windows, requests=requests, tokens=tokens,
                     concurrency=concurrency, progress=log)
    click.echo(json.dumps(doc, indent=2) if as_json else ec.render(doc))
    if not doc["measured"]:
        log("error: no draft-extend pass was forced (no captured graph on this server): "
            "nothing measured")
        sys.exit(EXIT_OPERATIONAL)
