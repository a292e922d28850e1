"""The orchestrator's rules (dependencies first, refusal by a dependency, dependants reverted
first, all or nothing) and the base's state, through every caller: `diag.api`, `diag fix
apply|revert` in this process, the TUI backend and `judge` (what `fix list` shows).

The fixes here are STAND-INS registered for the test (`standin_*`): a dependency graph with a
refusing member cannot be built from diag's three real fixes on one release; they patch a
stand-in module through the real patcher. The real fixes' contract is tests/test_fix_contract.py.
"""

from __future__ import annotations

import json
import sys
import types

import pytest
from click.testing import CliRunner

from diag import fixes
from diag.errors import FixError
from diag.fixes import orchestrator
from diag.fixes.base import APPLICABLE, REFUSED, Applicability, Fix, NotApplied
from diag.patcher import Patch

MOD = "diag_standin_orchestrator_module"


def _module() -> types.ModuleType:
    m = types.ModuleType(MOD)
    for name in ("base", "top", "bad", "needs_bad", "side"):
        setattr(m, name, (lambda n: lambda: n)(name))
    sys.modules[MOD] = m
    return m


class StandinFix(Fix):
    """Patches `MOD.<attr>` to return "<attr> fixed"."""

    attr = "base"
    status = APPLICABLE

    def applies_to(self, target, platform, config=None) -> Applicability:
        return Applicability(self.status, f"stand-in {self.status}")

    def build_patch(self, target) -> Patch:
        a = self.attr
        return Patch(self.id).add(MOD, a, lambda orig: lambda: f"{a} fixed")


class StandinBase(StandinFix):
    id, title, attr = "standin-base", "stand-in dependency", "base"


class StandinTop(StandinFix):
    id, title, attr, depends_on = "standin-top", "stand-in dependant", "top", ("standin-base",)


class StandinBad(StandinFix):
    id, title, attr, status = "standin-bad", "stand-in refused", "bad", REFUSED


class StandinNeedsBad(StandinFix):
    id, title, attr = "standin-needs-bad", "stand-in needing a refused fix", "needs_bad"
    depends_on = ("standin-base", "standin-bad")


class StandinBroken(StandinFix):
    id, title, attr = "standin-broken-patch", "stand-in whose patch raises", "side"

    def build_patch(self, target) -> Patch:
        raise RuntimeError("injected failure")


STANDINS = {c.id: c for c in (StandinBase, StandinTop, StandinBad, StandinNeedsBad, StandinBroken)}


@pytest.fixture
def reg(monkeypatch):
    m = _module()
    this = sys.modules[__name__]
    monkeypatch.setattr(fixes, "REGISTRY", {fid: f"{__name__}:{c.__name__}"
                                            for fid, c in STANDINS.items()})
    monkeypatch.setitem(sys.modules, __name__, this)
    monkeypatch.delenv("DIAG_FIXES", raising=False)
    originals = dict(vars(m))
    yield m
    for fid in STANDINS:
        inst = fixes._instances.pop(fid, None)
        if inst is not None and inst.is_applied():
            inst.revert()
    assert all(vars(m)[k] is v for k, v in originals.items() if not k.startswith("__"))
    sys.modules.pop(MOD, None)


def test_apply_puts_dependencies_first_and_revert_takes_dependants_first(reg):
    res = orchestrator.apply(["standin-top"])
    assert list(res) == ["standin-base", "standin-top"]
    assert all(o.ok and o.state == "applied" for o in res.values())
    assert (reg.base(), reg.top()) == ("base fixed", "top fixed")
    again = orchestrator.apply(["standin-top"])  # idempotent: the same replacement objects
    assert again["standin-top"].state == "applied" and reg.top() == "top fixed"
    back = orchestrator.revert(["standin-base"])
    assert list(back) == ["standin-top", "standin-base"]  # the dependant first
    assert all(o.ok and o.state == "reverted" for o in back.values())
    assert (reg.base(), reg.top()) == ("base", "top")
    assert orchestrator.state("standin-top").state == "reverted"


def test_a_refused_dependency_refuses_and_takes_back_what_it_applied(reg):
    res = orchestrator.apply(["standin-needs-bad"])
    assert res["standin-bad"].state == "refused"
    o = res["standin-needs-bad"]
    assert not o.ok and o.state == "refused" and "needs standin-bad, which is refused" in o.reason
    # standin-base went in for it, and came out again: all or nothing
    assert res["standin-base"].state == "reverted" and reg.base() == "base"
    assert reg.needs_bad() == "needs_bad"
    j = orchestrator.judge("standin-needs-bad", None, "hip")  # what `fix list` says
    assert j.status == REFUSED and "needs standin-bad, which is refused here" in j.reason


def test_revert_of_a_fix_that_is_not_applied_says_so(reg):
    o = orchestrator.revert(["standin-base"])["standin-base"]
    assert not o.ok and o.state == "not-applied"
    assert "standin-base is not applied in this process" in o.reason
    with pytest.raises(NotApplied, match="nothing to revert"):
        fixes.get("standin-base").revert()


def test_a_crashing_patch_is_failed_and_contained(reg):
    o = orchestrator.apply(["standin-broken-patch"])["standin-broken-patch"]
    assert not o.ok and o.state == "failed" and "RuntimeError: injected failure" in o.reason
    assert fixes.get("standin-broken-patch").state().state == "failed"
    assert reg.side() == "side"


def test_api_is_all_or_nothing_and_reports_dependencies(reg):
    from diag.engine import api

    states = api.apply("standin-top")
    assert states == {"standin-base": {"state": "applied", "reason": ""},
                      "standin-top": {"state": "applied", "reason": ""}}
    assert sorted(api.applied()) == ["standin-base", "standin-top"]
    api.revert("all")
    assert api.applied() == [] and reg.top() == "top"
    with pytest.raises(FixError, match="standin-bad: refused"):
        api.apply("standin-top", "standin-bad")
    assert api.applied() == []  # standin-top and its dependency were taken back
    with pytest.raises(FixError, match="not applied in this process"):
        api.revert("standin-top")


def test_cli_and_tui_give_the_same_refusal(reg):
    from diag.cli import main
    from diag.tui.backend import Backend

    r = CliRunner().invoke(main, ["fix", "apply", "standin-needs-bad", "--sglang", "0.5.23",
                                  "--platform", "hip", "--json"], catch_exceptions=False)
    assert r.exit_code == 4
    doc = json.loads(r.stdout)
    assert doc["state"] == "refused" and "needs standin-bad" in doc["reason"]
    with pytest.raises(FixError, match="needs standin-bad, which is refused"):
        Backend().apply("standin-needs-bad")
    r = CliRunner().invoke(main, ["fix", "revert", "standin-top"], catch_exceptions=False)
    assert r.exit_code == 4
    assert r.stderr.strip().splitlines() == [
        "diag: standin-top is not applied in this process (not-applied: never applied in this "
        "process): nothing to revert"]
