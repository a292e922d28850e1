"""The GPU engine lane's judgements: they live in `diag.kit.checks` (the field kit, `diag kit
run`, judges a user's server with the same functions); this name stays for lane.py,
record_crash.py and their tests."""

from diag.kit.checks import *  # noqa: F401,F403
from diag.kit.checks import FATAL, Crash, crashes  # noqa: F401 (re-exported, as before)
