"""What engine is being looked at: its SGLang release, its platform and its configuration, taken
from the engine itself — a run directory (the command line `diag run` recorded, the release and
torch build each agent recorded) and/or a live server (`/server_info`) — where the command line
of diag did not give them. One resolution for `diag fix list|status`, `diag diagnose` and the TUI;
each fact says where it came from.

Platform: diag audits `hip` or `cuda` (which of SGLang's code paths runs). An engine on
`--device cpu` (or a CPU torch) is not on the HIP path (SGLang's `is_hip()` is False there):
it is audited as `cuda`, the non-HIP path, and says so. `--device cuda` is also what a ROCm
build runs, so it does not decide between the two: the torch build the agent recorded does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# SGLang's flag names (and the aliases its parsers accept) → server_args names.
ALIASES = {"model": "model_path", "tp": "tp_size", "tensor_parallel_size": "tp_size",
           "dp": "dp_size", "data_parallel_size": "dp_size",
           "decode_context_parallel_size": "dcp_size", "dcp": "dcp_size"}
NOT_HIP = "SGLang's non-HIP code path, audited as cuda"


@dataclass
class EngineFacts:
    """Facts about the engine and where each came from (words); None: not known there."""

    sglang: str | None = None  # a release root that exists here, else a version
    sglang_version: str | None = None
    sglang_from: str = ""
    platform: str | None = None  # hip | cuda
    platform_from: str = ""
    device: str | None = None
    gpu_arch: str | None = None  # the engine host's AMD GPU arch, as its agent read it
    triton: str | None = None  # the engine's Triton version, as its agent read it
    args: dict[str, Any] = field(default_factory=dict)  # server_args names
    config_from: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"sglang": self.sglang_version or self.sglang, "sglang_from": self.sglang_from or None,
                "platform": self.platform, "platform_from": self.platform_from or None,
                "device": self.device, "config_from": self.config_from or None}


def parse_cmd(argv: Any) -> dict[str, Any]:
    """The server arguments diag reads from an SGLang command line (`--attention-backend fa3`,
    `--tp=2`, flags), typed as `/server_info` gives them; plus `device`."""
    from diag.server import ARG_TYPES

    if not isinstance(argv, list) or not all(isinstance(w, str) for w in argv):
        return {}  # not a command line (a damaged run.json): never `--attention-backend ['x']`
    words = list(argv)
    out: dict[str, Any] = {}
    for i, w in enumerate(words):
        if not w.startswith("--"):
            continue
        name, eq, value = w[2:].partition("=")
        key = name.replace("-", "_")
        key = ALIASES.get(key, key)
        if key not in ARG_TYPES and key != "device":
            continue
        types = ARG_TYPES.get(key, (str,))
        if bool in types:
            out[key] = True
            continue
        if not eq:
            if i + 1 >= len(words) or words[i + 1].startswith("--"):
                continue
            value = words[i + 1]
        if int in types:
            try:
                out[key] = int(value)
            except ValueError:
                continue
        else:
            out[key] = value
    return out


def _sglang_root(run_dir: Path, pid: int) -> str | None:
    """Where the process imported SGLang from (its `sglang` event), read from the start of its
    events file; None when not found there."""
    from diag.engine import rundir

    fh = rundir.open_regular(run_dir / f"events-{pid}.jsonl")
    if fh is None:
        return None
    with fh:
        for raw in fh.read(1 << 16).splitlines():
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if isinstance(ev, dict) and ev.get("kind") == "sglang" and isinstance(ev.get("root"), str):
                return ev["root"]
    return None


def _platform_of(device: str | None, torch: Any, where: str,
                 device_where: str = "") -> tuple[str | None, str]:
    if device == "cpu":
        return "cuda", f"device cpu ({device_where or where}): {NOT_HIP}"
    if isinstance(torch, dict):
        if torch.get("hip"):
            return "hip", f"torch built for HIP {torch['hip']}, recorded by the agent ({where})"
        if torch.get("cuda"):
            return "cuda", f"torch built for CUDA {torch['cuda']}, recorded by the agent ({where})"
        return "cuda", f"a CPU torch, recorded by the agent ({where}): {NOT_HIP}"
    return None, ""


def from_run_dir(run_dir: str) -> EngineFacts:
    """The engine of a run directory: its command line (run.json `cmd`, else a process's argv
    that names server arguments), the release its processes imported, the torch build their
    agents recorded."""
    from diag.engine import rundir

    d = Path(run_dir)
    state = rundir.read_state(d)
    f = EngineFacts()
    meta = state.meta if isinstance(state.meta, dict) else {}
    args = parse_cmd(meta.get("cmd"))
    if args:
        f.config_from = f"the engine's command line in {d}/run.json"
    else:
        for p in state.processes.values():
            args = parse_cmd(p.argv)
            if args:
                f.config_from = f"the command line of pid {p.pid} (run dir {d})"
                break
    f.device = args.pop("device", None)
    f.args = args
    procs = sorted(state.processes.values(), key=lambda p: (not p.engine, not p.alive, p.pid))
    for p in procs:
        if p.sglang:
            root = _sglang_root(d, p.pid)
            f.sglang_version = p.sglang
            if root and (Path(root) / "sglang" / "srt").is_dir():
                f.sglang = root
                f.sglang_from = f"the engine's, pid {p.pid} imported it from {root} (run dir {d})"
            else:
                f.sglang = p.sglang
                f.sglang_from = f"the engine's, pid {p.pid} imported {p.sglang} (run dir {d})"
            break
    for p in procs:
        start = p.start or {}
        plat, why = _platform_of(f.device, start.get("torch"), f"pid {p.pid}, run dir {d}",
                                 "the engine's command line")
        if plat is None and start.get("platform") in ("hip", "cuda"):
            plat, why = start["platform"], f"the agent of pid {p.pid} judged fixes for it"
        if plat:
            f.platform, f.platform_from = plat, why
            break
    for p in procs:  # the host facts an agent read (the engine's first)
        start = p.start or {}
        arch, triton = start.get("gpu_arch"), start.get("triton")
        if isinstance(arch, str) or isinstance(triton, str):
            f.gpu_arch = arch if isinstance(arch, str) else None
            f.triton = triton if isinstance(triton, str) else None
            break
    if f.platform is None and f.device == "cpu":
        f.platform, f.platform_from = _platform_of("cpu", None, "the engine's command line")
    return f


def from_server_info(info: Any, url: str) -> EngineFacts:
    """A server's own: `/server_info` server arguments (their `device`), its `version`."""
    from diag.server import server_args

    f = EngineFacts()
    if not isinstance(info, dict):
        return f
    args = dict(server_args(info))
    f.device = args.get("device") if isinstance(args.get("device"), str) else None
    f.args = args
    f.config_from = f"{url}/server_info"
    v = info.get("version") if isinstance(info.get("version"), str) else args.get("version")
    if isinstance(v, str) and v:
        f.sglang = f.sglang_version = v
        f.sglang_from = f"{url}/server_info version"
    if f.device == "cpu":
        f.platform, f.platform_from = _platform_of("cpu", None, f"{url}/server_info")
    return f


