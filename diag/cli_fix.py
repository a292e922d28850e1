"""`diag fix ...`: applicability of every fix to a target, and (later) apply/revert/status/check."""

from __future__ import annotations

import json

import click

from diag.cli_common import build_context, guarded, target_options


@click.group()
def fix() -> None:
    """List, apply, revert and check fixes."""


@fix.command("list")
@target_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a `fixes` list.")
@guarded
def list_(as_json: bool, **target_kw) -> None:
    """Every registered fix and whether it applies to the target."""
    import fixes

    ctx = build_context(**target_kw, execute=False)
    rows = []
    for fid in fixes.all_ids():
        f = fixes.get(fid)
        try:
            a = f.applies_to(ctx.target, ctx.platform)
            status, reason = a.status, a.reason
        except Exception as e:  # a crashing check says so; the list goes on
            status, reason = "refused", f"applicability check crashed: {type(e).__name__}: {e}"
        rows.append({"id": fid, "title": f.title, "status": status, "reason": reason,
                     "depends_on": list(f.depends_on), "addresses": list(f.addresses)})
    if as_json:
        click.echo(json.dumps({"schema_version": 1, "target": ctx.target.to_dict(),
                               "platform": ctx.platform, "fixes": rows}, indent=2))
        return
    click.echo(click.style(f"{ctx.target.describe()}, platform {ctx.platform}", bold=True))
    for r in rows:
        click.echo(f"{r['id']:<32} {r['status']:<11} {r['reason']}")
