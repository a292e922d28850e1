"""`diag env`: the facts a bug report needs (imports only click at module level)."""

from __future__ import annotations

import json

import click

from diag.cli.common import given, guarded, log


@click.command()
@click.option("--sglang", "sglang", metavar="PATH|VERSION", callback=given,
              help="Report this SGLang instead of the importable one.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema_version 1).")
@guarded
def env(sglang: str | None, as_json: bool) -> None:
    """Torch/HIP/CUDA versions, GPUs, the SGLang release, relevant variables, running servers."""
    from diag.envinfo import collect, render

    doc = collect(sglang, log=log)
    doc["agent_runs"] = agent_runs()  # engines started under `diag run`
    click.echo(json.dumps(doc, indent=2, default=str) if as_json
               else render(doc) + render_agent_runs(doc["agent_runs"]))


def agent_runs() -> list[dict]:
    """Live run directories (psutil scan + registry) with each process's fix states."""
    try:
        from diag.engine import rundir

        out = []
        for d in rundir.discover():
            st = rundir.read_state(d)
            out.append({"run_dir": st.run_dir, "cmd": st.meta.get("cmd"),
                         "processes": [{"pid": p.pid, "alive": p.alive, "sglang": p.sglang,
                                        "fixes": {k: v.get("state") for k, v in p.fixes.items()}}
                                       for p in st.live]})
        return out
    except Exception as e:  # a fact we could not read, not a failure of `diag env`
        return [{"error": f"{type(e).__name__}: {e}"}]


def render_agent_runs(runs: list[dict]) -> str:
    lines = ["", "engines under diag run:" + ("" if runs else " none found")]
    for r in runs:
        if "error" in r:
            lines.append(f"  cannot read run directories: {r['error']}")
            continue
        lines.append(f"  {r['run_dir']}  {' '.join(r.get('cmd') or [])}")
        for p in r["processes"]:
            fixes = ", ".join(f"{k}={v}" for k, v in sorted(p["fixes"].items())) or "no fixes"
            lines.append(f"    pid {p['pid']}: {fixes}")
    return "\n".join(lines)
