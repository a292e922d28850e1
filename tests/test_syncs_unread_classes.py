"""A configured backend class the census could not read is named, and its phases are not "exact".

Before: the census counts the sites it scanned, so a class whose module did not parse, or that
no module under `srt/layers/attention` defines, had no sites, and its phases read "0 syncs,
exact for the configuration" — a check that did not run, reported as passing. Now the finding
names the class and why (`unread_classes`), each phase it runs is `not known` (the text, the
JSON data and the TUI's Syncs line alike), and the finding is a warning diag cannot tell
(`unrecognised`: exit 3 unless --allow-unrecognised, as an unreadable gate).

Trees: a real 0.5.23, its `deepseek_v4_backend_hip_radix.py` (where `class
DeepseekV4HipRadixBackend` is, :874, read by hand) damaged in a linked copy two ways: a line
that does not parse added at the end, and the file cut before the class. The configuration: dsv4
on HIP, steps 3, topk 1, which the intact tree FAILs (its builders sync on the path,
tests/test_syncs_refused_start.py). And `--attention-backend ascend` on the intact tree: the
registry builds `AscendAttnBackend` from `srt/hardware_backend/npu/attention/ascend_backend.py`
(0.5.23 attention_registry.py:141-143; the class at ascend_backend.py:313), outside what the
census reads.
"""

from __future__ import annotations

import pytest

from diag.context import Context, SpecConfig
from diag.findings import Status
from diag.probes import get as get_probe
from diag.probes.base import run_probe
from tests.damaged_tree import copy_with as _copy_with

pytestmark = pytest.mark.release

RADIX = "sglang/srt/layers/attention/deepseek_v4_backend_hip_radix.py"
CLS = "DeepseekV4HipRadixBackend"


def _finding(target, backend="dsv4"):
    cfg = SpecConfig(attention_backend=backend, speculative_num_steps=3,
                     speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    [f] = run_probe(get_probe("metadata-syncs"), Context(target=target, platform="hip",
                                                         execute=False, config=cfg))
    return f


def _phases(f) -> dict[str, dict]:
    return {e.data["phase"]: e.data for e in f.evidence
            if e.kind == "metric" and e.metric.startswith("syncs per ") and e.data
            and "phase" in e.data}


def _notes(f) -> list[str]:
    return [e.detail for e in f.evidence if e.kind == "note" and " not read: " in e.detail]


@pytest.fixture(scope="module")
def damaged(release, tmp_path_factory):
    from diag.target import from_path

    real = release("0.5.23").root
    text = (real / RADIX).read_text()
    assert f"\nclass {CLS}(" in text
    broken = _copy_with(real, tmp_path_factory.mktemp("broken") / "tree", RADIX,
                        text + "\ndef broken(:\n")
    cut = _copy_with(real, tmp_path_factory.mktemp("cut") / "tree", RADIX,
                     text[:text.index(f"\nclass {CLS}(")])
    return from_path(broken), from_path(cut)


def test_the_intact_tree_reads_the_class(release):
    f = _finding(release("0.5.23"))
    assert f.status == Status.FAIL
    assert not _notes(f)
    assert all("not_read" not in t for t in _phases(f).values())


def test_a_module_that_does_not_parse_leaves_its_class_unread(damaged):
    f = _finding(damaged[0])
    assert f.status == Status.WARN, f.summary
    [n] = _notes(f)
    assert n.startswith(f"{CLS} not read: its module {RADIX} does not parse (SyntaxError")
    assert f"not read: {CLS}" in f.summary
    assert f.unrecognised is True  # diag cannot tell: exit 3 unless --allow-unrecognised
    phases = _phases(f)
    assert set(phases) == {"target-extend", "draft-extend", "target-verify", "draft-decode"}
    for t in phases.values():  # dsv4 runs every phase on HIP: none is exact
        assert t["exact"] is False and CLS in t["not_read"], t
    [m] = [e for e in f.evidence if e.kind == "metric" and e.metric.startswith(
        "syncs per draft-extend step")]
    assert f"not known ({CLS} not read)" in m.detail
    # the TUI's Syncs line reads the same data: no number for a phase nobody read
    from diag.tui.data import finding_phase_rows, phase_line

    line = phase_line(finding_phase_rows([f]))
    for phase in ("target-extend", "draft-extend", "target-verify", "draft-decode"):
        assert f"{phase} ? ({CLS} not read)" in line, line


def test_a_class_no_module_defines_is_unread(damaged):
    f = _finding(damaged[1])
    [n] = _notes(f)
    assert n.startswith(f"{CLS} not read: no module under sglang/srt/layers/attention defines it")
    assert all(t["exact"] is False for t in _phases(f).values())
    assert f.unrecognised is True


def test_a_class_outside_the_attention_modules_is_unread(release):
    f = _finding(release("0.5.23"), backend="ascend")
    notes = _notes(f)
    assert any(n.startswith("AscendAttnBackend not read: no module under "
                            "sglang/srt/layers/attention defines it") for n in notes), notes
    assert f.status != Status.OK and f.unrecognised is True
