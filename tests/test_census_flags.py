"""Start-up flags, the GPU arch and boolean environment switches in the census
(probes/metadata_syncs/census/flags.py, switches.py), against the release sources READ BY HAND:

- 0.5.23 aiter_backend.py:104-106 `_use_fp8_prefill_attn = (get_bool_env_var(
  "SGLANG_AITER_FP8_PREFILL_ATTN", "True") and is_gfx95_supported())`; :443-445
  `self.use_fp8_prefill_attn = (_use_fp8_prefill_attn and self.fp8_prefill_num_head is not
  None)`, a statement of `__init__` and the only assignment of that attribute; the extend
  branch of init_forward_metadata tests it at :2542 and calls `_build_prefill_ps_metadata`
  (:2543, def :3502), which calls `make_mla_prefill_ps_meta_data` (:3527, def :977), whose
  `qo_indptr.to("cpu", ...)` and `kv_indptr.to("cpu", ...)` (:998, :999) copy device tensors
  to the host.
- 0.5.22, the same chain: :106-108, :452-454, the test at :2529, `_build_prefill_ps_metadata`
  :3491, `make_mla_prefill_ps_meta_data` :963 with the copies at :984, :985.
- 0.5.19: :101-103, :282-284 (`fp8_prefill_num_head` :273-281, `... if self.use_mla else
  None`), the test `if self.use_fp8_prefill_attn and self.head_pad_mode != "zero":` at :1619
  (init_forward_metadata's extend branch) calls `make_mla_prefill_ps_meta_data` (:1635, def
  :689), whose three `.to("cpu", ...)` (qo_indptr, kv_indptr, seq_lens) are :710-712.
- utils/common.py: `is_gfx95_supported` is `if torch.version.hip: gcn_arch = ...gcnArchName;
  return any(gfx in gcn_arch for gfx in ["gfx95"])` else `return False` (0.5.23 :1239-1248,
  0.5.22 :1195-1204, 0.5.9 :3601-3609); `is_gfx942_supported` looks for "gfx942" (0.5.23
  :1252-1261).
- environ.py: 0.5.23 :638 `SGLANG_AITER_PAGED_PREFILL_ASM = EnvBool(True)`.

So on an MI300 (gfx942) the two copies cannot run; on an MI355 (gfx950) they run for an MLA
model whose head count `check_fp8_prefill_num_head` accepts (`fp8_prefill_num_head`, 0.5.23
:432-441 `... if self.use_mla else None`), which no input here decides, and not for a model
that is not MLA; with SGLANG_AITER_FP8_PREFILL_ATTN=0 they cannot run anywhere.
"""

from __future__ import annotations

import shutil

import pytest

from diag.context import SpecConfig
from diag.probes.metadata_syncs.census.count import census
from diag.probes.metadata_syncs.census.switches import arch_tests, env_defaults
from diag.probes.metadata_syncs.census_config import decide
from diag.target import Target
from tests.conftest import release_target

pytestmark = pytest.mark.release
AITER = "sglang/srt/layers/attention/aiter_backend.py"
COPIES = {"0.5.23": (998, 999), "0.5.22": (984, 985), "0.5.19": (710, 711, 712)}


def _copies(c, version: str) -> list:
    got = [s for s in c.sites if s.file == AITER and s.line in COPIES[version]
           and "target-extend" in s.paths]
    assert {s.line for s in got} == set(COPIES[version]), [(s.line, s.paths) for s in got]
    return got


def _status(sites: list, version: str, **cfg) -> set[str]:
    c = SpecConfig(attention_backend="aiter", **cfg)
    return {decide(s, c, "target-extend", version, "hip").status for s in sites}


@pytest.mark.parametrize("version", sorted(COPIES))
def test_the_gpu_arch_decides_the_fp8_prefill_copies(version):
    sites = _copies(census(release_target(version)), version)
    env: dict[str, str] = {}
    assert _status(sites, version, gpu_arch="gfx942", environ=env) == {"unreachable"}
    assert _status(sites, version, gpu_arch="gfx950", environ=env) == {"depends"}
    # the feature suffix of a gcnArchName does not matter: the test is a substring
    assert _status(sites, version, gpu_arch="gfx950:sramecc+:xnack-", environ=env) == {"depends"}
    assert _status(sites, version, gpu_arch="gfx950",
                   environ={"SGLANG_AITER_FP8_PREFILL_ATTN": "0"}) == {"unreachable"}
    assert _status(sites, version, environ=env) == {"depends"}  # no arch: not decided
    # what still decides it on gfx950 is named, and where it was read through
    [why] = {decide(s, SpecConfig(attention_backend="aiter", gpu_arch="gfx950", environ=env),
                    "target-extend", version, "hip").reason for s in sites}
    assert "`self.use_mla`" in why and "self.check_fp8_prefill_num_head(" in why and \
        "read through self.use_fp8_prefill_attn" in why, why
    # :432-441 `self.fp8_prefill_num_head = (...) if self.use_mla else None` (0.5.22
    # :443-451): a model that is not MLA (Llama, 0.5.23 configs/model_config.py names no
    # AttentionArch.MLA branch for it) leaves it None, so the copies cannot run on gfx950 either
    from diag.probes.metadata_syncs.model_facts import windows

    t = release_target(version)
    for model, want in (("llama", "unreachable"), ("deepseek-v3", "depends")):
        c = SpecConfig(attention_backend="aiter", gpu_arch="gfx950", environ=env, model=model)
        assert {decide(s, c, "target-extend", version, "hip", windows(t, model, None)).status
                for s in sites} == {want}, model
    # off HIP the arch test is false (its `else: return False`)
    c = SpecConfig(attention_backend="aiter", environ=env)
    assert {decide(s, c, "target-extend", version, "cuda").status for s in sites} == \
        {"unreachable"}


