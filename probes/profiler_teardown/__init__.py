"""Probe `profiler-teardown`: is a stopped `torch.profiler.profile` left to the cyclic GC?

Static audit of a release: `stops` (where the profiler stops), `requests` (which profiling
requests put a server at risk), `stage_site` (the stage-profiling call site a fix switches);
on the local torch: `cycle` (the reference cycle and the cost of collecting it) and
`reproducer` (the crash, in child processes); inside the engine: `runtime` (the stop counter);
`probe` holds the probe class that the registry names.
"""
