"""The Textual live view (`diag tui`): findings, fixes, before/after timings and sync counts.

Nothing in diag, probes or fixes imports this package; `tui.data` and `tui.model` are headless.
"""