@pytest.mark.parametrize("version, line", [("0.5.23", 1239), ("0.5.9", 3601)])
def test_the_arch_tests_are_read_from_the_release(version, line):
    got = arch_tests(release_target(version))
    assert got["is_gfx95_supported"] == (("gfx95",), f"sglang/srt/utils/common.py:{line}")
    if version == "0.5.23":
        assert got["is_gfx942_supported"] == (("gfx942",), "sglang/srt/utils/common.py:1252")


def test_the_environment_defaults_are_read_from_the_release():
    got = env_defaults(release_target("0.5.23"))
    assert got["SGLANG_AITER_PAGED_PREFILL_ASM"] == ("True", "sglang/srt/environ.py:638", "bool")
    assert got["SGLANG_HACK_FLASHMLA_BACKEND"] == ("auto", "sglang/srt/environ.py:1051", "str")


def test_a_gate_function_is_read_through_into_its_module():
    """0.5.23 deepseek_v4_backend_hip_radix.py:2714-2715 `if not is_unified_kv_triton():
    return` stands before `_attach_unified_kv_prefill_meta`'s repeat_interleave (:2723-2727,
    the one hand_census.json row still missed as a data flow); the gate, imported from
    dsv4/unified_kv_gate.py (:12-15), returns `is_hip() and
    envs.SGLANG_HACK_FLASHMLA_BACKEND.get() == "unified_kv_triton"`, an EnvStr whose default
    is "auto" (environ.py:1051). So on a server with the default the site cannot run; set to
    unified_kv_triton it runs where `exact_num_tokens` is false (still `depends`)."""
    rel = "sglang/srt/layers/attention/deepseek_v4_backend_hip_radix.py"
    [site] = [s for s in census(release_target("0.5.23")).sites
              if s.file == rel and s.line == 2723]
    default = SpecConfig(attention_backend="dsv4", environ={})
    unified = SpecConfig(attention_backend="dsv4",
                         environ={"SGLANG_HACK_FLASHMLA_BACKEND": "unified_kv_triton"})
    assert {decide(site, default, m, "0.5.23", "hip").status for m in site.paths} == \
        {"unreachable"}
    d = decide(site, default, "target-verify", "0.5.23", "hip")
    assert "SGLANG_HACK_FLASHMLA_BACKEND unset, default auto" in d.reason and \
        "is_unified_kv_triton() (sglang/srt/layers/attention/dsv4/unified_kv_gate.py:15)" in \
        d.reason, d.reason
    assert {decide(site, unified, m, "0.5.23", "hip").status for m in site.paths} == \
        {"depends"}


def _copy_tree(tmp_path, version: str, rels: tuple[str, ...]) -> Target:
    src = release_target(version).root
    for rel in rels:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, tmp_path / rel)
    return Target(root=tmp_path, version=version, origin="path")


def test_an_arch_test_of_another_shape_decides_nothing(tmp_path):
    """The same 0.5.23 sources with `is_gfx95_supported` returning True off HIP too: not the
    shape read, so the copies stay `depends` even on gfx942."""
    t = _copy_tree(tmp_path, "0.5.23", (AITER, "sglang/srt/utils/common.py"))
    utils = t.root / "sglang/srt/utils/common.py"
    text = utils.read_text()
    head = text.index("def is_gfx95_supported():")
    end = text.index("def is_gfx942_supported():")
    utils.write_text(text[:head] + text[head:end].replace("return False", "return True")
                     + text[end:])
    assert "is_gfx95_supported" not in arch_tests(t)
    sites = _copies(census(t, use_cache=False), "0.5.23")
    assert _status(sites, "0.5.23", gpu_arch="gfx942", environ={}) == {"depends"}


