"""Client for a live SGLang server: `/server_info` and `/metrics`, standard library + prometheus.

Why a module of its own: the probes, the CLI and the TUI all read the same two endpoints and
must fail the same way. Every failure is a `ServerError` whose message says what went wrong in
one line: `ServerUnreachable` (nothing answers: connection refused, unknown host) and
`ServerTimeout` on `/server_info` (no whole answer in time) are operational errors for the CLI
(exit 3); `ServerBadAnswer` (HTTP errors, malformed JSON or Prometheus text) and a timeout on a
later read become findings in the probes.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from diag.context import MAX_COUNT
from diag.errors import ServerError, clip, echo, one_line

DEFAULT_TIMEOUT_S = 5.0
MAX_BYTES = 32 * 1024 * 1024  # a /metrics page of a big server is a few MB


class ServerUnreachable(ServerError):
    """Nothing answers at the URL (refused, unknown host, no route)."""


class ServerTimeout(ServerError):
    """The server accepted the connection but did not answer in time."""


class ServerBadAnswer(ServerError):
    """The server answered, but not with what SGLang serves (HTTP error, malformed body)."""


class Redirected(ServerBadAnswer):
    """The server answered 3xx: the URL is not the server's own (never followed). The user
    named it: exit 3, on every command."""


class NotSGLang(ServerBadAnswer):
    """Something answers HTTP at the URL, but it is not an SGLang server: no `/server_info`
    (404 on both paths), or not a JSON object there. The user named it: exit 3."""


class OddAnswer(NotSGLang):
    """`/server_info` is a JSON object, but a server argument diag reads is not of the type
    SGLang gives it (an attention backend that is a list, a step count that is a string): the
    configuration cannot be taken from it. Exit 3 on the command line, a warning in the TUI."""


# The server arguments diag reads, by the types SGLang's ServerArgs gives them (null: not set).
ARG_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("attention_backend", "speculative_draft_attention_backend",
                     "speculative_attention_backend", "speculative_algorithm", "model_path",
                     "version"), (str,)),
    **dict.fromkeys(("speculative_num_steps", "speculative_eagle_topk",
                     "speculative_num_draft_tokens", "page_size", "tp_size", "dp_size",
                     "dcp_size"), (int,)),
    **dict.fromkeys(("disable_cuda_graph", "enable_dp_attention", "disable_overlap_schedule",
                     "enable_multi_layer_eagle", "enable_two_batch_overlap",
                     "speculative_adaptive"), (bool,)),
}
_TYPE_WORDS = {str: "a string", int: "an integer", bool: "true or false"}
_JSON_WORDS = {list: "a list", dict: "an object", str: "a string", bool: "a boolean",
               int: "a number", float: "a number"}


def odd_argument(args: dict[str, Any]) -> str | None:
    """The first server argument diag reads whose value is not of SGLang's type, or a count
    out of any range a server runs with, said in a phrase (`attention_backend is a list
    (['dsa', 'x']), not a string`); None when all are."""
    for name, types in ARG_TYPES.items():
        v = args.get(name)
        if isinstance(v, int) and not isinstance(v, bool) and int in types and \
                not 0 <= v <= MAX_COUNT:
            return f"{name} is {clip(repr(v))}, not a count a server runs with (0 to {MAX_COUNT})"
        if v is None or (isinstance(v, types) and not (isinstance(v, bool) and bool not in types)):
            continue
        shown = repr(v)
        shown = shown if len(shown) <= 60 else shown[:59] + "…"
        return (f"{name} is {_JSON_WORDS.get(type(v), type(v).__name__)} ({shown}), not "
                f"{' or '.join(_TYPE_WORDS[t] for t in types)}")
    return None


def check_url(url: str) -> str:
    """The URL normalised, or ValueError saying what is wrong: a usage error, found before
    any connection (scheme http/https, a host, a port 1-65535, no spaces)."""
    import urllib.parse

    text = url.strip()
    if not text:
        raise ValueError("empty URL (expected http://HOST:PORT)")
    if any(c.isspace() for c in text):
        raise ValueError(f"{echo(url)} contains a space")
    try:
        full = normalize_url(text)
        parts = urllib.parse.urlsplit(full)
    except ValueError as e:  # an unclosed IPv6 bracket
        raise ValueError(f"{echo(url)}: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{echo(url)}: scheme {clip(parts.scheme)}:// is not http:// or https://")
    if parts.username is not None or parts.password is not None:  # never echoed: a secret
        shown = f"{parts.scheme}://…@{parts.netloc.rpartition('@')[2]}"
        raise ValueError(f"{clip(shown)}: a user or password in the URL is not supported "
                         "(diag sends no credentials)")
    if not parts.hostname:
        raise ValueError(f"{echo(url)}: no host (expected http://HOST:PORT)")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{echo(url)}: the port must be a number from 1 to 65535")
    return full


def normalize_url(url: str) -> str:
    """`host:port` → `http://host:port`, a URL with a path (`http://h:30000/v1/models`) → its
    server (`http://h:30000`): diag reads the server's own paths (`/server_info`, `/metrics`)."""
    import urllib.parse

    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}"
    return url.rstrip("/")


