"""`probes.source.parse_pruned`: a module read only for the functions that hold some words is
parsed without the others (a `pass` each, line numbers kept), and every function that holds a
word is the same node as in the whole parse; where the text does not split that way, the whole
module is parsed."""

from __future__ import annotations

import ast
import textwrap

import pytest

from diag.probes import source

ASKS = ("can_run_graph", "can_run")


def _word_defs(tree: ast.AST, text: str, words: tuple[str, ...]) -> dict:
    """Every def (any depth) whose own lines hold a word, as a dump with line numbers."""
    lines = text.split("\n")
    return {(d.lineno, d.name): ast.dump(d, include_attributes=True) for d in ast.walk(tree)
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any(w in "\n".join(lines[d.lineno - 1:d.end_lineno]) for w in words)}


def _all_defs(tree: ast.AST) -> set:
    return {(d.lineno, d.name) for d in ast.walk(tree)
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))}


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.5.9", "0.5.19", "0.5.23"])
@pytest.mark.parametrize("rel, words", [
    ("srt/managers/schedule_batch.py", ("prepare_for_decode",)),
    ("srt/model_executor/model_runner.py", ASKS),
    ("srt/speculative/eagle_worker_v2.py", ASKS),
])
def test_a_pruned_release_module_keeps_every_function_that_holds_a_word(release, version, rel,
                                                                          words):
    """The readers' modules of three releases: the pruned text parses (no fallback), is a
    fraction of the module, keeps every def whose lines hold a word node for node, and has no
    def the module lacks."""
    path = release(version).file(rel)
    if not path.is_file():
        pytest.skip(f"{rel} is not in {version}")
    text = path.read_text(encoding="utf-8")
    whole = ast.parse(text)
    pruned_text = source._pruned_text(text, words)
    assert pruned_text.count("\n") == text.count("\n")  # every line number holds
    pruned = ast.parse(pruned_text)
    assert len(pruned_text.replace("\n", "")) < len(text) / 2
    want = _word_defs(whole, text, words)
    assert want and _word_defs(pruned, text, words) == want
    assert _all_defs(pruned) < _all_defs(whole)


SAMPLE = textwrap.dedent('''\
    import os


    @decorated(
        "multi-line decorator",
    )
    def kept_whole_under_a_multiline_decorator(x):
        return x


    class Runner(
        Base,
    ):
        """A class with a multi-line header."""

        limit = 3

        @property
        def dropped(self):
            return 1

        def can_run(
            self,
            batch,
        ) -> bool:
            return batch.size <= self.limit

        async def other(self):
            def nested():
                return 2
            return nested()


    def helper():
        return os.getcwd()
''')


def test_pruning_leaves_out_what_holds_no_word_and_keeps_the_rest_in_place(tmp_path):
    """A decorated method, an async method and a top-level function without the word become
    `pass`; the method with a multi-line signature that holds it stays, at its own lines; the
    class's header, docstring and attribute stay; a def under a decorator over several lines
    is kept whole (its block is not told from the decorator's lines)."""
    pruned = source._pruned_text(SAMPLE, ASKS)
    tree = ast.parse(pruned)
    names = {d.name for d in ast.walk(tree) if isinstance(d, ast.FunctionDef)}
    assert names == {"kept_whole_under_a_multiline_decorator", "can_run"}
    runner = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    assert [type(n).__name__ for n in runner.body] == ["Expr", "Assign", "Pass", "FunctionDef",
                                                       "Pass"]
    can_run = runner.body[3]
    whole = ast.parse(SAMPLE)
    want = next(d for d in ast.walk(whole) if isinstance(d, ast.FunctionDef)
                and d.name == "can_run")
    assert ast.dump(can_run, include_attributes=True) == ast.dump(want, include_attributes=True)


def test_a_text_that_does_not_split_is_parsed_whole(tmp_path):
    """A string whose lines start at a method's depth ends the method's block early: the
    pruned text does not parse, and `parse_pruned` gives the whole module (the same tree
    `parse_file` caches)."""
    text = textwrap.dedent('''\
        class A:
            def f(self):
                x = """
        a line at column 0
        """
                return x

            def can_run(self):
                return True
        ''')
    with pytest.raises(SyntaxError):
        ast.parse(source._pruned_text(text, ASKS))
    path = tmp_path / "m.py"
    path.write_text(text)
    tree = source.parse_pruned(path, ASKS)
    assert tree is source.parse_file(path)
    assert {d.name for d in ast.walk(tree) if isinstance(d, ast.FunctionDef)} == {"f", "can_run"}


def test_a_pruned_tree_is_never_the_module_s_tree(tmp_path):
    """`parse_file` after `parse_pruned` parses the whole module (other readers see every
    function), and `parse_pruned` after it reuses that whole tree."""
    path = tmp_path / "m.py"
    path.write_text(SAMPLE)
    pruned = source.parse_pruned(path, ASKS)
    whole = source.parse_file(path)
    assert pruned is not whole
    assert "helper" not in {d.name for d in ast.walk(pruned) if isinstance(d, ast.FunctionDef)}
    assert "helper" in {d.name for d in ast.walk(whole) if isinstance(d, ast.FunctionDef)}
    assert source.parse_pruned(path, ASKS) is whole
