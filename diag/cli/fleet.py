"""`diag fleet`: per-instance diag state across a fleet, read from Prometheus (click only here)."""

from __future__ import annotations

import click

from diag.cli.common import Seconds, guarded


def _window(_ctx: click.Context, _param: click.Parameter, value: str) -> int:
    from diag.engine.fleet import parse_window

    try:
        return parse_window(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


@click.command()
@click.option("--prometheus", "url", required=True, metavar="URL",
              envvar="DIAG_PROMETHEUS_URL", show_envvar=True,
              help="Base URL of the Prometheus server that scrapes the SGLang servers' /metrics.")
@click.option("--window", "window_s", default="15m", show_default=True, callback=_window,
              metavar="DURATION", help="How far back to look (30s, 15m, 1h, 1h30m).")
@click.option("--timeout", type=Seconds(min=0.1, max=3600), default=5.0, show_default=True,
              help="Seconds to wait for each Prometheus answer.")
@click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON report.")
@guarded
def fleet(url: str, window_s: int, timeout: float, as_json: bool) -> None:
    """Per instance: fixes on, syncs per step, draft-extend eager share, before/after.

    Reads the diag_* series (recorded by the in-engine agent on SGLang's own /metrics) and
    SGLang's latency and acceptance series from Prometheus. Exit 3 when Prometheus cannot be
    reached.
    """
    import json

    from diag.engine.fleet import collect, render
    from diag.schemas import finite

    report = collect(url, window_s=window_s, timeout=timeout)
    if as_json:
        click.echo(json.dumps(finite(report.to_dict()), indent=2, sort_keys=True))
    else:
        click.echo(render(report))
