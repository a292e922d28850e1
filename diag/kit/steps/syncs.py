"""Step `syncs`: syncs per step per phase as the GPU sync debug mode counts them in the
scheduler (the metadata-syncs counter of `diag run --probe all`), beside the static census for
the server's configuration (`diag probe metadata-syncs --server`). The mode saying nothing is
its own outcome, never a zero."""

from __future__ import annotations

from diag.kit import checks
from diag.kit.runner import Kit, Step
from diag.kit.steps.base import diag_json, engine_counters, platform_args

NO_GPU = ("needs a GPU: the sync debug mode (torch.cuda.set_sync_debug_mode) reports device "
          "syncs, and a CPU server has no device queue")
SILENT = ("the mode reported nothing: no metadata builder call was counted in the scheduler "
          "(no sync figures to compare; the counter wraps the builders "
          "probes/metadata_syncs/sync_counter.py BUILDERS names, and none of them ran)")


class SyncsStep(Step):
    id = "syncs"
    title = "syncs per step per phase: sync debug mode vs static census"
    checks = {"syncs-vs-census": "runtime syncs per step per phase agree with the census"}

    def run(self, kit: Kit) -> None:
        s = kit.server
        rep, err = diag_json("probe", "metadata-syncs", "--server", s.url, "--no-execute",
                             *platform_args(kit), "--json")
        census = checks.census_per_phase(rep)
        exact = checks.census_exact(rep)
        values = {"census": census, "census_exact": exact}
        if not rep:
            values["probe"] = err
        if not kit.gpu:
            kit.record("syncs-vs-census", "not-run", "", {**values, "outcome": "no-gpu"}, NO_GPU)
            return
        c = engine_counters(s)
        by = checks.syncs_by_phase(c)
        values.update(measured_by_phase=by, measured_per_step=checks.syncs_per_step(c))
        if not any(v["calls"] for v in by.values()):
            kit.record("syncs-vs-census", "not-run", "",
                       {**values, "outcome": "mode-reported-nothing"}, SILENT)
            return
        v = checks.check_syncs_agree("", values["measured_per_step"], census, exact)
        if v.ok is None and census:  # the census gives upper bounds only: judge against them
            b = checks.check_syncs_bounded("", values["measured_per_step"], census)
            if b.ok is not None:
                kit.judge("syncs-vs-census", b.ok, "within the census's upper bounds (it cannot "
                          f"tell exactly here): {b.detail}",
                          {**values, "outcome": "measured", "judged": "upper-bound"})
                return
        kit.judge("syncs-vs-census", v.ok, v.detail,
                  {**values, "outcome": "measured", "judged": "exact"})
