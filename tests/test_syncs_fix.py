"""Fix `repeat-interleave-output-size`: applicability per release, equality, apply/revert."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

from diag import fixes
from diag.errors import FixError
from diag.fixes import repeat_interleave_output_size as ri
from diag.probes.metadata_syncs import builder_harness as h
from diag.target import Target

pytestmark = pytest.mark.release
FIX = "repeat-interleave-output-size"


def test_applies_to_per_release(release):
    f = fixes.get(FIX)
    assert f.applies_to(release("0.5.17"), "hip").status == "applicable"
    assert "line 1116" in f.applies_to(release("0.5.17"), "hip").reason
    assert f.applies_to(release("0.5.18"), "hip").status == "upstream"
    assert f.applies_to(release("0.5.18"), "hip", paths="all").status == "applicable"
    assert f.applies_to(release("0.5.23"), "hip").status == "upstream"
    assert f.applies_to(release("0.5.23"), "hip", paths="all").status == "upstream"
    assert f.applies_to(release("0.5.17"), "cuda").status == "not-needed"
    assert f.applies_to(release("0.5.12.post1"), "hip").status == "not-needed"  # no file
    assert f.applies_to(release("0.5.13.post1"), "hip").status == "not-needed"  # no builder
    assert f.applies_to(release("0.5.15.post1"), "hip").status == "applicable"
    assert f.applies_to(release("0.5.19"), "hip").status == "upstream"


def _edited(release, tmp_path, old: str, new: str) -> Target:
    t = release("0.5.17")
    dst = tmp_path / "sglang" / h.DSV4_FILE
    dst.parent.mkdir(parents=True)
    shutil.copy(t.file(h.DSV4_FILE), dst)
    src = dst.read_text()
    assert old in src
    dst.write_text(src.replace(old, new, 1))
    return Target(tmp_path, "0.5.17+edited", "path")


def test_refused_when_the_source_differs(release, tmp_path):
    t = _edited(release, tmp_path, "extend_seq_lens\n        )\n        if core.unified",
                "extend_seq_lens.cpu()\n        )\n        if core.unified")
    a = fixes.get(FIX).applies_to(t, "hip")
    assert a.status == "refused" and "source differs" in a.reason


def test_fix_list_cli_says_applicable_for_0517_hip(release):
    from diag.cli import main

    release("0.5.17")
    r = CliRunner().invoke(main, ["fix", "list", "--sglang", "0.5.17", "--platform", "hip",
                                  "--json"])
    assert r.exit_code == 0, r.output
    rows = {x["id"]: x for x in json.loads(r.stdout)["fixes"]}
    assert rows[FIX]["status"] == "applicable"


def _outputs_equal(a, b):
    return all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)


@pytest.mark.parametrize("paths,counts", [
    ("draft", {"draft-extend": 0, "target-extend": 2}),
    ("all", {"draft-extend": 1, "target-extend": 1}),  # opt-in: guarded, one checking sync
])
def test_patched_0517_builder_is_equal_and_syncs_less(release, paths, counts):
    t = release("0.5.17")
    cls = h.dsv4_class(t)
    expr = ri.host_count_expr(paths)
    patch = ri.make_patch(cls.__module__, paths, every=1)  # guarded: every call checked
    for path in h.PATHS:
        inp = h.make_inputs(cls.__dict__[h.ATTACH], path, 32, seed=7)
        before = h.call(cls, inp)
        patch.apply()
        try:
            after = h.call(cls, inp, expr)
            m = h.measure(t, path, "cpu", batch=32, patched_expr=expr, cls=cls)
        finally:
            patch.revert()
        assert _outputs_equal(before, after), path
        assert m.syncs == counts[path], (path, m.sites)


def test_0518_opt_in_covers_the_target_extend_call(release):
    t = release("0.5.18")
    cls = h.dsv4_class(t)
    expr = ri.host_count_expr("all")
    inp = h.make_inputs(cls.__dict__[h.ATTACH], "target-extend", 16)
    before = h.call(cls, inp)
    patch = ri.make_patch(cls.__module__, "all", every=1)
    patch.apply()
    try:
        assert _outputs_equal(before, h.call(cls, inp, expr))
        assert h.measure(t, "target-extend", patched_expr=expr, cls=cls).syncs == 1
    finally:
        patch.revert()


def test_apply_revert_restores_identical_objects(release):
    cls = h.dsv4_class(release("0.5.17"))
    originals = {n: cls.__dict__[n] for n in (h.ATTACH, h.CALLER)}
    patch = ri.make_patch(cls.__module__, "draft")
    for _ in range(2):  # apply -> revert -> apply -> revert
        patch.apply()
        patch.apply()  # idempotent
        assert all(cls.__dict__[n] is not o for n, o in originals.items())
        assert "_diag_output_size" in cls.__dict__[h.ATTACH].__code__.co_varnames
        # other callers (none in 0.5.17) would get the released behaviour: default None
        m = h.measure(release("0.5.17"), "draft-extend", cls=cls)
        assert m.executed and m.syncs == 2
        patch.revert()
        assert all(cls.__dict__[n] is o for n, o in originals.items())


def test_caller_rewrite_passes_the_host_count_only_on_draft_extend(release):
    import ast
    import inspect

    cls = h.dsv4_class(release("0.5.17"))
    patch = ri.make_patch(cls.__module__, "draft")
    patch.apply()
    try:
        new = cls.__dict__[h.CALLER]
        assert new.__wrapped__ is not None
        assert {"sum", "need_compress"} <= set(new.__code__.co_names) | set(
            new.__code__.co_varnames)
        assert "not need_compress" in ri.host_count_expr("draft")
        ast.parse(ri.host_count_expr("draft"), mode="eval")
        sig = inspect.signature(cls.__dict__[h.ATTACH], follow_wrapped=False)
        assert sig.parameters["_diag_output_size"] \
            .default is None
    finally:
        patch.revert()
    locals_ = {"num_tokens": 8, "extend_seq_lens_cpu": [4, 4], "need_compress": False}
    assert eval(ri.host_count_expr("draft"), {}, locals_) == 8
    assert eval(ri.host_count_expr("draft"), {}, {**locals_, "need_compress": True}) is None
    assert eval(ri.host_count_expr("draft"), {}, {**locals_, "num_tokens": 9}) is None
    assert eval(ri.host_count_expr("all"), {}, {**locals_, "extend_seq_lens_cpu": None}) is None


def test_guarded_mode_falls_back_on_a_wrong_count(release):
    cls = h.dsv4_class(release("0.5.17"))
    inp = h.make_inputs(cls.__dict__[h.ATTACH], "target-extend", 8, seed=1)
    before = h.call(cls, inp)
    patch = ri.make_patch(cls.__module__, "draft", guarded=True, every=1)
    patch.apply()
    ri.MISMATCHES.clear()
    ri.reset_guard()
    try:
        wrong = inp.locals_["num_tokens"] - 1
        after = h.call(cls, inp, str(wrong))
    finally:
        patch.revert()
    assert _outputs_equal(before, after)
    assert ri.MISMATCHES == [{"host": wrong, "device": wrong + 1}]


def test_guard_samples_every_nth_call_and_escalates_on_a_mismatch(release, monkeypatch):
    """Guarded with N=4: of 8 calls the 1st and 5th are checked (one sync each, CPU counter);
    a wrong count met by a check is reported and from then on every call is checked."""
    from diag.probes.metadata_syncs.sync_counter import DeviceTags, count_syncs

    cls = h.dsv4_class(release("0.5.17"))
    inp = h.make_inputs(cls.__dict__[h.ATTACH], "target-extend", 8, seed=2)
    expr = ri.host_count_expr("all")
    monkeypatch.setenv(ri.ENV_GUARD_EVERY, "4")
    assert ri.guard_every() == 4
    patch = ri.make_patch(cls.__module__, "all")  # N from the environment
    patch.apply()
    ri.MISMATCHES.clear()
    ri.reset_guard()
    try:
        per_call = []
        for _ in range(8):
            with count_syncs("cpu", DeviceTags(device=inp.device_tensors)) as rep:
                h.call(cls, inp, expr)
            per_call.append(rep.count)
        assert per_call == [1, 0, 0, 0, 1, 0, 0, 0]
        wrong = inp.locals_["num_tokens"] + 3
        ri.reset_guard()
        h.call(cls, inp, expr)  # the checked first call, right count
        before = h.call(cls, inp)
        for _ in range(3):  # unchecked calls use the count as given: CPU torch rejects it (on
            with pytest.raises(RuntimeError, match="size"):  # a GPU it may fault: a sampled
                h.call(cls, inp, str(wrong))  # guard detects, it does not protect every call)
        assert ri.MISMATCHES == []
        h.call(cls, inp, str(wrong))  # the 5th call is checked: seen, falls back
        assert ri.MISMATCHES == [{"host": wrong, "device": wrong - 3}]
        assert _outputs_equal(before, h.call(cls, inp, str(wrong)))  # now every call checked
        assert len(ri.MISMATCHES) == 2
    finally:
        patch.revert()
        ri.reset_guard()
        ri.MISMATCHES.clear()
    monkeypatch.setenv(ri.ENV_GUARD_EVERY, "0")
    with pytest.raises(FixError, match="positive integer"):
        ri.guard_every()


def test_apply_without_an_importable_sglang_is_a_fix_error():
    from diag.target import find_importable

    if find_importable() is not None:
        pytest.skip("sglang is importable here")
    with pytest.raises(FixError, match="not importable"):
        ri.RepeatInterleaveOutputSizeFix().apply()


@pytest.mark.slow
def test_bench_runs_on_cpu_with_counts_and_says_time_is_not_measured(release):
    from diag.fixes.bench_metadata import run

    release("0.5.17")
    res = run({"quick": True, "sglang": "0.5.17", "guard_every": 10}, lambda msg: None)
    assert res.skipped is None
    syncs = next(r for r in res.rows if r.metric == "syncs per call")
    assert (syncs.before.median, syncs.after.median) == (2, 0)
    # guarded, 1 call in 10 checked over 2 x 10 calls: 2 checking syncs in 20 calls
    guarded = next(r for r in res.rows if r.metric.startswith("syncs per call, guarded"))
    assert guarded.after.median == pytest.approx(0.1) and "20 calls" in guarded.metric
    assert any("outputs identical before/after: yes" in n for n in res.notes)
    if res.device.startswith("cpu"):
        assert len(res.rows) == 2 and any("not measured on CPU" in n for n in res.notes)


def test_bench_skips_a_release_the_fix_does_not_apply_to(release):
    from diag.fixes.bench_metadata import run

    release("0.5.23")
    res = run({"quick": True, "sglang": "0.5.23"}, lambda msg: None)
    assert res.skipped and "upstream" in res.skipped


def test_fix_over_the_runtime_sync_counter_keeps_counting(release):
    from diag import telemetry
    from diag.probes.metadata_syncs.sync_counter import builder_patch

    t = release("0.5.17")
    cls = h.dsv4_class(t)
    originals = {n: cls.__dict__[n] for n in (h.ATTACH, h.CALLER)}
    counter = builder_patch([(cls.__module__, f"{h.DSV4_CLASS}.{h.ATTACH}")])
    counter.apply()
    wrapped = cls.__dict__[h.ATTACH]
    fix = ri.make_patch(cls.__module__, "draft")
    fix.apply()
    try:
        new = cls.__dict__[h.ATTACH]
        assert new is not wrapped and new.__diag_builder__ == wrapped.__diag_builder__
        inp = h.make_inputs(new, "draft-extend", 8)
        events = []
        telemetry.add_sink(events.append)
        try:
            h.call(cls, inp, ri.host_count_expr("draft"))  # runs through both layers
        finally:
            telemetry.remove_sink(events.append)
        m = h.measure(t, "draft-extend", patched_expr=ri.host_count_expr("draft"), cls=cls)
        assert m.syncs == 0
    finally:
        fix.revert()
    assert cls.__dict__[h.ATTACH] is wrapped
    counter.revert()
    assert all(cls.__dict__[n] is o for n, o in originals.items())


def test_verify_reports_the_patched_real_builder(release):
    from diag.context import Context

    ctx = Context(target=release("0.5.17"), platform="hip", execute=True)
    found = fixes.get(FIX).verify(ctx)
    mine = found[-1]
    assert mine.status.value == "ok", [e.short() for e in mine.evidence]
    values = {e.metric: e.value for e in mine.evidence if e.kind == "metric"}
    assert values["syncs per call (draft-extend)"] == "2 -> 0"
    assert values["syncs per call (target-extend)"] == "2 -> 2"
    assert found[0].probe == "metadata-syncs"
    skipped = fixes.get(FIX).verify(Context(target=release("0.5.23"), platform="hip"))[-1]
    assert skipped.status.value == "skip" and "upstream" in skipped.summary


def test_rewrite_function_gives_an_added_keyword_only_parameter_its_default(tmp_path):
    """The patcher keeps the original keyword defaults (same objects) and evaluates the defaults
    of parameters the transform adds, so the rewritten builder is callable without them."""
    import ast
    import importlib.util

    from diag.patcher import PatchError, rewrite_function

    path = tmp_path / "kwmod.py"
    path.write_text("LIMIT = 7\n\n\nclass C:\n    def f(self, x, *, scale=[2]):\n"
                    "        return x * scale[0]\n")
    spec = importlib.util.spec_from_file_location("kwmod", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    original = mod.C.__dict__["f"]

    def add_limit(fn: ast.FunctionDef) -> ast.FunctionDef:
        fn.args.kwonlyargs.append(ast.arg("limit"))
        fn.args.kw_defaults.append(ast.Name("LIMIT", ast.Load()))
        fn.body = ast.parse("return min(x * scale[0], limit)").body
        return fn

    new = rewrite_function(original, "C.f", add_limit)
    assert new.__kwdefaults__["scale"] is original.__kwdefaults__["scale"]
    assert new.__kwdefaults__["limit"] == 7
    assert new(None, 3) == 6 and new(None, 5) == 7 and new(None, 5, limit=100) == 10

    def add_positional_default(fn: ast.FunctionDef) -> ast.FunctionDef:
        fn.args.args.append(ast.arg("y"))
        fn.args.defaults.append(ast.Constant(1))
        return fn

    with pytest.raises(PatchError, match="positional defaults"):
        rewrite_function(original, "C.f", add_positional_default)