class _Watchdog:
    """Shuts the connection's socket at the deadline: a server that sends its status line or
    headers a byte at a time gets each read within the socket's timeout, so nothing else
    bounds the whole answer. The blocked read then ends, and `fired` says why."""

    def __init__(self, deadline: float) -> None:
        self.deadline, self.fired = deadline, False
        self._socks: list[socket.socket] = []
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def arm(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)
            if self._timer is None:
                self._timer = threading.Timer(max(0.0, self.deadline - time.monotonic()),
                                              self._fire)
                self._timer.daemon = True
                self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._socks:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()


def _watched(base: type, dog: _Watchdog) -> type:
    class Watched(base):  # type: ignore[misc,valid-type]
        def connect(self) -> None:
            super().connect()
            dog.arm(self.sock)

    return Watched


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: it is an HTTP error (`redirected`), since what answers
    elsewhere is not the server the user named, and a loop would cost several requests."""

    def http_error_302(self, *args: Any) -> None:  # noqa: D102 (urllib's API)
        return None

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def redirected(e: urllib.error.HTTPError) -> str:
    """` (a redirect to LOCATION: …)` for a 3xx answer, else ""."""
    if not 300 <= e.code < 400:
        return ""
    where = one_line(e.headers.get("Location") or "") if e.headers else ""
    return (f" (a redirect{' to ' + clip(where) if where else ''}: diag does not follow "
            "redirects; pass the URL of the server itself)")


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, dog: _Watchdog) -> None:
        super().__init__()
        self.dog = dog

    def http_open(self, req):  # noqa: ANN001, ANN201 (urllib's API)
        return self.do_open(_watched(http.client.HTTPConnection, self.dog), req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, dog: _Watchdog) -> None:
        super().__init__()
        self.dog = dog

    def https_open(self, req):  # noqa: ANN001, ANN201 (urllib's API)
        return self.do_open(_watched(http.client.HTTPSConnection, self.dog), req,
                            context=self._context)


@contextlib.contextmanager
def open_within(req: Any, timeout: float, what: str) -> Iterator[tuple[Any, float]]:
    """`urlopen(req)` whose whole answer, status line and headers included, is bounded by
    `timeout`: (the response, its deadline for `read_within`). Past it: ServerTimeout."""
    # a little past the socket's own timeout: a server silent for `timeout` is that timeout
    # ("no answer"); one that trickles is cut here
    dog = _Watchdog(time.monotonic() + timeout + min(1.0, timeout / 4))
    opener = urllib.request.build_opener(_HTTP(dog), _HTTPS(dog), _NoRedirect)
    try:
        with opener.open(req, timeout=timeout) as resp:
            yield resp, dog.deadline - min(1.0, timeout / 4)
        if dog.fired:  # the body was cut at the deadline: never a half answer read as whole
            raise ServerTimeout(f"{what}: no whole answer within {timeout:g} s")
    except (OSError, http.client.HTTPException) as e:
        if dog.fired:
            raise ServerTimeout(f"{what}: no whole answer within {timeout:g} s") from e
        raise
    finally:
        dog.cancel()


def _get(url: str, path: str, timeout: float, accept: str) -> bytes:
    full = normalize_url(url) + path
    req = urllib.request.Request(full, headers={"Accept": accept, "User-Agent": "diag"})
    try:
        with open_within(req, timeout, f"GET {full}") as (resp, deadline):
            body = read_within(resp, deadline, f"GET {full}", timeout)
    except urllib.error.HTTPError as e:
        why = redirected(e)
        raise (Redirected if why else ServerBadAnswer)(
            f"GET {full}: HTTP {e.code} {one_line(e.reason)}{why}") from e
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, TimeoutError):
            raise ServerTimeout(f"GET {full}: no answer within {timeout:g} s") from e
        raise ServerUnreachable(f"GET {full}: cannot connect ({one_line(reason)})") from e
    except TimeoutError as e:
        raise ServerTimeout(f"GET {full}: no answer within {timeout:g} s") from e
    except (OSError, http.client.HTTPException) as e:  # reset mid-answer, bad status line
        raise ServerBadAnswer(f"GET {full}: {type(e).__name__}: {clip(one_line(e))}") from e
    except ValueError as e:  # a URL urllib cannot use
        raise ServerUnreachable(f"{full}: not a usable URL ({e})") from e
    if len(body) > MAX_BYTES:
        raise ServerBadAnswer(f"GET {full}: answer larger than {MAX_BYTES} bytes")
    return body


def read_within(resp: Any, deadline: float, what: str, timeout: float) -> bytes:
    """The answer's body (up to MAX_BYTES + 1), read by pieces: `timeout` bounds the whole
    answer, not each read (a server that sends a byte a second never ends otherwise)."""
    parts: list[bytes] = []
    size = 0
    while size <= MAX_BYTES:
        if time.monotonic() > deadline:
            raise ServerTimeout(f"{what}: no whole answer within {timeout:g} s")
        chunk = resp.read1(min(1 << 20, MAX_BYTES + 1 - size))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


def get_server_info(url: str, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """`GET /server_info` (falls back to the deprecated `/get_server_info` on HTTP 404)."""
    try:
        body = _get(url, "/server_info", timeout, "application/json")
        path = "/server_info"
    except ServerBadAnswer as e:
        if "HTTP 404" not in str(e):
            raise
        try:
            body = _get(url, "/get_server_info", timeout, "application/json")
        except ServerBadAnswer as e2:
            if "HTTP 404" not in str(e2):
                raise
            raise NotSGLang(f"{normalize_url(url)} is not an SGLang server: /server_info and "
                            "/get_server_info answer HTTP 404") from e2
        path = "/get_server_info"
    not_sglang = f"{normalize_url(url)} is not an SGLang server: {path}"
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise NotSGLang(f"{not_sglang} is not JSON ({clip(str(e))})") from e
    if not isinstance(doc, dict):
        raise NotSGLang(f"{not_sglang} is not a JSON object ({type(doc).__name__})")
    nested = doc.get("server_args")
    if nested is not None and not isinstance(nested, dict):
        raise OddAnswer(f"{normalize_url(url)}{path}: server_args is "
                        f"{_JSON_WORDS.get(type(nested), type(nested).__name__)}, not an object: "
                        "not what SGLang serves")
    odd = odd_argument(server_args(doc))
    if odd:
        raise OddAnswer(f"{normalize_url(url)}{path}: {odd}: not what SGLang serves (audit "
                        "without --server, with the configuration as options)")
    return doc


def get_metrics(url: str, timeout: float = DEFAULT_TIMEOUT_S) -> list:
    """`GET /metrics` parsed with prometheus_client's text parser → list of metric families
    (each with `.name`, `.type`, `.samples` of `Sample(name, labels, value, ...)`)."""
    try:
        body = _get(url, "/metrics", timeout, "text/plain")
    except ServerBadAnswer as e:
        if "HTTP 404" in str(e):
            raise ServerBadAnswer(f"{e} (start the server with --enable-metrics)") from e
        raise
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return list(text_string_to_metric_families(body.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, TypeError, IndexError) as e:
        raise ServerBadAnswer(f"/metrics: not Prometheus text ({type(e).__name__}: {e})") from e


def samples(families: list, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called `name` whose labels include `labels`."""
    out = []
    for fam in families:
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                out.append((dict(s.labels), float(s.value)))
    return out


