"""diag.server against a stand-in SGLang server on 127.0.0.1 (standin_sglang_server)."""

from __future__ import annotations

import pytest
from standin_sglang_server import StandinSGLangServer, free_port, metrics_text, server_info

from diag import server as srv
from diag.context import Context, SpecConfig


@pytest.fixture
def standin():
    with StandinSGLangServer() as s:
        yield s


def test_server_info_and_draft_extend_fields(standin):
    standin.json("/server_info", server_info(draft_extend_s=1.74, graph_gb=0.42, ranks=2))
    info = srv.get_server_info(standin.url)
    ranks = srv.draft_extend_startup(info)
    assert [(r.rank, r.capture_s, r.graph_mem_gb) for r in ranks] == [(0, 1.74, 0.42),
                                                                       (1, 1.74, 0.42)]
    assert srv.server_args(info)["attention_backend"] == "dsa"


def test_falls_back_to_get_server_info_on_404(standin):
    standin.json("/get_server_info", server_info(draft_extend_s=0.0))
    info = srv.get_server_info(standin.url)
    assert standin.hits == ["/server_info", "/get_server_info"]
    assert srv.draft_extend_startup(info)[0].capture_s == 0.0


def test_url_without_scheme(standin):
    standin.json("/server_info", server_info())
    assert srv.get_server_info(standin.url.removeprefix("http://"))["version"] == "0.5.23"


def test_metrics_parsed_with_prometheus_parser(standin):
    standin.text("/metrics", metrics_text(draft_extend_s=2.5))
    fams = srv.get_metrics(standin.url)
    got = srv.samples(fams, "sglang:startup_cuda_graph_time_seconds", phase="draft_extend")
    assert len(got) == 1 and got[0][1] == 2.5 and got[0][0]["tp_rank"] == "0"
    assert srv.samples(fams, "sglang:startup_cuda_graph_time_seconds", phase="nope") == []


def test_malformed_json_is_a_bad_answer(standin):
    standin.text("/server_info", "{not json", ctype="application/json")
    with pytest.raises(srv.ServerBadAnswer, match="not JSON"):
        srv.get_server_info(standin.url)


def test_json_that_is_not_an_object(standin):
    standin.json("/server_info", [1, 2])
    with pytest.raises(srv.ServerBadAnswer, match="JSON object"):
        srv.get_server_info(standin.url)


def test_both_info_paths_404(standin):
    with pytest.raises(srv.ServerBadAnswer, match="HTTP 404"):
        srv.get_server_info(standin.url)


def test_http_500(standin):
    standin.json("/server_info", {"detail": "boom"}, status=500)
    with pytest.raises(srv.ServerBadAnswer, match="HTTP 500"):
        srv.get_server_info(standin.url)


def test_metrics_404_says_enable_metrics(standin):
    with pytest.raises(srv.ServerBadAnswer, match="--enable-metrics"):
        srv.get_metrics(standin.url)


def test_malformed_metrics(standin):
    standin.text("/metrics", "# TYPE x gauge\nx{a=\"1\" 3\n")
    with pytest.raises(srv.ServerBadAnswer, match="not Prometheus text"):
        srv.get_metrics(standin.url)


def test_timeout(standin):
    standin.json("/server_info", server_info(), delay=2.0)
    with pytest.raises(srv.ServerTimeout, match="no answer within 0.3 s"):
        srv.get_server_info(standin.url, timeout=0.3)


def test_unreachable():
    with pytest.raises(srv.ServerUnreachable, match="cannot connect"):
        srv.get_server_info(f"http://127.0.0.1:{free_port()}", timeout=2)


def _ctx(url, release, **cfg):
    return Context(target=release("0.5.23"), platform="hip", config=SpecConfig(**cfg),
                   server_url=url)


def test_attach_takes_config_from_server_args(standin, release):
    standin.json("/server_info", server_info(attention_backend="dsv4", steps=1))
    ctx = _ctx(standin.url, release)
    srv.attach(ctx)
    assert (ctx.config.attention_backend, ctx.config.speculative_num_steps,
            ctx.config.source) == ("dsv4", 1, "server")


def test_attach_keeps_options_and_fills_the_rest(standin, release):
    standin.json("/server_info", server_info(attention_backend="dsv4", steps=4))
    ctx = _ctx(standin.url, release, attention_backend="aiter")
    srv.attach(ctx)
    assert (ctx.config.attention_backend, ctx.config.speculative_num_steps,
            ctx.config.source) == ("aiter", 4, "options+server")


def test_attach_fills_every_configuration_fact(standin, release):
    """`--server` gives the census what it decides branches with: dcp size, page size, topk,
    draft tokens, parallelism (0.5.23 publishes them flat: arg_groups/fields/parallel.py:52
    `dcp_size`, schedule.py:143 `page_size`, spec.py:62/66 topk and draft tokens)."""
    standin.json("/server_info", server_info(attention_backend="triton", steps=2, dcp_size=1,
                                             page_size=1, speculative_eagle_topk=1,
                                             speculative_num_draft_tokens=3, tp_size=1))
    ctx = _ctx(standin.url, release)
    srv.attach(ctx)
    c = ctx.config
    assert (c.dcp_size, c.page_size, c.speculative_eagle_topk, c.speculative_num_draft_tokens,
            c.tp_size, c.model, c.source) == (1, 1, 1, 3, 1, "stand-in/model", "server")
    assert c.environ is None  # the environment is not in /server_info


def test_attach_records_bad_answers_and_raises_on_unreachable(standin, release):
    standin.json("/server_info", {"detail": "boom"}, status=500)
    standin.json("/get_server_info", {"detail": "boom"}, status=500)
    ctx = _ctx(standin.url, release)
    srv.attach(ctx)
    assert "HTTP 500" in ctx.cache["server_error"] and "server_info" not in ctx.cache
    standin.text("/server_info", "<html>", ctype="text/html")  # answers, but is not SGLang
    with pytest.raises(srv.NotSGLang, match="is not an SGLang server: /server_info is not JSON"):
        srv.attach(_ctx(standin.url, release))
    with pytest.raises(srv.ServerUnreachable):
        srv.attach(_ctx(f"http://127.0.0.1:{free_port()}", release))