@dataclass
class Resolution:
    sglang: str | None  # what to resolve as --sglang (None: the default resolution)
    platform: str | None
    sources: dict[str, str]  # release | platform | configuration → where from
    facts: list[EngineFacts]


def resolve(sglang: str | None, platform: str | None, config: Any, run_dir: str | None = None,
            server_info: Any = None, server_url: str | None = None) -> Resolution:
    """The options given win; then the server (what it resolved), then the run directory (what
    was typed). Fills `config` (a SpecConfig) in place where a field is not given."""
    from diag.context import SpecConfig

    srv = from_server_info(server_info, server_url or "") if server_info is not None else None
    run = from_run_dir(run_dir) if run_dir else None
    facts = [f for f in (srv, run) if f is not None]
    sources: dict[str, str] = {}
    if sglang is not None:
        sources["release"] = "--sglang"
    else:
        for f in facts:
            if f.sglang:
                sglang = f.sglang
                sources["release"] = f.sglang_from
                # the run dir's root of the same release beats a download of it
                if run and run.sglang and run.sglang_version == f.sglang_version \
                        and run.sglang != f.sglang:
                    sglang, sources["release"] = run.sglang, run.sglang_from
                break
    if platform is not None:
        sources["platform"] = "--platform"
    else:
        for f in facts:
            if f.platform:
                platform, sources["platform"] = f.platform, f.platform_from
                break
    if run is not None:  # the engine host's GPU arch and Triton (its agent's start record)
        if config.gpu_arch is None and run.gpu_arch:
            config.gpu_arch = run.gpu_arch
            sources["gpu arch"] = f"the engine's agent read {run.gpu_arch} (run dir {run_dir})"
        if config.triton_version is None and run.triton:
            config.triton_version = run.triton
            sources["triton"] = f"the engine's agent read {run.triton} (run dir {run_dir})"
    facts_fields = tuple(n for n in SpecConfig._FACTS if n != "environ")
    had = any(getattr(config, n) is not None for n in facts_fields)
    typed_model = config.model is not None
    took = []
    for f in facts:
        live = SpecConfig.from_server_args(f.args)
        got = False
        for name in facts_fields:
            if getattr(config, name) is None and getattr(live, name) is not None:
                setattr(config, name, getattr(live, name))
                got = True
        if live.disable_cuda_graph and not config.disable_cuda_graph:
            config.disable_cuda_graph = got = True
        if got:
            took.append(f)
    if config.model is not None and not typed_model:
        from diag.probes.startup.resolve import model_problem

        why = model_problem(config.model)
        if why:  # its path is here, but no model (a server elsewhere, a folder reused)
            sources["model"] = f"the engine's model {config.model} is not readable here " \
                               f"({why.split(': ', 1)[-1]}): audited without it (pass --model)"
            config.model = None
    if took:
        config.source = "+".join((["options"] if had else [])
                                 + ["server" if f is srv else "run dir" for f in took])
        sources["configuration"] = "; ".join(f.config_from for f in took)
    return Resolution(sglang, platform, sources, facts)


def describe(sources: dict[str, str]) -> list[str]:
    """`release from: ...` lines for a header (what the options gave is not repeated)."""
    return [f"{k}: {v}" for k, v in sources.items() if not v.startswith("--")]
