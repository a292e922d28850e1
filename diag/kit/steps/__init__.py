"""The kit's steps, in the order they run (one module each)."""

from __future__ import annotations

from diag.kit.runner import Step


def all_steps() -> list[Step]:
    from diag.kit.steps.allowlist import AllowlistStep
    from diag.kit.steps.capture import CaptureStep
    from diag.kit.steps.crash import CrashStep
    from diag.kit.steps.env import EnvStep
    from diag.kit.steps.model import ModelStep
    from diag.kit.steps.serve import ServeStep
    from diag.kit.steps.syncs import SyncsStep
    from diag.kit.steps.trace import TraceStep

    return [EnvStep(), ModelStep(), ServeStep(), CaptureStep(), SyncsStep(), AllowlistStep(),
            TraceStep(), CrashStep()]
