"""JSON Schemas of diag's JSON outputs (loaded with importlib.resources)."""
