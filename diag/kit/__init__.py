"""The field kit (`diag kit run`, `diag kit compare`): on a host's own SGLang, start the servers
it needs under `diag run`, run what the platform allows of the GPU lane's checks, write one
versioned JSON (`kit-v1.json`) and a short summary, stop every process it started.

Modules: `runner` (steps, time limits, signals, cleanup), `steps/` (one module per step),
`report` (the JSON's counts and exit code, the summary), `compare` (two kit JSONs side by side),
`checks` (the judgements shared with the GPU lane), `server` (a server this process started),
`tiny_model` (the lanes' tiny models, made when no `--model` is given).
"""
