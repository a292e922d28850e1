"""Probe `draft-extend-graph`: does the draft-extend phase run as a captured graph?

`phases` is the static audit of a release (which graph each speculative phase gets, from the
gate and the backends beside this package); `runtime` and `phase_counter` are the counters
that run inside the engine (draft-extend replays, per-phase graph/eager forwards); `probe`
holds the probe class that the registry (diag.probes.REGISTRY) names.
"""
