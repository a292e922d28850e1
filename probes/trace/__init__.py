"""The trace reader: reads a user's torch-profiler (Kineto) trace, not a release.

`reader` streams the file into compact records, `phases` cuts them into speculative-decoding
passes, `complete`/`waits` measure what each pass launched and waited on, `verdict` sets the
result beside the static gate's, `report` assembles `diag trace`'s JSON and `render` its text.
Its only callers are `diag trace` (diag.cli.trace, diag.cli.tui) and the TUI's trace tab
(diag.tui.trace_view); no probe imports it.
"""
