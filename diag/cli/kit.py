"""`diag kit run` / `diag kit compare`: the field kit (diag.kit), thin over its runner."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import click

from diag.cli.common import Seconds, given, guarded


@click.group()
def kit() -> None:
    """The field kit: prove it on your host in one command, compare two hosts."""


def _words(_ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(value or ""))
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


@kit.command("run")
@click.option("--model", type=click.Path(exists=True, file_okay=False), callback=given,
              help="The target model folder. Default: a tiny bigram model made here, with an "
                   "EAGLE draft that agrees with it (as the GPU lane does).")
@click.option("--draft-model", type=click.Path(exists=True, file_okay=False), callback=given,
              help="The EAGLE draft model folder (with --model).")
@click.option("--attention-backend", metavar="NAME", callback=given,
              help="The server's --attention-backend (default: SGLang's choice).")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto",
              show_default=True, help="The server's --device (auto: cuda when the server's "
                                      "torch sees a GPU, ROCm included).")
@click.option("--speculative-args", "speculative", metavar="ARGS", callback=_words,
              default="--speculative-algorithm EAGLE --speculative-num-steps 2 "
                      "--speculative-eagle-topk 1 --speculative-num-draft-tokens 3",
              show_default=True, help="The speculative-decoding arguments of the server.")
@click.option("--server-args", metavar="ARGS", callback=_words, default="",
              help="More arguments for sglang.launch_server (one string, shell words).")
@click.option("--python", "python", metavar="PATH", default=sys.executable,
              help="The python that runs SGLang. Default: this one.")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Where kit.json, summary.md and the servers' logs go (default: "
                   "./diag-kit-<UTC time>).")
@click.option("--crash", is_flag=True,
              help="Also the profiler A/B: starts servers that may crash on purpose.")
@click.option("--step-timeout", type=Seconds(min=1.0), default=600.0, show_default=True,
              help="Hard time limit of each step, in seconds.")
@click.option("--rounds", type=click.IntRange(2, 1000), default=20, show_default=True,
              help="Interleaved rounds of the allow-list before/after timing.")
@click.option("--tokens", type=click.IntRange(1, 4096), default=32, show_default=True,
              help="Tokens per greedy request.")
@click.option("--crash-servers", type=click.IntRange(1, 8), default=2, show_default=True,
              help="Servers per side of the profiler A/B.")
@click.option("--crash-profiles", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Stage profiles sent to each server of the profiler A/B.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the JSON (kit-v1) to stdout; no progress on stderr.")
@guarded
def run(model: str | None, draft_model: str | None, attention_backend: str | None,
        device: str, speculative: tuple[str, ...], server_args: tuple[str, ...], python: str,
        out: str | None, crash: bool, step_timeout: float, rounds: int, tokens: int,
        crash_servers: int, crash_profiles: int, as_json: bool) -> None:
    """Start the servers it needs on this host's SGLang (under `diag run`), run what the
    platform allows of the GPU lane's checks, write kit.json and summary.md, stop every
    process it started (also on Ctrl-C / SIGTERM: the partial JSON is kept).

    Exit codes: 0 every check that ran passed, 1 a check failed, 2 usage, 3 a step could not
    do its work (no SGLang, the server did not start, a step past --step-timeout), 130
    interrupted (Ctrl-C or SIGTERM).
    """
    from diag.kit.runner import Options, stderr_progress
    from diag.kit.runner import run as run_kit
    from diag.kit.steps import all_steps

    if draft_model and not model:
        raise click.UsageError("--draft-model goes with --model")
    if model and not draft_model and "EAGLE" in " ".join(speculative).upper():
        raise click.UsageError("EAGLE needs --draft-model with --model (or --speculative-args "
                               "for an algorithm without a draft model, e.g. NEXTN)")
    where = Path(out) if out else Path(f"diag-kit-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    opts = Options(python=python, model=model, draft_model=draft_model,
                   attention_backend=attention_backend, device=device,
                   speculative=speculative, server_args=server_args, out=where.resolve(),
                   crash=crash, step_timeout=step_timeout, rounds=rounds, tokens=tokens,
                   crash_servers=crash_servers, crash_profiles=crash_profiles)
    doc = run_kit(opts, all_steps(), (lambda _line: None) if as_json else stderr_progress)
    if as_json:
        click.echo(json.dumps(doc, indent=1, default=str))
    else:
        from diag.kit.report import render

        click.echo(render(doc))
    sys.exit(doc["exit_code"])


@kit.command("compare")
@click.argument("a", metavar="A.json")
@click.argument("b", metavar="B.json")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@guarded
def compare(a: str, b: str, as_json: bool) -> None:
    """Two kit runs side by side (two hosts or releases): environment, then each check.

    Exit codes: 0 compared, 3 a file that is not a kit JSON of this schema's major version.
    """
    from diag.kit import compare as cmp

    doc = cmp.compare(cmp.load(a), cmp.load(b), (a, b))
    click.echo(json.dumps(doc, indent=1) if as_json else cmp.render(doc))
