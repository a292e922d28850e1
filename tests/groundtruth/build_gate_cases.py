"""Writes gate_cases.json: the draft-extend gate ground truth, per release 0.5.9-0.5.23 (HIP).

Independent of diag: stdlib only, never imports diag. The FACTS below were written by reading
each release's source (grep/sed of the unpacked wheels under ~/.cache/diag/releases/X); this
script only locates each fact's `file:line` by an exact text search and stops when a fact's
text is not in that release (so a fact that does not hold cannot be written down). The cases
follow from the facts by the RULES below, stated once. Run it by hand after changing a fact:

    python tests/groundtruth/build_gate_cases.py [CACHE_DIR]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

RELEASES = ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13",
            "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18",
            "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]
SPEC = "sglang/srt/speculative/"
V1, V2, DU = SPEC + "eagle_worker.py", SPEC + "eagle_worker_v2.py", SPEC + "draft_utils.py"
SPEC_INFO, ENVIRON = SPEC + "spec_info.py", "sglang/srt/environ.py"
KILL = "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"
SPEC_V2 = "SGLANG_ENABLE_SPEC_V2"

RULES = """\
worker: where spec_info.py imports both eagle_worker (v1) and eagle_worker_v2, v2 runs iff
  SGLANG_ENABLE_SPEC_V2 reads true (EnvBool with the release's default; '0' false, '1' true);
  else the one worker there is.
v1 worker: `if self.draft_extend_attn_backend and not _is_npu` -> graph on HIP, unless the
  draft-extend factory returns None for the backend (eager).
v2 worker: kill switch set (0.5.16+) -> eager; no HIP branch (0.5.9) -> eager; factory returns
  None -> eager; the backend's HIP draft-extend class on the HIP allow-list (tested on
  draft_extend_attn_backend) -> graph; aiter with steps >= 2 (AiterMultiStepDraftBackend is
  tested on draft_attn_backend, created only when speculative_num_steps > 1) -> graph; else eager.
