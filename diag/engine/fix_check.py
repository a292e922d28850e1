"""`diag fix check`: can each fix go into a given SGLang release on a given platform?

Two levels: `applies_to` (from the release's source, no import), and — where the release's code
can be loaded here — a dry application in a child interpreter (`python -m diag.engine.fix_check`): the
release's tree first on `PYTHONPATH`, then the folder `diag` imports from (so `--python` can be
any interpreter with SGLang's requirements), each fix applied, every module it patches imported,
the patch checked in place, then reverted and checked restored. A child that cannot import the
release (SGLang's requirements missing), or that fails, says so: that is `skipped` with the
reason, and `diag fix check` calls the fix *unverified* (exit 4), never verified.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from diag.engine import rundir

DRY_TIMEOUT_S = 300.0


def phase_requirements(ctx: Any, backend: str, required: dict[str, str]) -> list[dict]:
    """`--require-phase`: each required phase's verdict for the configuration under audit (the
    same `probes.draft_extend_graph.phases` verdicts the report shows), and whether it is in the required mode."""
    from diag.errors import TargetError
    from diag.probes.draft_extend_graph.phases import audited_verdicts, phase_verdicts
    from diag.probes.startup.resolve import damaged_rules

    # the backend SGLang runs (a model may force one: DeepSeek-V4 runs dsv4), as the report
    audit = audited_verdicts(ctx.target, ctx.platform, ctx.config)
    verdicts = audit.verdicts if audit is not None else \
        phase_verdicts(ctx.target, ctx.platform, ctx.config, backend)
    damaged = damaged_rules(ctx.target)  # read for these verdicts: a rule there is not known
    if damaged:
        file, why, _ = damaged[0]
        raise TargetError(f"{file} {why}: diag cannot read SGLang's start-up rules in this "
                          "tree, so no phase is judged (reinstall SGLang or pass a release, "
                          "--sglang VERSION)")
    out = []
    for v in verdicts:
        if v.phase in required:
            d = v.data()
            d.update(reason=v.reason, required_mode=required[v.phase],
                     ok=v.mode == required[v.phase])
            out.append(d)
    return out


def dry_apply(target_root: str, fix_ids: list[str], platform: str,
              python: str | None = None, timeout: float = DRY_TIMEOUT_S) -> dict[str, dict]:
    """{fix id: {status: fits|does-not-fit|skipped, reason}} from a child interpreter."""
    from diag.engine import bootstrap

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([target_root, str(bootstrap.home()), *[p for p in env.get(
        "PYTHONPATH", "").split(os.pathsep) if p]])
    env["DIAG_PLATFORM"] = platform
    for k in (rundir.ENV_RUN_DIR, rundir.ENV_FIXES, rundir.ENV_PROBES):
        env.pop(k, None)
    env[rundir.ENV_AGENT] = "0"  # no agent in the child: it applies the fixes itself
    cmd = [python or sys.executable, "-m", "diag.engine.fix_check", target_root, platform, *fix_ids]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {f: {"status": "skipped", "reason": f"dry application timed out after "
                                                   f"{timeout:.0f} s"} for f in fix_ids}
    except OSError as e:
        return {f: {"status": "skipped", "reason": f"cannot run {cmd[0]}: {e.strerror}"}
                for f in fix_ids}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    tail = ([ln.strip() for ln in proc.stderr.splitlines() if ln.strip()] or
            [f"exit {proc.returncode}, no output"])[-1][:300]
    return {f: {"status": "skipped", "reason": f"the dry run failed in {cmd[0]}: {tail}"}
            for f in fix_ids}


def _one(fid: str, target: Any, platform: str) -> dict[str, str]:
    """The dry application of one fix, by the orchestrator every caller uses (dependencies
    applied first, reverted after)."""
    from diag.fixes import orchestrator

    return orchestrator.dry_run(fid, target, platform)


def main(argv: list[str]) -> int:
    from diag.target import from_path

    root, platform, *ids = argv
    target = from_path(Path(root))
    out: dict[str, dict[str, str]] = {}
    cannot_load: str | None = None
    for fid in ids:
        if cannot_load:  # a failed import leaves sglang half-imported: later ones mean nothing
            out[fid] = {"status": "skipped", "reason": cannot_load}
            continue
        try:
            out[fid] = _one(fid, target, platform)
        except Exception as e:
            out[fid] = {"status": "does-not-fit", "reason": f"{type(e).__name__}: {e}"}
        if out[fid]["reason"].startswith("release code cannot be loaded here"):
            out[fid]["reason"] += (f" (SGLang's requirements are not installed for "
                                   f"{sys.executable}; pass --python with the engine's "
                                   "interpreter)")
            cannot_load = out[fid]["reason"]
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
