"""Which configured backend classes the census could not read: their counts are not known.

Why: the census counts the sites it scanned; a class whose module does not parse (a partial
write, an edit) or that is not defined under `sglang/srt/layers/attention` at all (the NPU's
`AscendAttnBackend` lives in `srt/hardware_backend/`) has no sites, so its phases would read "0
syncs, exact" for code nobody read. The probe says such a class was not read and its phases
are "not known" instead.
"""

from __future__ import annotations

import re
from pathlib import Path

from diag.probes.metadata_syncs.census.sites import ATTENTION_DIR
from diag.target import Target


def unread_classes(target: Target, classes: set[str], builders: dict[str, list[str]],
                   errors: list[str]) -> dict[str, str]:
    """{class: why it was not read} among `classes`. A class with a builder of its own in the
    census (`builders`: file -> qualnames) was read; one without is looked up by its `class`
    line in the attention modules: read where its module parsed (it inherits its builders),
    not read where the module is in `errors` (the census's "file: Error: message") or where no
    module defines it."""
    own = {q.split(".", 1)[0] for names in builders.values() for q in names}
    todo = sorted(c for c in classes if c not in own)
    if not todo:
        return {}
    broken = {e.split(": ", 1)[0]: e.split(": ", 1)[1] for e in errors if ": " in e}
    root = target.file(ATTENTION_DIR)
    texts: dict[Path, str] = {}
    out: dict[str, str] = {}
    for cls in todo:
        rx = re.compile(rf"^[ \t]*class {re.escape(cls)}\b", re.M)
        home = None
        for path in sorted(root.rglob("*.py")):
            if path not in texts:
                try:
                    texts[path] = path.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    texts[path] = ""
            if rx.search(texts[path]):
                home = target.relpath(path)
                break
        if home is None:
            out[cls] = f"no module under sglang/{ATTENTION_DIR} defines it"
        elif home in broken:
            out[cls] = f"its module {home} does not parse ({broken[home]})"
    return out
