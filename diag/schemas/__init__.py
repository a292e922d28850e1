"""JSON Schemas of diag's JSON outputs (loaded with importlib.resources) and the one version
number every JSON document diag writes carries."""

SCHEMA_VERSION = 1
