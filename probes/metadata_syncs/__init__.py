"""Probe `metadata-syncs`: host syncs in the attention backends' forward-metadata builders.

Static audit of a release: `census` (every device-to-host read the builders can reach,
per forward mode) and `census_config` (which of them the configuration under audit runs);
measured on the local torch: `builder_harness` (runs a builder on stand-in batches) with
`sync_counter`, which is also the counter that runs inside the engine; `probe` holds the probe
class that the registry names.
"""