def test_a_flag_set_again_after_start_is_not_read_through(tmp_path):
    """The same 0.5.23 aiter_backend.py with `self.use_fp8_prefill_attn` assigned a second
    time, in a method other than `__init__`: it may change after start, so the test at :2542
    stays data and the arch decides nothing."""
    t = _copy_tree(tmp_path, "0.5.23", (AITER, "sglang/srt/utils/common.py"))
    path = t.root / AITER
    text = path.read_text()
    anchor = "    def _build_prefill_ps_metadata(\n"  # after :998-999: their lines stay
    assert text.count(anchor) == 1
    path.write_text(text.replace(anchor, "    def _switch_fp8(self):\n"
                                         "        self.use_fp8_prefill_attn = False\n\n" + anchor))
    sites = _copies(census(t, use_cache=False), "0.5.23")
    assert _status(sites, "0.5.23", gpu_arch="gfx942", environ={}) == {"depends"}


def test_an_environment_switch_decides_a_site_with_a_configuration_only(monkeypatch):
    """0.5.23 aiter_backend.py:2591 tests `envs.SGLANG_AITER_PAGED_PREFILL_ASM.get()` (default
    True, environ.py:638) with `is_gfx95_supported()` and more before the `.item()`s at
    :246-248: set to 0 they cannot run; with no configuration under audit at all the
    environment is not the server's, so it decides nothing (the release's upper bound); nor
    does this process's environment where it lacks the variable (not taken as unset on the
    server, as the start-up verdicts read it), but it does where it sets it."""
    sites = [s for s in census(release_target("0.5.23")).sites
             if s.file == AITER and s.line in (246, 248)
             and any(g[0] == "env:SGLANG_AITER_PAGED_PREFILL_ASM" for g in s.guards)]
    assert sites
    off = SpecConfig(attention_backend="aiter",
                     environ={"SGLANG_AITER_PAGED_PREFILL_ASM": "0"})
    assert {decide(s, off, "target-extend", "0.5.23", "hip").status for s in sites} == \
        {"unreachable"}
    bare = SpecConfig()
    assert {decide(s, bare, "target-extend", "0.5.23", "hip").status for s in sites} == \
        {"depends"}
    here = SpecConfig(attention_backend="aiter")  # the environment: this process's
    monkeypatch.delenv("SGLANG_AITER_PAGED_PREFILL_ASM", raising=False)
    assert {decide(s, here, "target-extend", "0.5.23", "hip").status for s in sites} == \
        {"depends"}
    monkeypatch.setenv("SGLANG_AITER_PAGED_PREFILL_ASM", "false")
    assert {decide(s, here, "target-extend", "0.5.23", "hip").status for s in sites} == \
        {"unreachable"}


def test_a_flag_another_object_sets_is_not_read_through(tmp_path):
    """The same 0.5.23 aiter_backend.py with a module function that sets the flag on a backend
    it is handed (`backend.use_fp8_prefill_attn = False`, appended: no line moves): the flag
    may change after start, so the arch decides nothing."""
    t = _copy_tree(tmp_path, "0.5.23", (AITER, "sglang/srt/utils/common.py"))
    path = t.root / AITER
    path.write_text(path.read_text() + "\n\ndef _force_off(backend):\n"
                                       "    backend.use_fp8_prefill_attn = False\n")
    sites = _copies(census(t, use_cache=False), "0.5.23")
    assert _status(sites, "0.5.23", gpu_arch="gfx942", environ={}) == {"depends"}


@pytest.mark.parametrize("version, lines", [("0.5.22", (255, 257)), ("0.5.23", (246, 248))])
def test_a_flag_set_in_both_arms_of_an_if_is_read_through(version, lines):
    """`if self.use_sliding_window_kv_pool: self.use_triton_unified_attention = True` / `else:
    ... = get_bool_env_var("SGLANG_USE_AITER_UNIFIED_ATTN")` (0.5.23 aiter_backend.py:529-534,
    0.5.22 :538-543; the attribute's only stores) is `use_sliding_window_kv_pool or the
    switch`. The paged-ASM prefill view is built only `and not self.use_triton_unified_attention`
    (0.5.23 :2591-2603, 0.5.22 :2578-2590), and `_build_paged_kv_view` (0.5.23 :223, 0.5.22
    :232) copies to the device at 0.5.23 :246, :248 (0.5.22 :255, :257): with the switch set
    those copies cannot run, even on gfx950; unset, the pool and the page size still decide."""
    sites = [s for s in census(release_target(version)).sites
             if s.file == AITER and s.line in lines and s.verdict == "syncs"]
    assert {s.line for s in sites} == set(lines)
    on = SpecConfig(attention_backend="aiter", gpu_arch="gfx950",
                    environ={"SGLANG_USE_AITER_UNIFIED_ATTN": "1"})
    off = SpecConfig(attention_backend="aiter", gpu_arch="gfx950", environ={})
    assert {decide(s, on, "target-extend", version, "hip").status for s in sites} == \
        {"unreachable"}
    assert {decide(s, off, "target-extend", version, "hip").status for s in sites} == \
        {"depends"}
