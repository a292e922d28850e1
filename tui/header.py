"""The one header line: target, platform and every live source's state (with its age), then
diag's version and the GPU when there is room. Headless (rich only): the app and `--once` share it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from rich.text import Text

from diag import __version__
from diag.tui import data
from diag.tui.model import Model

SEP = " │ "


def source_label(name: str) -> str:
    """`server http://127.0.0.1:30000` → `server 127.0.0.1:30000`; a run dir by its last part."""
    kind, _, where = name.partition(" ")
    if kind == "server":
        return f"server {urlsplit(where).netloc or where}"
    if name.startswith("run dir "):
        where = name[len("run dir "):].rstrip("/")
        return f"run dir {where.rsplit('/', 1)[-1]}"
    return name


def source_state(m: Model, name: str, full: bool) -> tuple[str, str]:
    """(text, style) of a source's state: `ok, 1 s ago`, `unreachable (last ok 12 s ago)`."""
    s = m.sources[name]
    text = s.text if full else s.text.split(":")[0]
    age = m.source_age(name)
    if s.ok:
        if m.is_stale(age):
            return f"{text}, STALE {data.fmt_age(age)}", "bold yellow"
        return f"{text}, {data.fmt_age(age)}" if full else text, "green"
    if s.ok is False:
        last = f" (last ok {data.fmt_age(age)})" if age is not None else ""
        return text + last, "bold red"
    return text, "dim"


def header_text(m: Model, width: int) -> Text:
    """The header, at most `width` cells: what must be seen first, the rest when it fits."""
    h = m.header
    target = (Text(f"target error: {h.error}", style="bold red") if h.error
              else Text(h.target, style="bold"))
    plat = Text(data.fmt_value(h.platform))
    extras = [Text(f"GPU: {data.fmt_value(h.gpu)}", style="dim"),
              Text(f"diag {__version__}", style="dim")]

    def line(full: bool, more: list[Text], tgt: Text) -> Text:
        out = Text()
        for i, part in enumerate([tgt, plat] + [src(n, full) for n in m.sources] + more):
            if i:
                out.append(SEP, style="dim")
            out.append_text(part)
        return out

    def src(name: str, full: bool) -> Text:
        text, style = source_state(m, name, full)
        t = Text(f"{source_label(name)}: ", style="bold")
        t.append(text, style=style)
        return t

    for full, more in ((True, extras), (False, extras), (False, extras[:1]), (False, [])):
        out = line(full, more, target)
        if out.cell_len <= width:
            return out
    out = line(False, [], target)
    if out.cell_len > width:  # the target text gives way last (the error is also in the status)
        over = out.cell_len - width
        tgt = Text(data.shorten(target.plain, max(8, target.cell_len - over)), style=target.style)
        out = line(False, [], tgt)
    out.truncate(width, overflow="ellipsis")
    return out
