"""`diag bench`: each fix's before/after measurement on the local device."""

from __future__ import annotations

import importlib
import importlib.util
import json

import click

from diag.cli.common import guarded, log
from diag.errors import DiagError
from diag.schemas import SCHEMA_VERSION


@click.command()
@click.argument("fix_ids", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
@click.option("--quick", is_flag=True, help="Fewer repeats (a smoke run, not a measurement).")
@click.option("--sglang", "sglang", metavar="PATH|VERSION",
              help="The SGLang release whose real code a bench runs (default: as diagnose).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Bench parameter (e.g. layers=12, hidden=1024, batch=8).")
@click.option("--out", type=click.Path(dir_okay=False), help="Also write the JSON here.")
@guarded
def bench(fix_ids: tuple[str, ...], as_json: bool, quick: bool, sglang: str | None,
          params: tuple[str, ...], out: str | None) -> None:
    """Measure each fix before and after (all fixes with a bench, or FIX_IDS)."""
    from diag import fixes
    from diag.bench import render

    ids = list(fix_ids) or [f for f in fixes.all_ids() if getattr(fixes.get(f), "bench", None)]
    unknown = [f for f in ids if f not in fixes.REGISTRY]
    if unknown:
        raise click.UsageError(f"unknown fix {unknown[0]!r} (known: {', '.join(fixes.REGISTRY)})")
    if importlib.util.find_spec("torch") is None:
        raise DiagError("torch is not installed: diag bench measures with the local torch "
                        "(install diag into the environment that runs SGLang)")
    kv: dict[str, object] = {"quick": quick, "sglang": sglang}
    for p in params:
        if "=" not in p:
            raise click.UsageError(f"--param {p!r}: expected KEY=VALUE")
        k, v = p.split("=", 1)
        kv[k] = int(v) if v.lstrip("-").isdigit() else v
    results = []
    for fid in ids:
        path = getattr(fixes.get(fid), "bench", None)
        if not path:
            log(f"{fid}: no bench")
            continue
        module, attr = path.split(":")
        log(f"bench {fid} ...")
        results.append(getattr(importlib.import_module(module), attr)(dict(kv), log))
    doc = {"schema_version": SCHEMA_VERSION, "benches": [r.to_dict() for r in results]}
    click.echo(json.dumps(doc, indent=2) if as_json else render(results))
    if out:  # after printing: a bad --out path must not lose a long run's results
        try:
            with open(out, "w") as fh:
                json.dump(doc, fh, indent=2)
        except OSError as e:
            raise DiagError(f"cannot write {out}: {e.strerror}") from None
