"""Stand-in SGLang namespace for importing the REAL profiler modules of a release in the dev venv.

`real_profiler_modules(target)` imports, from the release's own files, the real
`managers/scheduler_profiler_mixin.py` (<= 0.5.12.post1) or
`managers/scheduler_components/profiler_manager.py` (>= 0.5.13.post1) and the real
`utils/profile_utils.py`. Everything else they import from `sglang.*` is a STAND-IN defined here
(the real ones pull in all of SGLang's dependencies), reduced to what the profiler code touches:

- `sglang`, `sglang.srt`, `sglang.srt.managers`, `...scheduler_components`, `sglang.srt.utils`
  (also `is_npu`/`is_mps` -> False): empty packages whose `__path__` is the release's directory,
  so the real files are imported by the normal import system (and wrapt's post-import hooks);
- `environ.envs` (`SGLANG_PROFILE_V2`, `SGLANG_MEM_PROFILE_MAX_ENTRIES`), `io_struct`
  (`ProfileReq`, `ProfileReqOutput`, `ProfileReqType`), `forward_batch_info` (`ForwardMode`,
  `ForwardBatch`), `server_args.get_global_server_args`, `platforms.current_platform` (not out of
  tree), `runtime_context` (`get_device`, `get_parallel`: one rank), `profile_merger.ProfileMerger`,
  `torch_npu_patch_utils.apply_torch_npu_patches`, `parallel_state_wrapper.ParallelState`,
  (the real `utils/nvtx_utils.py` imports too, for `Scheduler.run_batch`'s span decorator),
  `step_span_utils` (three no-op functions), `dp_attention.get_dp_tp_group`.

torch is the real one; `torch.distributed.barrier` needs a process group (gloo, one rank).
`sys.modules` is restored on exit.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import inspect
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from diag.target import Target


class _Flag:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        return self.value


@dataclass
class ProfileReqOutput:  # stand-in
    success: bool
    message: str


class ProfileReqType(enum.Enum):  # stand-in
    START_PROFILE = 1
    STOP_PROFILE = 2


class ForwardMode(enum.Enum):  # stand-in
    EXTEND = 1
    DECODE = 2
    IDLE = 3

    def is_prefill(self) -> bool:
        return self is ForwardMode.EXTEND

    def is_decode(self) -> bool:
        return self is ForwardMode.DECODE

    def is_idle(self) -> bool:
        return self is ForwardMode.IDLE


_ONE_RANK = SimpleNamespace(tp_rank=0, dp_rank=0, dp_size=1, num_dp_ranks=1, pp_size=1,
                            pp_rank=0, moe_ep_size=1, moe_ep_rank=0, tp_size=1)


def _module(name: str, path: str | None = None, **attrs: Any) -> types.ModuleType:
    m = types.ModuleType(name, "stand-in (tests/profiler_standin.py)")
    if path is not None:
        m.__path__ = [path]
    m.__dict__.update(attrs)
    return m


def _standins(target: Target, v2: bool) -> dict[str, types.ModuleType]:
    pkg = str(target.package)
    srt = f"{pkg}/srt"
    packages = {
        "sglang": pkg, "sglang.srt": srt, "sglang.srt.managers": f"{srt}/managers",
        "sglang.srt.managers.scheduler_components": f"{srt}/managers/scheduler_components",
        "sglang.srt.model_executor": f"{srt}/model_executor", "sglang.srt.layers": f"{srt}/layers",
        "sglang.srt.distributed": f"{srt}/distributed",
    }
    out = {n: _module(n, p) for n, p in packages.items()}
    leaves = {
        "sglang.srt.utils": dict(is_npu=lambda: False, is_mps=lambda: False),
        "sglang.srt.environ": dict(envs=SimpleNamespace(
            SGLANG_PROFILE_V2=_Flag(v2), SGLANG_MEM_PROFILE_MAX_ENTRIES=_Flag(1000),
            SGLANG_ENABLE_NVTX_SCHEDULER=_Flag(False), SGLANG_ENABLE_NVTX_OPERATIONS=_Flag(False),
            SGLANG_TORCH_PROFILER_DIR=_Flag("/tmp"))),
        "sglang.srt.managers.io_struct": dict(ProfileReq=object, ProfileReqOutput=ProfileReqOutput,
                                              ProfileReqType=ProfileReqType),
        "sglang.srt.model_executor.forward_batch_info": dict(ForwardMode=ForwardMode,
                                                            ForwardBatch=object),
        "sglang.srt.server_args": dict(
            get_global_server_args=lambda: SimpleNamespace(base_gpu_id=0)),
        "sglang.srt.platforms": dict(current_platform=SimpleNamespace(
            is_out_of_tree=lambda: False)),
        "sglang.srt.runtime_context": dict(
            get_device=lambda: SimpleNamespace(gpu_id=0, base_gpu_id=0),
            get_parallel=lambda: _ONE_RANK),
        "sglang.srt.utils.profile_merger": dict(ProfileMerger=object),
        "sglang.srt.utils.torch_npu_patch_utils": dict(apply_torch_npu_patches=lambda *a: None),
        "sglang.srt.distributed.parallel_state_wrapper": dict(ParallelState=object),
        "sglang.srt.model_executor.step_span_utils": dict(
            build_detailed_annotation_suffix=lambda *a, **k: "",
            detailed_annotations_enabled=lambda: False,
            set_detailed_annotations_enabled=lambda enabled: None),
        "sglang.srt.layers.dp_attention": dict(
            get_dp_tp_group=lambda: SimpleNamespace(cpu_group=None)),
    }
    for name, attrs in leaves.items():
        path = f"{srt}/utils" if name == "sglang.srt.utils" else None
        out[name] = _module(name, path, **attrs)
    return out


@contextlib.contextmanager
def real_profiler_modules(target: Target, v2: bool = False) -> Iterator[dict[str, Any]]:
    """Install the stand-ins; yields {"names": the real module names to import}. Restores all."""
    saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}
    for k in saved:
        del sys.modules[k]
    sys.modules.update(_standins(target, v2))
    classic = ("sglang.srt.managers.scheduler_components.profiler_manager"
               if target.file("srt/managers/scheduler_components/profiler_manager.py").is_file()
               else "sglang.srt.managers.scheduler_profiler_mixin")
    try:
        yield {"classic": classic, "v2": "sglang.srt.utils.profile_utils"}
    finally:
        for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def ensure_process_group() -> None:
    """One-rank gloo group, so the real stop's `torch.distributed.barrier` returns."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def classic_owner_class(module: Any) -> Any:
    """A real `SchedulerProfilerManager` of the release (>= 0.5.13.post1), built from its
    dataclass fields for one rank, nothing started."""
    cls = module.SchedulerProfilerManager
    kw = {"dp_tp_cpu_group": None, "get_forward_ct": lambda: 0, "ps": _ONE_RANK}
    fields = {n for n, f in cls.__dataclass_fields__.items() if f.init}
    return cls(**{k: v for k, v in kw.items() if k in fields})


