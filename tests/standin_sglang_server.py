"""A stand-in for a running SGLang server (tests only): serves SGLang-shaped `/server_info`,
`/get_server_info` and `/metrics` on 127.0.0.1 from canned answers.

Why a stand-in: the real 0.5.23 server runs here on CPU (the `engine` lane,
tests/test_engine_server.py, covers `--server` audits, live TUI values and /metrics on it), but
on CPU it can only report `draft_extend == 0.0` (no draft-extend graph is ever captured) and CPU
attention backends; the cases kept on this stand-in need a captured graph (`draft_extend` > 0),
a HIP backend in `server_info` (dsa, aiter, ...), older /get_server_info shapes, or a server that
fails in a chosen way. The shapes copy SGLang 0.5.23
(`http_server.py::server_info`: resolved server args at the top level, `internal_states[]` per
DP rank with `startup_time.cuda_graph.*` seconds and `memory_usage.graph.*` GB;
`metrics_collector.py`: gauge `sglang:startup_cuda_graph_time_seconds{phase=...}`).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def server_info(draft_extend_s: float = 1.74, graph_gb: float = 0.42,
                attention_backend: str = "dsa", steps: int = 3,
                algorithm: str | None = "EAGLE", version: str = "0.5.23",
                ranks: int = 1, **args: Any) -> dict[str, Any]:
    """An SGLang-shaped /server_info document (`args`: more resolved server arguments, flat as
    0.5.23's `ServerArgs.resolved_dict()` gives them, e.g. dcp_size=1)."""
    state = {
        "startup_time": {"load_weight": 12.0, "kv_cache_allocation": 1.5, "scheduler_e2e": 40.0,
                         "cuda_graph": {"decode": 8.1, "target_verify": 6.0,
                                        "draft_decode": 3.2, "draft_extend": draft_extend_s}},
        "memory_usage": {"weight": 60.1, "kvcache": 40.0, "graph": {
            "decode": 1.2, "target_verify": 0.8, "draft_decode": 0.3,
            "draft_extend": graph_gb}},
        "avg_spec_accept_length": 2.61,
    }
    return {
        "model_path": "stand-in/model", "attention_backend": attention_backend,
        "speculative_algorithm": algorithm, "speculative_num_steps": steps,
        "speculative_draft_attention_backend": None, "disable_cuda_graph": False,
        "internal_states": [dict(state) for _ in range(ranks)],
        "version": version, "frontend": "python",
    } | args


def metrics_text(draft_extend_s: float = 1.74) -> str:
    """SGLang-shaped Prometheus text with the startup graph-capture gauge."""
    lab = 'model_name="stand-in/model",engine_type="unified",tp_rank="0",pp_rank="0"'
    return (
        "# HELP sglang:startup_cuda_graph_time_seconds CUDA graph capture time per phase.\n"
        "# TYPE sglang:startup_cuda_graph_time_seconds gauge\n"
        f'sglang:startup_cuda_graph_time_seconds{{{lab},phase="decode"}} 8.1\n'
        f'sglang:startup_cuda_graph_time_seconds{{{lab},phase="draft_extend"}} {draft_extend_s}\n'
        "# HELP sglang:spec_accept_length The average acceptance length.\n"
        "# TYPE sglang:spec_accept_length gauge\n"
        f"sglang:spec_accept_length{{{lab}}} 2.61\n"
    )


class StandinSGLangServer:
    """`routes[path] = (status, content_type, body_bytes, delay_s)`; unknown paths → 404."""

    def __init__(self, routes: dict[str, tuple[int, str, bytes, float]] | None = None) -> None:
        self.routes = routes or {}
        self.hits: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                outer.hits.append(self.path)
                status, ctype, body, delay = outer.routes.get(
                    self.path, (404, "text/plain", b"Not Found", 0.0))
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (timeout tests)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def json(self, path: str, doc: Any, status: int = 200, delay: float = 0.0) -> None:
        self.routes[path] = (status, "application/json", json.dumps(doc).encode(), delay)

    def text(self, path: str, text: str, status: int = 200, delay: float = 0.0,
             ctype: str = "text/plain; version=0.0.4") -> None:
        self.routes[path] = (status, ctype, text.encode(), delay)

    def __enter__(self) -> StandinSGLangServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
