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


def configured(name: str) -> bool:
    """A source the user named (--server, --run-dir): always in the header; others (an engine
    found on this machine) only when there is room."""
    return name.startswith(("server ", "run dir "))


def header_text(m: Model, width: int) -> Text:
    """The header, at most `width` cells: what must be seen first, the rest when it fits."""
    h = m.header
    target = (Text(f"target error: {h.error}", style="bold red") if h.error
              else Text(h.target, style="bold"))
    plat = Text(data.fmt_value(h.platform) + (f" {h.gpu_arch}" if h.gpu_arch else ""))
    required = [n for n in m.sources if configured(n)]
    optional = [n for n in m.sources if not configured(n)]

    def src(name: str, full: bool) -> Text:
        text, style = source_state(m, name, full)
        t = Text(f"{source_label(name)}: ", style="bold")
        t.append(text, style=style)
        return t

    def line(full: bool, n_extra: int, tgt: Text) -> Text:
        extras = [src(n, full) for n in optional] + [
            Text(f"GPU: {data.fmt_value(h.gpu)}", style="dim"),
            Text(f"diag {__version__}", style="dim")]
        out = Text()
        parts = [tgt, plat] + [src(n, full) for n in required] + extras[:n_extra]
        for i, part in enumerate(parts):
            if i:
                out.append(SEP, style="dim")
            out.append_text(part)
        return out

    n_all = len(optional) + 2
    for full, n in [(True, n_all)] + [(False, k) for k in range(n_all, -1, -1)]:
        out = line(full, n, target)
        if out.cell_len <= width:
            if n < n_all and line(False, n + 1, target).cell_len > width and n < len(optional) + 1:
                out = line(False, n + 1, target)  # the next part, cut at the end, still helps
                out.truncate(width, overflow="ellipsis")
            return out
    out = line(False, 0, target)
    over = out.cell_len - width  # the target text gives way last (the error is also in the status)
    tgt = Text(data.shorten(target.plain, max(8, target.cell_len - over)), style=target.style)
    out = line(False, 0, tgt)
    out.truncate(width, overflow="ellipsis")
    return out