def classic_owner(module: Any, out_dir: str) -> tuple[Any, str]:
    """A real profiler owner of the release (manager, or a class using the mixin), initialised by
    its own init code for a CPU-only profile; returns (owner, name of its stop method)."""
    if hasattr(module, "SchedulerProfilerManager"):
        cls = module.SchedulerProfilerManager
        kw = {"dp_tp_cpu_group": None, "get_forward_ct": lambda: 0, "ps": _ONE_RANK}
        fields = {n for n, f in cls.__dataclass_fields__.items() if f.init}
        owner = cls(**{k: v for k, v in kw.items() if k in fields})
        init, start, stop = owner._init_profile, owner._start_profile, "_stop_profile"
    else:
        class SchedulerStandIn(module.SchedulerProfilerMixin):  # stand-in for the Scheduler
            tp_rank, gpu_id, dp_tp_cpu_group = 0, 0, None

        owner = SchedulerStandIn()
        owner.init_profiler()
        init, start, stop = owner.init_profile, owner.start_profile, "stop_profile"
    params = inspect.signature(init).parameters
    args = dict(output_dir=out_dir, start_step=None, num_steps=None, activities=["CPU"],
                with_stack=False, record_shapes=False, profile_by_stage=False, profile_id="t",
                merge_profiles=False, profile_prefix="")
    init(**{k: v for k, v in args.items() if k in params})
    res = start()
    assert res is None or getattr(res, "success", True), res
    return owner, stop


def v2_manager(module: Any, out_dir: str) -> Any:
    """The real V2 `ProfileManager` (no __init__: its signature changes per release) holding a
    real, started `_ProfilerBase.create(...)` CPU profiler, as `_do_start` leaves it."""
    pm = object.__new__(module.ProfileManager)
    pm.profiler_kwargs = {"output_dir": out_dir, "profile_id": "t"}
    want = inspect.signature(module._ProfilerConcreteBase.__init__).parameters
    kw = dict(output_dir=out_dir, output_prefix="", output_suffix="", profile_id="t",
              cpu_group=None, first_rank_in_node=True, tp_rank=0, ps=_ONE_RANK)
    pm.profiler = module._ProfilerBase.create(
        activities=["CPU"], with_stack=False, record_shapes=False,
        **{k: v for k, v in kw.items() if k in want})
    pm.profiler.start()
    return pm


def import_real(name: str) -> Any:
    return importlib.import_module(name)
