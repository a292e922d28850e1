"""The patcher in every ordering, each in a fresh interpreter (as dd-trace's patch tests do).

The patched module is a STAND-IN written into a temporary directory (`standin_target`), with a
module function, a method, a classmethod and a staticmethod, and a second module that copies the
function with `from standin_target import f`.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

TARGET = '''
def f():
    return "orig"

class C:
    def m(self):
        return "orig-m"

    @classmethod
    def cm(cls):
        return ("orig-cm", cls.__name__)

    @staticmethod
    def sm():
        return "orig-sm"

class D(C):
    pass
'''

USER = '''
from standin_target import f
'''

PRELUDE = '''
import sys
from diag.patcher import Patch, PatchError

def make_patch():
    p = Patch("t")
    p.add("standin_target", "f", lambda o: (lambda: "new:" + o()), rebind=True)
    p.add("standin_target", "C.m", lambda o: (lambda self: "new:" + o(self)))
    p.add("standin_target", "C.cm", lambda o: (lambda cls: ("new",) + o(cls)))
    p.add("standin_target", "C.sm", lambda o: (lambda: "new:" + o()))
    return p

def state():
    import standin_target as t
    return (t.f(), t.C().m(), t.C.cm(), t.D.cm(), t.C.sm(), t.C().sm())

PATCHED = ("new:orig", "new:orig-m", ("new", "orig-cm", "C"), ("new", "orig-cm", "D"),
           "new:orig-sm", "new:orig-sm")
ORIGINAL = ("orig", "orig-m", ("orig-cm", "C"), ("orig-cm", "D"), "orig-sm", "orig-sm")
'''

SCENARIOS = {
    "import-then-patch": '''
import standin_target as t
raw = dict(vars(t.C)); f0 = t.f
p = make_patch(); p.apply()
assert state() == PATCHED, state()
assert isinstance(vars(t.C)["cm"], classmethod) and isinstance(vars(t.C)["sm"], staticmethod)
p.apply()  # idempotent
assert state() == PATCHED
p.revert()
assert state() == ORIGINAL
assert t.f is f0 and all(vars(t.C)[k] is raw[k] for k in ("m", "cm", "sm"))
''',
    "patch-then-import": '''
p = make_patch(); p.apply()
assert "standin_target" not in sys.modules and p.pending == ["standin_target"]
assert not p.applied
import standin_target as t
assert p.applied and p.pending == [] and p.errors == []
assert state() == PATCHED, state()
import standin_user as u
assert u.f() == "new:orig"
p.revert()
assert state() == ORIGINAL and u.f is t.f
''',
    "patch-unpatch-patch": '''
p = make_patch(); p.apply(); p.revert()
import standin_target as t
assert state() == ORIGINAL  # the on-import patch was forgotten
p.apply()
assert state() == PATCHED
p.revert(); p.apply()
assert state() == PATCHED
q = make_patch(); q.apply()  # a second Patch with the same id sees the marks: no double wrap
assert state() == PATCHED
p.revert()
assert state() == ORIGINAL
''',
    "from-import-copies-rebound": '''
import standin_target as t
import standin_user as before
f0 = t.f
p = make_patch(); p.apply()
assert before.f() == "new:orig"  # a copy taken before the patch
import standin_user2 as after
assert after.f() == "new:orig"  # a copy taken after it
p.revert()
assert before.f is f0 and after.f is f0
''',
    "all-or-nothing": '''
import standin_target as t
raw = dict(vars(t.C)); f0 = t.f
p = make_patch(); p.add("standin_target", "C.missing", lambda o: o)
try:
    p.apply()
except PatchError as e:
    assert "C.missing" in str(e)
else:
    raise AssertionError("no PatchError")
assert t.f is f0 and all(vars(t.C)[k] is raw[k] for k in ("m", "cm", "sm"))
assert state() == ORIGINAL and not p.applied
''',
    "deferred-failure-contained": '''
p = make_patch(); p.add("standin_target", "C.missing", lambda o: o); p.apply()
import standin_target as t  # the import itself must not fail
assert state() == ORIGINAL and not p.applied
assert len(p.errors) == 1 and "C.missing" in p.errors[0]
''',
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_patcher_ordering(tmp_path, name):
    (tmp_path / "standin_target.py").write_text(TARGET)
    (tmp_path / "standin_user.py").write_text(USER)
    (tmp_path / "standin_user2.py").write_text(USER)
    code = PRELUDE + textwrap.dedent(SCENARIOS[name]) + "\nprint('ok')\n"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env={"PYTHONPATH": str(tmp_path),
                                                   "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