alias: judged as the name the release rewrites it to.
"""


def _range(a: str, b: str) -> list[str]:
    return RELEASES[RELEASES.index(a):RELEASES.index(b) + 1]


# Factory names of create_draft_extend_backend, read from each release's draft_utils.py.
_BASE = ["flashinfer", "triton", "aiter", "fa3", "hybrid_linear_attn", "flashmla", "trtllm_mha",
         "trtllm_mla", "nsa", "ascend"]
NAMES: dict[str, list[str]] = {}
for _v in RELEASES:
    n = list(_BASE)
    if _v != "0.5.9":
        n.append("fa4")
    if _v in _range("0.5.12", "0.5.23"):
        n += ["dsv4"]
    if _v in _range("0.5.12", "0.5.22"):
        n += ["tokenspeed_mla"]
    if _v in _range("0.5.13", "0.5.23"):
        n += ["cutedsl_mla", "dsa"]
    if _v in _range("0.5.16", "0.5.23"):
        n += ["intel_amx"]
    if _v in _range("0.5.20", "0.5.23"):
        n += ["intel_xpu", "qsa"]  # qsa: the QSA-profile path of the factory (not in the map)
    NAMES[_v] = n

# name -> (text in draft_utils.py that builds its HIP draft-extend class, class) where the class
# matters to the HIP gate; any other name builds a class no HIP allow-list names.
def hip_extend(v: str, name: str) -> tuple[str | None, str | None]:
    if name == "flashmla" and v in _range("0.5.9", "0.5.15.post1"):
        return "flashmla prefill backend is not yet supported for draft extend.", None
    if name == "dsv4":
        if v in _range("0.5.12", "0.5.12.post1"):  # no is_hip() branch yet
            return "return DeepseekV4AttnBackend(self.draft_model_runner, skip_prefill=False)", \
                "DeepseekV4AttnBackend"
        return "DeepseekV4HipRadixBackend(", "DeepseekV4HipRadixBackend"  # under `elif is_hip()`
    if name in ("dsa", "nsa") and v in _range("0.5.13", "0.5.23"):
        return "DeepseekSparseAttnBackend(", "DeepseekSparseAttnBackend"
    if name == "nsa":
        return "return NativeSparseAttnBackend(self.draft_model_runner, skip_prefill=False)", \
            "NativeSparseAttnBackend"
    if name == "qsa":
        return "backend = QwenSparseAttnBackend(self.draft_model_runner)", "QwenSparseAttnBackend"
    return None, "other"


def hip_allowlist(v: str) -> tuple[str | None, list[str]]:
    """(text of the HIP gate assignment in eagle_worker_v2.py, draft-extend classes it admits)."""
    if v == "0.5.9":
        return None, []
    if v in _range("0.5.10", "0.5.17"):
        return "supports_hip_aiter_draft_extend_graph = isinstance(", []
    ext = ["DeepseekV4HipRadixBackend"]
    if v in _range("0.5.19", "0.5.23"):
        ext.append("DeepseekSparseAttnBackend")
    if v in _range("0.5.22", "0.5.23"):
        ext.append("QwenSparseAttnBackend")
    return "supports_hip_draft_extend_graph = (" if v != "0.5.18" else \
        "supports_hip_draft_extend_graph = isinstance(", ext


ALIASES = {v: {"compressed": ("dsv4", '== "compressed"')} for v in _range("0.5.12", "0.5.22")}
ALIASES["0.5.23"] = {"compressed": ("dsv4", 'aliases = {"compressed": "dsv4"'),
                     "tokenspeed_mla": ("cutedsl_mla", '"tokenspeed_mla": "cutedsl_mla"')}
ALIAS_FILES = ["sglang/srt/server_args.py", "sglang/srt/arg_groups/serving_hook.py"]


class Source:
    def __init__(self, root: Path) -> None:
        self.root = root

    def find(self, rel: str, text: str, after: str | None = None) -> str:
        """`rel:line` of the first line holding `text` (after the first line holding `after`)."""
        lines = (self.root / rel).read_text(encoding="utf-8", errors="replace").splitlines()
        start = 0
        if after is not None:
            start = next(i for i, ln in enumerate(lines) if after in ln)
        for i in range(start, len(lines)):
            if text in lines[i]:
                return f"{rel}:{i + 1}"
        raise SystemExit(f"{self.root}: {text!r} not in {rel}")

    def has(self, rel: str, text: str) -> bool:
        p = self.root / rel
        return p.is_file() and text in p.read_text(encoding="utf-8", errors="replace")


def facts(v: str, src: Source) -> dict:
    both = src.has(SPEC_INFO, "from sglang.srt.speculative.eagle_worker import EAGLEWorker")
    out: dict = {"workers": ["v1", "v2"] if both else ["v2"]}
    if both:
        m = re.search(r"SGLANG_ENABLE_SPEC_V2 = EnvBool\((True|False)\)",
                      (src.root / ENVIRON).read_text())
        out["spec_v2"] = {"env": SPEC_V2, "default": m.group(1) == "True",
                          "cite": src.find(ENVIRON, f"{SPEC_V2} = EnvBool("),
                          "switch": src.find(SPEC_INFO, "enable_overlap = not server_args."
                                                        "disable_overlap_schedule")}
        out["v1_gate"] = src.find(V1, "if self.draft_extend_attn_backend and not _is_npu:")
    gate_text, ext = hip_allowlist(v)
    if gate_text is None:
        out["v2_hip"] = {"policy": "never", "cite": src.find(V2, "if self.draft_extend_attn_backend"
                                                                 " and (")}
    else:
        # the real assignment (the first is `= False`), then each admitted class in it
        cite = src.find(V2, gate_text)
        line = int(cite.rsplit(":", 1)[1])
        cls_cites = {c: src.find(V2, f"isinstance(self.draft_extend_attn_backend, {c})",
                                 after=gate_text) for c in ext}
        for c, cc in cls_cites.items():
            if not 0 <= int(cc.rsplit(":", 1)[1]) - line <= 6:
                raise SystemExit(f"{v}: {c} is not in the gate at {cite} ({cc})")
        out["v2_hip"] = {"policy": "allowlist", "cite": cite, "extend": ext,
                         "extend_cites": cls_cites,
                         "decode": ["AiterMultiStepDraftBackend"],
                         "decode_cite": src.find(V2, "self.draft_attn_backend, Aiter"
                                                     "MultiStepDraftBackend", after=gate_text)
                         if v != "0.5.18" else src.find(V2, "self.draft_attn_backend, Aiter"
                                                             "MultiStepDraftBackend")}
    if src.has(V2, f"and not envs.{KILL}.get()"):
        out["kill_switch"] = {"env": KILL, "cite": src.find(V2, f"and not envs.{KILL}.get()")}
    steps = "if self.speculative_num_steps == 1:" if src.has(
        DU, "if self.speculative_num_steps == 1:") else "if self.speculative_num_steps <= 1:"
    out["decode_steps_cite"] = src.find(DU, steps, after="def create_decode_backend")
    out["aiter_decode_cite"] = src.find(DU, '"aiter": self._create_aiter_decode_backend')
    fac = src.find(DU, "def create_draft_extend_backend")
    names = {}
    for name in NAMES[v]:
        if name == "qsa":
            cite = src.find(DU, "return self._create_qwen_qsa_draft_extend_backend()")
        else:
            cite = src.find(DU, f'"{name}": ', after="def create_draft_extend_backend")
        text, cls = hip_extend(v, name)
        entry = {"cite": cite, "hip_extend_class": cls}
        if text is not None:
            method = {"dsv4": "dsv4", "dsa": "dsa", "nsa": "dsa" if cls ==
                      "DeepseekSparseAttnBackend" else "nsa", "flashmla": "flashmla",
                      "qsa": "qwen_qsa_draft_extend"}[name]
            kind = "" if name == "qsa" else "_prefill"
            entry["class_cite"] = src.find(DU, text, after=f"def _create_{method}{kind}_backend")
        names[name] = entry
    out["factory"] = {"cite": fac, "names": names}
    aliases = {}
    for old, (new, text) in ALIASES.get(v, {}).items():
        rel = next(r for r in ALIAS_FILES if src.has(r, text))
        aliases[old] = {"to": new, "cite": src.find(rel, text)}
    out["aliases"] = aliases
    return out


def envs(f: dict) -> list[dict[str, str]]:
    out: list[dict[str, str]] = [{}]
    if "spec_v2" in f:
        out += [{SPEC_V2: "0"}, {SPEC_V2: "1"}]
    if "kill_switch" in f:
        out += [{KILL: "1"}]
    return out


def expect(f: dict, name: str, steps: int, env: dict[str, str]) -> tuple[str, str, str]:
    """(mode, cite, why) by RULES."""
    names = f["factory"]["names"]
    target = f["aliases"][name]["to"] if name in f["aliases"] else name
    entry = names[target]
    worker = "v2"
    if "spec_v2" in f:
        val = env.get(SPEC_V2)
        on = f["spec_v2"]["default"] if val is None else val == "1"
        worker = "v2" if on else "v1"
    none = entry["hip_extend_class"] is None
    if worker == "v1":
        if none:
            return "eager", entry["class_cite"], "v1 worker; factory returns None"
        return "graph", f["v1_gate"], "v1 worker captures on every non-NPU device"
    if "kill_switch" in f and env.get(KILL) == "1":
        return "eager", f["kill_switch"]["cite"], "kill switch"
    hip = f["v2_hip"]
    if hip["policy"] == "never":
        return "eager", hip["cite"], "v2 worker has no HIP branch"
    if none:
        return "eager", entry["class_cite"], "factory returns None"
    if entry["hip_extend_class"] in hip["extend"]:
        return "graph", hip["extend_cites"][entry["hip_extend_class"]], "allow-listed class"
    if target == "aiter":
        if steps >= 2:
            return "graph", hip["decode_cite"], "aiter multi-step decode backend allow-listed"
        return "eager", f["decode_steps_cite"], "no decode backend at 1 step"
    return "eager", hip["cite"], "class not on the HIP allow-list"


def main() -> None:
    cache = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.home() / ".cache/diag/releases"
    doc: dict = {"about": __doc__.strip().splitlines()[0], "platform": "hip", "rules": RULES,
                 "releases": {}, "cases": []}
    for v in RELEASES:
        f = facts(v, Source(cache / v))
        doc["releases"][v] = f
        for name in [*f["factory"]["names"], *f["aliases"]]:
            for steps in (1, 3):
                for env in envs(f):
                    mode, cite, why = expect(f, name, steps, env)
                    doc["cases"].append({"release": v, "backend": name, "steps": steps,
                                         "env": env, "mode": mode, "cite": cite, "why": why})
    out = Path(__file__).with_name("gate_cases.json")
    cases = doc.pop("cases")
    head = json.dumps(doc, indent=1)[:-2]  # facts readable; one line per case
    body = ",\n".join("  " + json.dumps(c) for c in cases)
    out.write_text(f'{head},\n "cases": [\n{body}\n ]\n}}\n')
    doc["cases"] = cases
    assert json.loads(out.read_text()) == doc
    print(f"{len(doc['cases'])} cases, {len(RELEASES)} releases -> {out}")


if __name__ == "__main__":
    main()
