"""One-time cache fills (census/memo.py): the sites in `if self._x is None: ...; self._x = ...`
run on the first pass, not per step. Expected verdicts from the release sources (file:line)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from diag.probes.metadata_syncs.census.count import census
from diag.probes.metadata_syncs.census.memo import emptied, memo_fill

A = "sglang/srt/layers/attention/"


def _sites(c, file: str, line: int, kind: str) -> list:
    return [s for s in c.sites if (s.file, s.line, s.kind) == (A + file, line, kind)]


@pytest.mark.release
@pytest.mark.parametrize("version, line", [("0.5.19", 2659), ("0.5.23", 3129)])
def test_the_dsa_identity_scale_copy_runs_once(release, version, line):
    """0.5.23 dsa_backend.py:3127-3130 (0.5.19 :2657-2660): `identity_scale =
    self._q8kv8_identity_scale; if identity_scale is None: identity_scale = torch.tensor([1.0],
    ..., device=dev); self._q8kv8_identity_scale = identity_scale`, the attribute None from
    `__init__` (0.5.23 :701, 0.5.19 :438) and assigned nowhere else: one copy per backend."""
    [s] = _sites(census(release(version), scope="forward"), "dsa_backend.py", line, "h2d")
    assert (s.verdict, s.path_class, s.paths, s.syncs) == ("once", "once", (), 1)
    assert "`self._q8kv8_identity_scale` (" in s.why and "first pass only" in s.why


@pytest.mark.release
def test_a_hasattr_fill_runs_once(release):
    """0.5.15 deepseek_v4_backend.py:713-716: `if not hasattr(self, "extend_seq_lens_buffer"):
    self.extend_seq_lens_buffer = torch.tensor([...] * 1025, device=self.device)`, the
    attribute assigned nowhere else (:717 reads it)."""
    [s] = _sites(census(release("0.5.15")), "deepseek_v4_backend.py", 714, "h2d")
    assert (s.verdict, s.path_class) == ("once", "once")


def _parse(src: str) -> tuple[ast.ClassDef, ast.FunctionDef, ast.If]:
    cls = ast.parse(textwrap.dedent(src)).body[0]
    assert isinstance(cls, ast.ClassDef)
    fn = next(m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "forward")
    return cls, fn, next(n for n in ast.walk(fn) if isinstance(n, ast.If))


def test_memo_forms_and_what_is_not_one():
    cls, fn, st = _parse("""
        class B:
            def forward(self, x):
                buf = getattr(self, "_buf", None)
                if buf is None:
                    buf = torch.tensor([1], device=x.device)
                    self._buf = buf
                return buf
        """)
    assert memo_fill(st, fn) == "_buf" and emptied(cls) == set()
    # the body fills another attribute: not the tested cache
    _, fn, st = _parse("""
        class B:
            def forward(self, x):
                if self._a is None:
                    self._b = torch.tensor([1], device=x.device)
        """)
    assert memo_fill(st, fn) is None
    # a cache on the per-forward metadata: filled once per forward, still per step
    _, fn, st = _parse("""
        class B:
            def forward(self, x, metadata):
                if metadata.cu is None:
                    metadata.cu = x.new_tensor([1])
        """)
    assert memo_fill(st, fn) is None
    # a cache another method empties again (per step, perhaps): the scan keeps it per step
    cls, fn, st = _parse("""
        class B:
            def __init__(self):
                self._c = None
            def init_forward_metadata(self, fb):
                self._c = None
            def forward(self, x):
                if not self._c:
                    self._c = x.tolist()
        """)
    assert memo_fill(st, fn) == "_c" and emptied(cls) == {"_c"}


def test_the_scan_counts_a_fill_once_and_a_refilled_cache_per_step(tmp_path):
    """The scan's side: a fill (and the helper it calls) runs once; the same fill of a cache
    `init_forward_metadata` empties every step stays per step; the code after the fill runs
    per step either way."""
    from diag.probes.metadata_syncs.census.count import scan_file

    src = tmp_path / "standin_backend.py"
    src.write_text(
        "import torch\n\n\nclass StandInBackend:\n"
        "    def __init__(self):\n"
        "        self._lens = None\n"
        "        self._refilled = None\n\n"
        "    def _make(self, forward_batch):\n"
        "        return forward_batch.seq_lens.tolist()\n\n"
        "    def init_forward_metadata(self, forward_batch):\n"
        "        self._refilled = None\n"
        "        if self._lens is None:\n"
        "            self._lens = self._make(forward_batch)\n"
        "        if self._refilled is None:\n"
        "            self._refilled = forward_batch.seq_lens.tolist()\n"
        "        return forward_batch.seq_lens.max().item()\n")
    _, sites, _ = scan_file(src, "sglang/srt/layers/attention/standin_backend.py")
    got = {s.line: (s.kind, s.verdict, s.path_class) for s in sites}
    assert got == {10: ("tolist", "once", "once"), 17: ("tolist", "syncs", "per-step"),
                   18: ("item", "syncs", "per-step")}