@dataclass(frozen=True)
class DraftExtendStartup:
    """One DP rank's draft-extend graph capture, from `/server_info` `internal_states[]`."""

    rank: int
    capture_s: float | None  # startup_time.cuda_graph.draft_extend; 0.0 = not captured
    graph_mem_gb: float | None  # memory_usage.graph.draft_extend
    accept_length: float | None


def draft_extend_startup(info: dict[str, Any]) -> list[DraftExtendStartup]:
    """Per DP rank; an empty list when the server predates these fields (< 0.5.17)."""
    states = info.get("internal_states")
    if not isinstance(states, list):
        return []
    out = []
    for i, st in enumerate(states):
        if not isinstance(st, dict):
            continue
        cap = _dig(st, "startup_time", "cuda_graph", "draft_extend")
        mem = _dig(st, "memory_usage", "graph", "draft_extend")
        acc = st.get("avg_spec_accept_length")
        if cap is None and mem is None:
            continue
        out.append(DraftExtendStartup(i, _num(cap), _num(mem), _num(acc)))
    return out


def server_args(info: dict[str, Any]) -> dict[str, Any]:
    """The resolved server arguments: top-level fields (newer) or a `server_args` object."""
    nested = info.get("server_args")
    return nested if isinstance(nested, dict) else info


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _num(v: Any) -> float | None:
    try:
        return None if v is None or isinstance(v, bool) else float(v)
    except (TypeError, ValueError):
        return None


