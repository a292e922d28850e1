"""The engine side: what runs inside SGLang's processes (agent, bootstrap, plugin, in-process API,
run directory, metrics) and what reads it back (fix check, fleet)."""
