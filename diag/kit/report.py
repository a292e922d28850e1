"""The kit's one truth: the JSON document (`kit-v1.json`) and the text summary rendered from it
only, never from the runner's state, so the two cannot disagree.

A check is `pass`, `fail` or `not-run`; a `not-run` always carries its reason (the step it
belonged to was interrupted, timed out, is GPU-only, was not asked for, ...). Measured values
sit in `values` whatever the status. The exit code is computed from the document too.
"""

from __future__ import annotations

from typing import Any

from diag.errors import EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, EXIT_OPERATIONAL

PASS, FAIL, NOT_RUN = "pass", "fail", "not-run"
STATUSES = (PASS, FAIL, NOT_RUN)
KIND = "diag-kit"
# step outcomes: done (ran to its end), the others say why it did not
STEP_DONE, STEP_INTERRUPTED, STEP_TIMED_OUT, STEP_ERROR, STEP_SKIPPED = (
    "done", "interrupted", "timed-out", "error", "skipped")


def counts(doc: dict[str, Any]) -> dict[str, int]:
    out = dict.fromkeys(STATUSES, 0)
    for c in doc.get("checks", []):
        out[c["status"]] = out.get(c["status"], 0) + 1
    return out


def exit_code(doc: dict[str, Any]) -> int:
    """130 interrupted; else 3 when a step could not do its work (the server did not start, a
    step ran past its limit or broke: `operational` names it); else 1 when a check failed;
    else 0 (every check that ran passed)."""
    if doc.get("interrupted"):
        return EXIT_INTERRUPTED
    if doc.get("operational"):
        return EXIT_OPERATIONAL
    if any(c["status"] == FAIL for c in doc.get("checks", [])):
        return EXIT_FINDINGS
    return EXIT_OK


def _cell(text: Any, limit: int = 110) -> str:
    s = " ".join(str(text).split()).replace("|", "/")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def env_line(env: dict[str, Any]) -> str:
    """One line of `diag env`'s facts: torch and its HIP/CUDA, GPUs, SGLang, variables set."""
    t = env.get("torch") or {}
    rt = f"HIP {t['hip']}" if t.get("hip") else f"CUDA {t['cuda']}" if t.get("cuda") else "CPU"
    gpus = ", ".join(t.get("devices") or []) or ", ".join((env.get("amd_smi") or {}).get("gpus")
                                                         or []) or "no GPU"
    arch = (env.get("gpu_arch") or {}).get("value")
    if arch:  # the arch the host's audits decide is_gfx*_supported() by
        gpus += f" ({arch})"
    sg = env.get("sglang") or {}
    sgl = f"SGLang {sg.get('version')}" if sg.get("found") else "SGLang not found"
    sets = [f"{k}={v}" for k, v in (env.get("env") or {}).items()
            if v is not None and k.startswith(("SGLANG_", "HIP_"))]
    return (f"torch {t.get('version') or 'absent'} ({rt}); {gpus}; {sgl}; "
            + (f"set: {' '.join(sets)}" if sets else "no SGLANG_*/HIP_* set"))


def render(doc: dict[str, Any]) -> str:
    """The summary for an issue comment (markdown, well under 40 lines): one row per check."""
    n = counts(doc)
    srv = doc.get("server") or {}
    head = (f"### diag kit {doc['tool']['version']}: {n[PASS]} pass, {n[FAIL]} fail, "
            f"{n[NOT_RUN]} not run (exit {doc['exit_code']})")
    lines = [head, "", f"- env: {_cell(env_line(doc.get('environment') or {}), 300)}"]
    if srv:
        lines.append(f"- server: {_cell(srv.get('describe') or '', 200)}")
    if doc.get("interrupted"):
        i = doc["interrupted"]
        lines.append(f"- **interrupted** by {i['signal']} during step `{i['step']}`: "
                     "what ran before is kept")
    for why in doc.get("operational") or []:
        lines.append(f"- **could not run**: {_cell(why, 200)}")
    lines += ["", "| check | status | detail |", "|---|---|---|"]
    for c in doc.get("checks", []):
        detail = c["detail"] if c["status"] != NOT_RUN else f"not run: {c['reason']}"
        lines.append(f"| {c['id']} | {c['status']} | {_cell(detail)} |")
    left = doc.get("processes_left")
    lines += ["", f"wall {doc.get('wall_s')} s; processes it started left running: "
              f"{len(left) if left is not None else 'unknown'}; JSON: {doc.get('json_path')}"]
    return "\n".join(lines)