def attach(ctx: Any, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """Read `/server_info` once for every probe of a run (`ctx.server_url` given).

    Stores the document in `ctx.cache["server_info"]` (or the failure in
    `ctx.cache["server_error"]` for the probes to report as a finding) and, when the command
    line gave no configuration, takes it from the server's arguments. A server that cannot be
    reached at all raises `ServerUnreachable`, one that answers but is not SGLang `NotSGLang`:
    the user named it, so that is exit 3.
    """
    from diag.context import SpecConfig

    ctx.server_url = normalize_url(ctx.server_url)
    try:  # read once: a caller that already has it (the engine's facts) left it in the cache
        info = ctx.cache.get("server_info") or get_server_info(ctx.server_url, timeout)
    except (ServerUnreachable, NotSGLang):
        raise
    except ServerError as e:
        ctx.cache["server_error"] = str(e)
        return
    ctx.cache["server_info"] = info
    try:
        live = SpecConfig.from_server_args(server_args(info))
    except (TypeError, ValueError) as e:
        ctx.cache["server_error"] = f"/server_info: unreadable server arguments ({e})"
        return
    cfg = ctx.config
    # every fact the server's arguments give (the environment is not in /server_info)
    fields = tuple(n for n in SpecConfig._FACTS if n != "environ")
    had_options = any(getattr(cfg, n) is not None for n in fields)
    took = False
    left_out = ctx.cache.get("sources") or {}  # the engine's model not readable here (facts)
    for name in fields:
        if name == "model" and "model" in left_out:
            continue
        if getattr(cfg, name) is None and getattr(live, name) is not None:
            setattr(cfg, name, getattr(live, name))
            took = True
    if live.disable_cuda_graph and not cfg.disable_cuda_graph:
        cfg.disable_cuda_graph = took = True
    if took:
        cfg.source = "options+server" if had_options else "server"
