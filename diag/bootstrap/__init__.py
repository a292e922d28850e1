"""The bootstrap directory `diag run` puts first on PYTHONPATH (holds only `sitecustomize`)."""
