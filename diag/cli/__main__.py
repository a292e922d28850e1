"""`python -m diag.cli` runs the command line (as `python -m diag` does)."""

from diag.cli import main

main()
