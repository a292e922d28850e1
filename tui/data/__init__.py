"""The TUI's data layer: every read of probes, fixes, benches, run directories and servers.

Headless (no textual import): the app's workers call these functions and the handlers render
what they return. Whatever cannot be read comes back as `NA` or as a `SourceState` that says
why, never as an exception (nvitop's `NA`): an unreachable server is a fact on screen.
Other packages' APIs (`diag.engine.rundir`, `diag.server`, the probes, the fixes) are called only
here, so a change in them touches this one package.

One module per view it feeds: `header`, `findings`, `fixes`, `sources` (engine, server,
charts), `timings` (timings and syncs), `export`; `common` and `fmt` are what the views share.
The views read it as one namespace, `diag.tui.data`, which re-exports every module's names.
"""

from __future__ import annotations

from diag.bench import Stats
from diag.errors import DiagError
from diag.tui.data.common import NA, DiagErrorTypes, concern, fix_of_probe, short_error
from diag.tui.data.export import export_doc, write_export
from diag.tui.data.findings import FindingView, finding_view, pending_findings, probe_ids, run_probe
from diag.tui.data.fixes import (
    FixView,
    applicability,
    apply_fix,
    fix_ids,
    fix_state,
    fix_view,
    get_fix,
    refusal,
    revert_fix,
)
from diag.tui.data.fmt import (
    fmt_age,
    fmt_ratio,
    fmt_stats,
    fmt_time,
    fmt_value,
    short_path,
    shorten,
    sig,
    time_unit,
)
from diag.tui.data.header import Header, gpu_text, live_figures, resolve_context
from diag.tui.data.sources import (
    DE_PASSES,
    SERVER_SERIES,
    SYNCS_PER_BUILD,
    DiagSeries,
    ProcessView,
    RunDirReader,
    ServerReader,
    SourceState,
    diag_series,
    discover_run_dirs,
    engine_acks,
    engine_fix_states,
    engine_processes,
    lost_suffix,
    metric_values,
    read_server,
    request_acks,
    request_engine_fix,
    series_unit,
    server_fix_states,
)
from diag.tui.data.timings import (
    PhaseRow,
    SyncRow,
    TimingRow,
    bench_release,
    bench_rows,
    bench_sync_rows,
    engine_view,
    finding_forward_rows,
    finding_phase_rows,
    finding_sync_rows,
    forward_line,
    phase_line,
    ratio_text,
    sync_fix,
)

__all__ = ['DE_PASSES', 'DiagError', 'DiagErrorTypes', 'DiagSeries', 'FindingView', 'FixView', 'Header', 'NA', 'PhaseRow', 'ProcessView', 'RunDirReader', 'SERVER_SERIES', 'SYNCS_PER_BUILD', 'ServerReader', 'SourceState', 'Stats', 'SyncRow', 'TimingRow', 'applicability', 'apply_fix', 'bench_release', 'bench_rows', 'bench_sync_rows', 'concern', 'diag_series', 'discover_run_dirs', 'engine_acks', 'engine_fix_states', 'engine_processes', 'engine_view', 'export_doc', 'finding_forward_rows', 'finding_phase_rows', 'finding_sync_rows', 'finding_view', 'fix_ids', 'fix_of_probe', 'fix_state', 'fix_view', 'fmt_age', 'fmt_ratio', 'fmt_stats', 'fmt_time', 'fmt_value', 'get_fix', 'gpu_text', 'live_figures', 'lost_suffix', 'metric_values', 'pending_findings', 'forward_line', 'phase_line', 'probe_ids', 'ratio_text', 'read_server', 'refusal', 'request_acks', 'request_engine_fix', 'resolve_context', 'revert_fix', 'run_probe', 'series_unit', 'server_fix_states', 'short_error', 'short_path', 'shorten', 'sig', 'sync_fix', 'time_unit', 'write_export']
