"""`python -m diag` with the STAND-IN fixes registered, as the engine processes of the control
tests register them (standin_fixes.register()): the CLI refuses ids its registry lacks (exit 2),
so a CLI driving those engines must know the same ids."""

import standin_fixes

standin_fixes.register()

from diag.cli import main  # noqa: E402

main()
