"""The page size a backend's own rule sets, and the sizes it keeps, read at the rule in each
release. Expected values are read by hand from the release sources (file:line below)."""

from __future__ import annotations

import pytest

from diag.context import SpecConfig
from diag.probes.startup.resolve import Model, backend_page_rule, resolve_page_size


@pytest.mark.parametrize("version,backend,expected", [
    # 0.5.9 server_args.py:1904-1908: `if self.page_size not in [16, 32, 64]:` ... `= 64`
    ("0.5.9", "trtllm_mha", (64, (16, 32, 64), "sglang/srt/server_args.py", 1906)),
    # 0.5.9 server_args.py:1866-1872: Cutlass MLA, unconditionally 128
    ("0.5.9", "cutlass_mla", (128, (), "sglang/srt/server_args.py", 1870)),
    # 0.5.9 server_args.py:1856-1863: FlashMLA, unconditionally 64
    ("0.5.9", "flashmla", (64, (), "sglang/srt/server_args.py", 1861)),
    # 0.5.23 arg_groups/overrides.py:1175-1187: 16, 32, 64 or 128 kept, else 64
    ("0.5.23", "trtllm_mha", (64, (16, 32, 64, 128), "sglang/srt/arg_groups/overrides.py", 1185)),
    # 0.5.23 arg_groups/overrides.py:1188-1197: HPC-Ops, `if page_size != 64`
    ("0.5.23", "hpc_ops", (64, (64,), "sglang/srt/arg_groups/overrides.py", 1195)),
    # 0.5.23 arg_groups/overrides.py:1155-1164: TRT-LLM MLA keeps 32 or 64
    ("0.5.23", "trtllm_mla", (64, (32, 64), "sglang/srt/arg_groups/overrides.py", 1161)),
])
def test_rule_read_at_its_line(release, version, backend, expected):
    forced, kept, w = backend_page_rule(release(version), backend)
    assert (forced, kept, w.file, w.line) == expected


def test_trtllm_mha_page_size_not_given_is_64_and_a_kept_size_stays(release):
    """0.5.23: a page size not given is None at the rule (overrides.py:1146, `view.page_size`),
    not in the kept list, so 64; --page-size 128 is kept (16/32/64/128), 256 becomes 64."""
    t = release("0.5.23")
    llama = Model(arch="LlamaForCausalLM", mla=False)
    for given, want in ((None, 64), (128, 128), (256, 64)):
        p = resolve_page_size(t, "cuda", SpecConfig(page_size=given), llama, {}, "trtllm_mha")
        assert p.value == want, (given, p.why)
    # 0.5.9 kept no 128 (server_args.py:1904)
    p = resolve_page_size(release("0.5.9"), "cuda", SpecConfig(page_size=128), llama, {},
                          "trtllm_mha")
    assert p.value == 64


@pytest.mark.parametrize("version,line", [("0.5.20", 74), ("0.5.23", 71)])
def test_qwen4_exp_without_a_backend_on_cuda_follows_the_gpu(release, version, line):
    """Qwen4-Exp, no --attention-backend, on CUDA: under `get_platform().is_sm100` the model's
    override sets page_size 1 (triton) or 64 (trtllm_mha) whatever --page-size says (0.5.20
    arg_groups/model_overrides/qwen4_exp.py:60-74, 0.5.23 :57-71): `depends`, cited there.
    With a backend given, or on HIP, the override does not run: the page given."""
    t = release(version)
    qwen4 = Model(arch="Qwen4ExpForConditionalGeneration", mla=False,
                  params={"text_config": {"num_hidden_layers": 2}}, source="config.json")
    p = resolve_page_size(t, "cuda", SpecConfig(page_size=64), qwen4, {}, None)
    assert p.value is None and p.if_true == 64
    assert (p.where.file, p.where.line) == \
        ("sglang/srt/arg_groups/model_overrides/qwen4_exp.py", line)
    assert "SM100" in p.condition and "elsewhere 64" in p.condition
    given = resolve_page_size(t, "cuda", SpecConfig(page_size=64, attention_backend="fa3"),
                              qwen4, {}, "fa3")
    assert given.value == 64
    assert resolve_page_size(t, "hip", SpecConfig(page_size=64), qwen4, {}, None).value == 64
