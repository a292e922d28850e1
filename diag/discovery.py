"""Running SGLang servers on this host, found with psutil (pid, port, URL, command line)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

# `python -m sglang.launch_server ...`, `sglang serve ...`, `python -m sglang serve ...`
_LAUNCH = re.compile(r"sglang[./]launch_server|(^|\s|/)sglang\s+serve\b|-m\s+sglang\s+serve\b")
DEFAULT_PORT = 30000


@dataclass(frozen=True)
class ServerProcess:
    pid: int
    port: int | None
    host: str
    listening: tuple[int, ...]  # ports the process listens on (when the OS lets us see them)
    cmdline: str

    @property
    def url(self) -> str | None:
        if self.port is None:
            return None
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["listening"] = list(self.listening)
        d["url"] = self.url
        return d


def is_launch_cmdline(argv: list[str]) -> bool:
    return bool(_LAUNCH.search(" ".join(argv)))


def option(argv: list[str], name: str) -> str | None:
    """Value of `--name V` or `--name=V` in an argv."""
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def find_servers() -> list[ServerProcess]:
    """SGLang launcher processes visible to this user; never raises."""
    try:
        import psutil
    except ImportError:
        return []
    out: list[ServerProcess] = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            argv = p.info.get("cmdline") or []
            if not argv or not is_launch_cmdline(argv):
                continue
            listening = _listening(p)
            port_opt = option(argv, "--port")
            port = int(port_opt) if port_opt and port_opt.isdigit() else None
            if port is None:
                port = DEFAULT_PORT if DEFAULT_PORT in listening or not listening else \
                    (listening[0] if listening else None)
            host = option(argv, "--host") or "127.0.0.1"
            out.append(ServerProcess(p.info["pid"], port, host, tuple(listening), " ".join(argv)))
        except (psutil.Error, OSError, ValueError):
            continue
    return sorted(out, key=lambda s: s.pid)


def _listening(p) -> list[int]:
    import psutil

    try:
        conns = p.net_connections(kind="inet") if hasattr(p, "net_connections") \
            else p.connections(kind="inet")
    except (psutil.Error, OSError):
        return []
    return sorted({c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN and c.laddr})
