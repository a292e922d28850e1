"""The census against hand-labelled sites (tests/groundtruth/census_*.json).

The labels were written by reading each release's source (every site cites `file:line`), not by
running diag. For every labelled builder the census must list exactly the labelled sites - the
call, the verdict, the per-step forward modes that reach it and its reach class - no more, no
fewer. A known miss stays listed only while the census still gets it wrong.
AST only: no SGLang import.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.probes.metadata_syncs.census.count import census

pytestmark = pytest.mark.release
TRUTH = sorted((Path(__file__).parent / "groundtruth").glob("census_*.json"))


def _label(site: dict) -> tuple:
    return (site["line"], site["call"], site["verdict"], tuple(site["paths"]), site["reach"])


def _got(s) -> tuple:
    return (s.line, s.kind, s.verdict, tuple(s.paths), s.path_class)


@pytest.mark.parametrize("path", TRUTH, ids=[p.stem for p in TRUTH])
def test_census_agrees_with_the_hand_labels(release, path):
    truth = json.loads(path.read_text())
    c = census(release(truth["release"]))
    misses = {(m["file"], m["line"], m["call"]) for m in truth["known_misses"]}
    n, disagree = 0, []
    for file, functions in truth["functions"].items():
        for function, labels in functions.items():
            # host-to-device blocking copies ("h2d") came after these labels: their truth is
            # tests/test_syncs_h2d.py
            got = sorted(_got(s) for s in c.sites if s.file == file
                         and s.function == function and s.kind != "h2d")
            want = sorted(_label(s) for s in labels)
            n += len(want)
            keep = [x for x in want if (file, x[0], x[1]) not in misses]
            seen = [x for x in got if (file, x[0], x[1]) not in misses]
            if keep != seen:
                disagree.append(f"{file} {function}:\n  want {keep}\n  got  {seen}")
            for x in want:
                if (file, x[0], x[1]) in misses:
                    assert x not in got, f"{file}:{x[0]} is no longer a miss: drop it from " \
                        f"known_misses"
    print(f"\n{truth['release']}: {n} hand-labelled census sites in "
          f"{sum(len(f) for f in truth['functions'].values())} builders, "
          f"{len(misses)} known misses")
    assert not disagree, "\n".join(disagree)
