"""Two patches on one function (a fix, then a counter over it): reverting the lower one
really removes it, the upper one stays, and reverting both restores the identical original."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys, types
    from diag.patcher import Patch
    mod = types.ModuleType("stacked_standin")
    exec("def f(x):\\n    return x\\n", mod.__dict__)
    sys.modules["stacked_standin"] = mod
    original = mod.f
    calls = []
    fix = Patch("fix").add("stacked_standin", "f", lambda fn: (lambda x: fn(x) + 100))

    def counter(fn):
        def wrapper(x):
            calls.append(x)
            return fn(x)
        return wrapper

    count = Patch("counter").add("stacked_standin", "f", counter)
    fix.apply()
    count.apply()
    assert mod.f(1) == 101 and calls == [1]
    fix.revert()                       # the lower patch, under the counter
    assert mod.f(2) == 2, mod.f(2)     # the fix is really gone
    assert calls[-1] == 2              # the counter still counts
    assert count.applied and not fix.applied
    fix.apply()                        # back on top of the counter
    assert mod.f(3) == 103 and calls[-1] == 3
    count.revert()
    assert mod.f(4) == 104             # the fix stays
    fix.revert()
    assert mod.f is original           # the identical object
    print("ok")
""")


def test_reverting_a_patch_under_another_removes_it():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
