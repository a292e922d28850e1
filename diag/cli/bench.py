"""`diag bench`: each fix's before/after measurement on the local device."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import click

from diag.cli.common import given, guarded, log
from diag.errors import EXIT_USAGE, DiagError, clip, echo
from diag.schemas import SCHEMA_VERSION


def _out_path(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """--out is checked before the benchmark runs: its folder must exist and be writable."""
    if value is None:
        return None
    path = Path(value).expanduser()
    folder = path.parent if str(path.parent) else Path(".")
    if not str(value).strip() or path.is_dir():
        raise click.BadParameter(f"{value!r} is a directory, not a file" if path.is_dir()
                                 else "empty path")
    if not folder.is_dir():
        raise click.BadParameter(f"{value}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists()
                                                    and not os.access(path, os.W_OK)):
        raise click.BadParameter(f"{value}: not writable here")
    return value


QUICK = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def bench_params(ids: list[str], raw: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Per bench (fix id), its --param values parsed by the declaration beside it (`PARAMS`);
    a key no selected bench takes, or a bad value, is a usage error naming the bench."""
    from diag import fixes

    decl = {}
    for fid in ids:
        path = getattr(fixes.get(fid), "bench", None)
        if path:
            decl[fid] = getattr(importlib.import_module(path.split(":")[0]), "PARAMS", {})
    out: dict[str, dict[str, Any]] = {fid: {} for fid in decl}
    for p in raw:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise click.UsageError(f"--param {echo(p)}: expected KEY=VALUE")
        if k == "quick":  # the --quick flag, for every bench
            if v.lower() not in QUICK:
                raise click.UsageError(f"--param quick={echo(v)}: expected 1 or 0")
            for d in out.values():
                d["quick"] = QUICK[v.lower()]
            continue
        takers = [fid for fid, d in decl.items() if k in d]
        if not takers:
            known = "; ".join(f"{fid}: {', '.join(d)}" for fid, d in decl.items() if d)
            raise click.UsageError(f"--param {clip(k)}: no selected bench takes it ({known})")
        for fid in takers:
            try:
                out[fid][k] = decl[fid][k].parse(v)
            except ValueError as e:
                raise DiagError(f"--param {k}={echo(v)}: {e} (the bench of {fid})",
                                exit_code=EXIT_USAGE) from None
    return out


class _BenchCommand(click.Command):
    """`diag bench overhead ...` is its own command (the counters' cost in a live server);
    anything else is the fixes' benches."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        if args and args[0] == "overhead":
            from diag.cli.bench_overhead import overhead

            return overhead.make_context(f"{info_name} overhead", list(args[1:]), parent=parent,
                                         **extra)
        if args and args[0] == "eager-cost":
            from diag.cli.bench_overhead import eager_cost

            return eager_cost.make_context(f"{info_name} eager-cost", list(args[1:]),
                                           parent=parent, **extra)
        return super().make_context(info_name, args, parent=parent, **extra)


@click.command(cls=_BenchCommand, epilog="`diag bench overhead --help`: what the runtime "
               "counters cost a live server, measured inside it; `diag bench eager-cost "
               "--help`: what draft-extend eager costs it, forced inside it.")
@click.argument("fix_ids", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
@click.option("--quick", is_flag=True, help="Fewer repeats (a smoke run, not a measurement).")
@click.option("--sglang", "sglang", metavar="PATH|VERSION", callback=given,
              help="The SGLang release whose real code a bench runs (default: as diagnose).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Bench parameter (e.g. layers=12, hidden=1024, batch=8).")
@click.option("--out", callback=_out_path, metavar="FILE",
              help="Also write the JSON here (its folder must exist).")
@guarded
def bench(fix_ids: tuple[str, ...], as_json: bool, quick: bool, sglang: str | None,
          params: tuple[str, ...], out: str | None) -> None:
    """Measure each fix before and after (all fixes with a bench, or FIX_IDS)."""
    from diag import fixes
    from diag.bench import render

    ids = list(fix_ids) or [f for f in fixes.all_ids() if getattr(fixes.get(f), "bench", None)]
    unknown = [f for f in ids if f not in fixes.REGISTRY]
    if unknown:
        raise click.UsageError(f"unknown fix {echo(unknown[0])} (known: {', '.join(fixes.REGISTRY)})")
    per_bench = bench_params(ids, params)
    if importlib.util.find_spec("torch") is None:
        raise DiagError("torch is not installed: diag bench measures with the local torch "
                        "(install diag into the environment that runs SGLang)")
    results = []
    for fid in ids:
        path = getattr(fixes.get(fid), "bench", None)
        if not path:
            log(f"{fid}: no bench")
            continue
        module, attr = path.split(":")
        log(f"bench {fid} ...")
        kv = {"quick": quick, "sglang": sglang, **per_bench.get(fid, {})}
        kv["quick"] = bool(kv["quick"] or quick)
        results.append(getattr(importlib.import_module(module), attr)(kv, log))
    doc = {"schema_version": SCHEMA_VERSION, "benches": [r.to_dict() for r in results]}
    click.echo(json.dumps(doc, indent=2) if as_json else render(results))
    if out:  # after printing: a bad --out path must not lose a long run's results
        try:
            with open(out, "w") as fh:
                json.dump(doc, fh, indent=2)
        except OSError as e:
            raise DiagError(f"cannot write {out}: {e.strerror}") from None
