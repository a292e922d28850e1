"""STAND-IN for a user's own sitecustomize: registers the stand-in fixes in every Python process
started with tests/agent_standins on PYTHONPATH (diag's bootstrap runs it before the agent)."""

try:
    import standin_fixes

    standin_fixes.register()
except Exception:  # a site hook must never stop the interpreter
    pass
