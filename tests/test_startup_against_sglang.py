"""diag's start-up resolution against SGLang's OWN argument handling, run on this CPU.

Why: the hand-read tables check diag against a person's reading of the source; this checks it
against the code itself. `tests/resolve_child.py` runs the real release's
`ServerArgs(...).resolve_once()` (0.5.23 srt/server_args.py:244-315, the pipeline of
srt/arg_groups/pipeline.py) under SGLang's own platform override (`override_platform`,
srt/runtime_context.py:1950) for an MI300 (HIP), an H100 (CUDA SM90 with FlashInfer) and
a B200 (CUDA SM100), and for each case diag must agree on three facts:

- the attention backend SGLang runs: diag's one backend where it decides one, else SGLang's is
  among diag's candidates (diag cannot know the GPU generation; its conditions name it);
- the page size: equal where diag decides it, else SGLang's is the value diag names for its
  condition or the default 1;
- the start: where SGLang's argument handling raises, no phase may be `graph` or `eager` in
  diag's per-phase verdicts (`refused`, or `depends` naming the condition), unless the input
  not given has one value that starts and diag reads that one, saying so; where it starts,
  no phase may be `refused` by an argument-handling rule (server_args.py, arg_groups/): a
  backend's own refusal comes later, when the worker builds it, and this run does not get there.

Two releases: 0.5.19 (the first with `override_platform`, srt/runtime_context.py:1897,
and the first with DSA in the HIP gate) and 0.5.23; a fact a release does not know (0.5.19 has
no is_sm110 or is_mps) is left out. Older releases test `is_hip()` and the device directly and
stay checked by the hand-read tables.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path

import pytest

from diag.context import SpecConfig
from diag.probes.draft_extend_graph.phases import audited_verdicts
from diag.probes.startup.default_backend import resolve_backend
from diag.probes.startup.model_rules import DEPENDS, REFUSED
from diag.probes.startup.resolve import auto_params, read_model, resolve_page_size

REPO = Path(__file__).resolve().parents[1]
VENV_PY = Path(os.environ.get("DIAG_SGLANG_VENV", REPO / ".venv-sglang")) / "bin" / "python"
# DIAG_ORACLE_RELEASES=0.5.20,0.5.21,0.5.22 runs others (each from 0.5.19 imports here)
VERSIONS = tuple(v for v in os.environ.get("DIAG_ORACLE_RELEASES", "").split(",") if v) \
    or ("0.5.19", "0.5.23")

# model configs (config.json inputs): the families whose start-up rules differ
MODELS = {
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
              "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 4,
              "num_hidden_layers": 2, "vocab_size": 1000},
    "dsv3": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
             "num_hidden_layers": 2, "hidden_size": 256, "vocab_size": 1000,
             "num_attention_heads": 128, "num_key_value_heads": 128},
    "dsv32": {"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
              "num_hidden_layers": 2, "hidden_size": 256, "vocab_size": 1000,
              "num_attention_heads": 128, "num_key_value_heads": 128, "index_topk": 2048,
              "index_head_dim": 128, "index_n_heads": 64},
    "dsv4": {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
             "num_hidden_layers": 2, "hidden_size": 256, "vocab_size": 1000,
             "sliding_window": 128, "index_head_dim": 128, "compress_ratios": [0, 4]},
    "qwen4": {"architectures": ["Qwen4ExpForConditionalGeneration"], "model_type": "qwen4_exp",
              "text_config": {"num_hidden_layers": 2, "hidden_size": 256, "vocab_size": 1000}},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256,
              "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "vocab_size": 1000, "head_dim": 64},
    "glm5": {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "deepseek_v32",
             "num_hidden_layers": 2, "hidden_size": 256, "vocab_size": 1000,
             "num_attention_heads": 64, "num_key_value_heads": 64, "index_topk": 2048,
             "index_head_dim": 128, "index_n_heads": 32},
    "qwen3vl": {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
                "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 256,
                                "num_attention_heads": 4, "num_key_value_heads": 2,
                                "num_hidden_layers": 2, "vocab_size": 1000, "head_dim": 64,
                                "intermediate_size": 512},
                "vision_config": {"depth": 1}},
}
_OFF = dict(is_npu=False, is_xpu=False, is_musa=False, is_mps=False, is_sm110=False,
            is_sm120=False, has_amx=False)
GPUS = {  # SGLang's platform facts (srt/runtime_context.py:1824-1846) of three cards
    "mi300": ("hip", dict(_OFF, is_hip=True, is_cuda=False, is_sm90=False, is_sm100=False,
                          is_sm100_or_sm110=False, is_blackwell=False,
                          is_hopper_with_cuda_12_3=False, has_flashinfer=False, device_sm=0,
                          device_capability=[9, 4])),
    "h100": ("cuda", dict(_OFF, is_hip=False, is_cuda=True, is_sm90=True, is_sm100=False,
                          is_sm100_or_sm110=False, is_blackwell=False,
                          is_hopper_with_cuda_12_3=True, has_flashinfer=True, device_sm=90,
                          device_capability=[9, 0])),
    "b200": ("cuda", dict(_OFF, is_hip=False, is_cuda=True, is_sm90=False, is_sm100=True,
                          is_sm100_or_sm110=True, is_blackwell=True,
                          is_hopper_with_cuda_12_3=False, has_flashinfer=True, device_sm=100,
                          device_capability=[10, 0])),
}
BACKENDS = {"hip": (None, "triton", "aiter", "dsa", "qsa"),
            "cuda": (None, "triton", "fa3", "flashinfer", "dsa", "qsa", "trtllm_mha",
                     "flashmla")}
# steps, topk, draft tokens, --page-size (a page > 1 with topk > 1: the page-tree rule)
# (none of the three given: SGLang's own choice, `auto_params`; topk alone: its assert; steps
# alone: the missing topk compared, a TypeError)
SHAPES = ((3, 1, 4, None), (3, 4, 8, None), (1, 1, 2, None), (3, 4, 8, 64),
          (None, None, None, None), (None, 1, None, None), (3, None, None, None))
ENVS = {"hip": ({}, {"SGLANG_USE_AITER": "1"},
                {"SGLANG_USE_AITER": "1", "SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d",
                 "SGLANG_USE_AITER_UNIFIED_ATTN": "1"}),
        "cuda": ({},)}
ARG_FILES = ("srt/server_args.py", "srt/arg_groups/")
# MTP (NEXTN) where the model carries its own draft layers; EAGLE3 where a draft model does
ALGORITHMS = {"llama": ("EAGLE", "EAGLE3"), "dsv3": ("EAGLE", "NEXTN"),
              "dsv32": ("EAGLE", "NEXTN"), "dsv4": ("EAGLE", "NEXTN", "EAGLE3"),
              "qwen4": ("EAGLE",), "qwen3": ("EAGLE", "EAGLE3"), "glm5": ("EAGLE", "NEXTN"),
              "qwen3vl": ("EAGLE",)}


# parallelism, for the DSA models whose own rules read it (DCP with topk > 1)
PARALLEL = ({"dcp_size": 2, "tp_size": 2},
            {"enable_dp_attention": True, "dp_size": 2, "tp_size": 2})
PARALLEL_MODELS = ("dsv32", "glm5")


def _known(target, arch: str) -> bool:
    """The release has a model class of this name (0.5.19 has no Qwen4Exp)."""
    return any(f"class {arch}(" in f.read_text(errors="replace")
               for f in target.file("srt/models").glob("*.py"))


def _cases(models: Path, names: list[str] | None = None) -> list[dict]:
    out = []
    for m in names or MODELS:
        for gpu, (plat, facts) in GPUS.items():
            for backend in BACKENDS[plat]:
                for (steps, topk, draft, page), algo in itertools.product(SHAPES,
                                                                           ALGORITHMS[m]):
                    for env in ENVS[plat]:
                        if env and (steps is None) != (topk is None):
                            continue  # the steps or topk alone fail before any switch counts
                        args = dict(model_path=str(models / m), skip_tokenizer_init=True,
                                    speculative_algorithm=algo, device="cuda",
                                    speculative_num_steps=steps, speculative_eagle_topk=topk,
                                    speculative_num_draft_tokens=draft,
                                    attention_backend=backend, page_size=page)
                        envs = " ".join(f"{k}={v}" for k, v in env.items())
                        out.append({"id": f"{m} {algo} {gpu} {backend or 'default'} "
                                          f"steps{steps} topk{topk} page{page} {envs}".strip(),
                                    "model": m, "platform": plat, "facts": facts,
                                    "env": env, "args": args})
                        if m in PARALLEL_MODELS and not env and page is None and steps == 3:
                            out += [{**out[-1], "id": f"{out[-1]['id']} {sorted(par.items())}",
                                     "args": {**args, **par}} for par in PARALLEL]
    return out


@pytest.fixture(scope="module", params=VERSIONS)
def sglang_said(request, tmp_path_factory, release):
    """Every case resolved by the release itself, in one child process."""
    if not VENV_PY.exists():
        pytest.fail(f"{VENV_PY} missing: scripts/sglang-env.sh builds it (scripts/test.sh does)")
    models = tmp_path_factory.mktemp("models")
    for name, cfg in MODELS.items():
        (models / name).mkdir()
        (models / name / "config.json").write_text(json.dumps(cfg))
    target = release(request.param)
    cases = _cases(models, [m for m, c in MODELS.items() if _known(target, c["architectures"][0])])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "DIAG_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(target.root), str(REPO / "tests" / "standins")])
    p = subprocess.run([str(VENV_PY), str(REPO / "tests" / "resolve_child.py")],
                       input="".join(json.dumps(c) + "\n" for c in cases), text=True,
                       capture_output=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    said = {d["id"]: d for d in map(json.loads, p.stdout.splitlines())}
    assert len(said) == len(cases)
    return target, cases, said


def _cfg(case: dict) -> SpecConfig:
    a = case["args"]
    return SpecConfig(attention_backend=a["attention_backend"],
                      speculative_algorithm=a["speculative_algorithm"],
                      speculative_num_steps=a["speculative_num_steps"],
                      speculative_eagle_topk=a["speculative_eagle_topk"],
                      speculative_num_draft_tokens=a["speculative_num_draft_tokens"],
                      page_size=a["page_size"], model=a["model_path"], environ=dict(case["env"]),
                      tp_size=a.get("tp_size"), dcp_size=a.get("dcp_size"),
                      dp_size=a.get("dp_size"), enable_dp_attention=a.get("enable_dp_attention"))


def test_the_grid_ran_and_both_outcomes_occur(sglang_said):
    """The child resolved every case; some start and some are refused, so each check below
    has cases to judge. Errors other than SGLang's refusals (a model config too thin for
    its config class) would hide cases: none."""
    _, cases, said = sglang_said
    errors = [d["error"] for d in said.values() if "error" in d]
    assert errors and len(errors) < len(cases)
    assert not [e for e in errors if e["environment"]], "an error of this machine hid cases"
    # (and the TypeError of steps without topk: `None > 1`, tests/test_auto_steps.py)
    odd = [e for e in errors if e["type"] not in ("ValueError", "AssertionError",
                                                  "NotImplementedError", "RuntimeError")
           and e["message"] != "'>' not supported between instances of 'NoneType' and 'int'"]
    assert not odd, odd[:3]


def _started(sglang_said):
    """(target, case, what SGLang resolved, the case's SpecConfig) for each case that started."""
    target, cases, said = sglang_said
    for c in cases:
        r = said[c["id"]].get("resolved")
        if r is not None:
            yield target, c, r, _cfg(c)


def test_backend_is_sglangs_or_among_the_candidates(sglang_said):
    wrong = []
    for target, c, r, cfg in _started(sglang_said):
        choice = resolve_backend(target, c["platform"], cfg, read_model(target, cfg.model))
        got = r["attention_backend"]
        names = {x.backend for x in choice.candidates}
        if (choice.backend or None) not in (got, None) or got not in names:
            wrong.append(f"{c['id']}: SGLang {got}, diag {choice.backend or sorted(map(str, names))}")
    assert not wrong, "\n".join(wrong)


def test_page_size_is_sglangs(sglang_said):
    wrong = []
    for target, c, r, cfg in _started(sglang_said):
        model = read_model(target, cfg.model)
        page = resolve_page_size(target, c["platform"], cfg, model, dict(c["env"]),
                                 r["attention_backend"], env_given=True)
        ok = page.value == r["page_size"] if page.value is not None else \
            r["page_size"] in (page.if_true, 1)
        if not ok:
            wrong.append(f"{c['id']} ({r['attention_backend']}): SGLang {r['page_size']}, "
                         f"diag {page.value} ({page.why})")
    assert not wrong, "\n".join(wrong)


def test_start_refusals_agree_with_sglangs(sglang_said):
    target, cases, said = sglang_said
    wrong, refused_exact = [], 0
    for c in cases:
        d = said[c["id"]]
        audit = audited_verdicts(target, c["platform"], _cfg(c))
        assert audit is not None, c["id"]
        modes = {pv.phase: pv.mode for pv in audit.verdicts}
        if "error" in d:
            ran = {p: m for p, m in modes.items() if m not in (REFUSED, DEPENDS)}
            # a topk not given where only topk 1 starts (DeepSeek-V4): diag reads topk 1, the
            # only server that can run, and each reason says SGLang refuses the one without
            read_one = c["args"]["speculative_eagle_topk"] is None and all(
                "the only one that starts" in pv.reason for pv in audit.verdicts)
            # steps without topk: the phases are a server given topk, each reason saying that
            # SGLang fails without it (probes.startup.auto_steps.missing_topk)
            noted = c["args"]["speculative_eagle_topk"] is None and all(
                "--speculative-num-steps without --speculative-eagle-topk" in pv.reason
                for pv in audit.verdicts if pv.phase in ran)
            if ran and not read_one and not noted:
                wrong.append(f"{c['id']}: SGLang refuses ({d['error']['message'][:120]}), "
                             f"diag {ran}")
            refused_exact += all(m == REFUSED for m in modes.values())
        else:
            at_args = [pv for pv in audit.verdicts if pv.mode == REFUSED and pv.where is not None
                       and str(pv.where.file).startswith(ARG_FILES)]
            if at_args:
                pv = at_args[0]
                wrong.append(f"{c['id']}: SGLang starts ({d['resolved']['attention_backend']}, "
                             f"page {d['resolved']['page_size']}), diag refuses {pv.phase} at "
                             f"{pv.where}: {pv.reason[:160]}")
    assert not wrong, "\n".join(wrong)
    assert refused_exact > 0


def test_own_choice_of_steps_topk_and_draft_tokens_is_sglangs(sglang_said):
    """None of --speculative-num-steps, -eagle-topk, -num-draft-tokens given: SGLang picks
    them by the architecture (`_auto_choose_speculative_params`); diag's reading of that
    function gives the same three numbers wherever SGLang started, and the per-phase verdicts
    of one backend read them, saying so."""
    wrong, seen, checked = [], 0, 0
    for target, c, r, _ in _started(sglang_said):
        if c["args"]["speculative_num_steps"] is not None:
            continue
        seen += 1
        arch = MODELS[c["model"]]["architectures"][0]
        mine = auto_params(target, arch, c["args"]["speculative_algorithm"])
        theirs = (r["speculative_num_steps"], r["speculative_eagle_topk"],
                  r["speculative_num_draft_tokens"])
        if mine is None or mine[0] != theirs:
            wrong.append(f"{c['id']}: SGLang {theirs}, diag {mine}")
        # the per-phase verdicts read that choice, and say so (probes.startup.auto_steps),
        # wherever they are one backend's (not SGLang's pick among candidates diag names)
        audit = audited_verdicts(target, c["platform"], _cfg(c))
        said = f"SGLang's own choice for {arch} is steps {theirs[0]}, topk {theirs[1]}"
        mine_pvs = [pv for pv in audit.verdicts if pv.backend != "?" and "depends on which "
                    "backend SGLang picks" not in pv.reason] if audit is not None else []
        checked += len(mine_pvs)
        if not all(said in pv.reason for pv in mine_pvs):
            wrong.append(f"{c['id']}: SGLang ran {theirs}; diag's phases do not read it: "
                         f"{[pv.reason[-160:] for pv in audit.verdicts][:1]}")
    assert seen and checked and not wrong, "\n".join(wrong)
