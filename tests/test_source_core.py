"""The shared source-reading core (probes.source) on a real release: one parse per text,
names bound across modules, callers of a function, code by shape."""

from __future__ import annotations

import ast

import pytest

from diag.probes import source

pytestmark = pytest.mark.release
TRITON = "sglang/srt/layers/attention/triton_backend.py"


def test_one_parse_per_file_and_text(release):
    t = release("0.5.17")
    path = t.root / TRITON
    tree = source.parse_file(path)
    assert tree is source.parse_file(path)  # cached by file state
    assert tree is source.parse_text(path.read_text(encoding="utf-8"))  # and by text
    assert source.parse_fresh("x = 1") is not source.parse_fresh("x = 1")


def test_names_bound_across_modules(release):
    """triton_backend.py (0.5.17) imports get_num_kv_splits_triton from sglang.kernels (a
    module outside srt) and update_sliding_window_buffer is its own module function."""
    t = release("0.5.17")
    mods = source.Modules(t)
    mod = mods.module("sglang.srt.layers.attention.triton_backend")
    assert mod is not None and "TritonAttnBackend" in mod.classes
    assert "update_sliding_window_buffer" in mod.funcs
    name = next(n for n, m in mod.imports.items() if m.startswith("sglang.srt.")
                and mods.resolve(mod, n) is not None)
    bound = mods.resolve(mod, name)
    assert bound.node.name == mod.import_names[name] and bound.path.is_file()


def test_callers_and_shapes(release):
    t = release("0.5.17")
    tree = source.parse_file(t.root / TRITON)
    # _dcp_kv_indices is called at 425 (_update_decode_kv_buffers), 731 and 871
    # (init_forward_metadata) - read by hand from the release
    calls = {(q, c.lineno) for q, c in source.callers_of(tree, "_dcp_kv_indices")}
    assert {("TritonAttnBackend._update_decode_kv_buffers", 425),
            ("TritonAttnBackend.init_forward_metadata", 731),
            ("TritonAttnBackend.init_forward_metadata", 871)} <= calls
    fn = source.find_def(tree, "TritonAttnBackend._dcp_kv_indices")
    items = list(source.find(fn, lambda n: isinstance(n, ast.Call) and isinstance(
        n.func, ast.Attribute) and n.func.attr == "item"))
    assert [n.lineno for n in items] == [371]


def test_gc_paused_restores_the_collector_as_it_found_it():
    """The census pauses the cyclic GC for its scan; the caller's setting comes back, also when
    the scan raises, and a caller that had it off keeps it off."""
    import gc

    from diag.probes.source import gc_paused

    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        assert not gc.isenabled()
        raise RuntimeError("scan failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_walks_are_ast_walk(release):
    """`walk`, `walk_all` and `children` give ast.walk's / ast.iter_child_nodes's nodes in the
    same order (they skip only fields whose ASDL type is a name, string, constant or int)."""
    t = release("0.5.17")
    tree = source.parse_fresh((t.root / TRITON).read_text(encoding="utf-8"))
    want = list(ast.walk(tree))
    assert [id(n) for n in source.walk(tree)] == [id(n) for n in want]
    assert [id(n) for n in source.walk_all(tree)] == [id(n) for n in want]
    assert [id(n) for n in source.walk_all(tree)] == [id(n) for n in want]  # kept: the same
    for n in want:
        assert source.children(n) == list(ast.iter_child_nodes(n))
        assert source.children(n, ast.expr) == [c for c in ast.iter_child_nodes(n)
                                                if isinstance(c, ast.expr)]
    assert source._NODE_FIELDS[ast.Name] == ("ctx",)
    assert source._NODE_FIELDS[ast.Constant] == ()
    assert source._NODE_FIELDS[ast.alias] == ()
