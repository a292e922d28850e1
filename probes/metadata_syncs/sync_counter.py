"""Counting implicit device->host syncs, on a GPU or simulated on CPU, one report either way.

Three entry points:

- `count_syncs(mode=...)`: a context manager yielding a `SyncReport` (events attributed to the
  first frame outside torch: function, file, line).
- `counted(fn)`: a method wrapper that counts every call (`wrapper.reports`).
- `builder_patch(builders)`: a `diag.patcher.Patch` that wraps builder methods inside an engine
  and emits `syncs` events (builder, phase, calls, count, seconds; folded in-process and
  emitted off the hot path: `telemetry.Folder`), the sync-debug scope on a sample of calls once
  a key's count is stable (`Sampler`; `DIAG_SYNC_SAMPLE=1` counts every call); with no sink
  installed the wrapper costs one list check. `runtime_patch(target)` is the metadata-syncs
  probe's runtime counter: that patch over the `BUILDERS` present in the running release.

GPU mode (CUDA or ROCm): `torch.cuda.set_sync_debug_mode("warn")` makes every synchronizing
call (`.item()`, D2H/blocking copies, `nonzero`, `repeat_interleave` without `output_size`, ...)
raise a UserWarning; we record them under a "always" filter with our own `showwarning`, which runs
while the caller's frame is on the stack (that is how each sync gets its file and line).
The sync debug mode and the warnings machinery are PROCESS-GLOBAL: one GPU counting scope at a
time (a module lock; the runtime counter skips counting rather than wait), warnings from other
threads during the scope are swallowed and counted apart (`other_threads`), and the previous mode
is restored on exit. Explicit `torch.cuda.synchronize()` is not reported by torch's debug mode.

CPU mode: every tensor is a CPU tensor, so the caller says which tensors stand for device tensors
(`device=[...]`) and which are host mirrors (`host=[...]`; `tags_by_name` tags `*_cpu` names as
host). Tags propagate: an op's outputs are device tensors when any tensor input is; a factory
called with an explicit `device=` (a `torch.device`, or any string but "cpu") makes a device
tensor; `pin_memory=True` or `device="cpu"` (the string) makes a host tensor. Untagged tensors
follow `unknown` ("host" by default). What is flagged, one sync each unless said:
host reads of a device tensor (`item`, `__bool__/__int__/__float__/__index__` via
`_local_scalar_dense`, `tolist`, `cpu`, `numpy`, `.to("cpu")`); a blocking host->device copy
(`.to(device)` of a host tensor without `non_blocking=True`, `torch.tensor(data, device=...)`;
torch's copy waits for the stream when not non-blocking); ops tagged `data_dependent_output`
or `dynamic_output_shape` on device inputs (`nonzero`, `masked_select`, `unique`, ...);
`repeat_interleave` with tensor repeats and no `output_size`: TWO (PyTorch reads `cumsum[-1]`
and checks `repeats >= 0`), as the GPU reports; `bincount`: TWO (`min()` and `max()`, one for
uint8); indexing (`index`, `index_put_`) with a bool or
uint8 mask on the device, except an assignment of one host element through one mask
(`x[mask] = 0`: PyTorch runs it as `masked_fill_`); integer-tensor indexing is not a sync.

Size (over ~600 lines, kept whole): the GPU and CPU modes share the `SyncReport`, the frame
attribution and the process-global lock, and the engine counter (`builder_patch`) wraps the same
counting; split, the parts would reach into each other's privates.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from diag import telemetry

_HERE = os.path.abspath(__file__)
_gpu_lock = threading.RLock()
# torch's sync warning; the one-off notice "Synchronization debug mode is a prototype feature"
# that set_sync_debug_mode emits on first use must not count as a sync.
_SYNC_MSG = "called a synchronizing CUDA operation"


@dataclass(frozen=True)
class SyncEvent:
    """One sync: what caused it and the first frame outside torch that called it."""

    op: str
    function: str
    file: str
    line: int

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "function": self.function, "file": self.file, "line": self.line}


@dataclass
class SyncReport:
    mode: str  # "gpu" | "cpu"
    events: list[SyncEvent] = field(default_factory=list)
    other_threads: int = 0  # GPU mode: syncs of other threads seen (and swallowed) meanwhile
    seconds: float = 0.0

    @property
    def count(self) -> int:
        return len(self.events)

    def by_site(self) -> Counter:
        """(function, file, line) -> number of syncs."""
        return Counter((e.function, e.file, e.line) for e in self.events)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "count": self.count, "seconds": self.seconds,
                "other_threads": self.other_threads,
                "events": [e.to_dict() for e in self.events]}


def _torch_dir() -> str:
    import torch

    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _caller(skip_dirs: tuple[str, ...]) -> tuple[str, str, int]:
    """The first frame that is neither torch, this module, nor the warnings/contextlib machinery."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if fn != _HERE and not fn.startswith(skip_dirs) and \
                os.path.basename(fn) not in ("warnings.py", "contextlib.py"):
            return f.f_code.co_name, f.f_code.co_filename, f.f_lineno
        f = f.f_back
    return "?", "?", 0


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """Cached: asked on every wrapped builder call, and it cannot change within a process."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


# ------------------------------------------------------------------------------------------ GPU


@contextlib.contextmanager
def _gpu_scope(report: SyncReport, blocking: bool = True) -> Iterator[bool]:
    """Count this thread's syncs via torch's sync debug mode. Yields False when not counting."""
    import torch

    if not _gpu_lock.acquire(blocking=blocking):
        yield False
        return
    owner = threading.get_ident()
    skip = (_torch_dir(),)
    try:
        prev_mode = torch.cuda.get_sync_debug_mode()
        with warnings.catch_warnings():
            previous_show = warnings.showwarning

            def show(message, category, filename, lineno, file=None, line=None):
                if _SYNC_MSG not in str(message):
                    return previous_show(message, category, filename, lineno, file, line)
                if threading.get_ident() != owner:
                    report.other_threads += 1
                    return None
                fn, path, ln = _caller(skip)
                report.events.append(SyncEvent("sync", fn, path, ln))
                return None

            warnings.filterwarnings("always", message=f".*{_SYNC_MSG}", category=UserWarning)
            warnings.showwarning = show
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield True
            finally:
                torch.cuda.set_sync_debug_mode(prev_mode)
    finally:
        _gpu_lock.release()


# ------------------------------------------------------------------------------------------ CPU


class DeviceTags:
    """Which CPU tensors stand for device tensors ("device") or host mirrors ("host")."""

    def __init__(self, device: Iterable = (), host: Iterable = (), unknown: str = "host") -> None:
        if unknown not in ("host", "device"):
            raise ValueError("unknown must be 'host' or 'device'")
        self.unknown = unknown
        self._tags: dict[int, tuple[weakref.ref, str]] = {}
        for t in device:
            self.tag(t, "device")
        for t in host:
            self.tag(t, "host")

    def tag(self, t: Any, where: str) -> None:
        import torch

        if isinstance(t, torch.Tensor):
            key = id(t)
            self._tags[key] = (weakref.ref(t, lambda _r, k=key: self._tags.pop(k, None)), where)

    def explicit(self, t: Any) -> str | None:
        entry = self._tags.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def on_device(self, t: Any) -> bool:
        return (self.explicit(t) or self.unknown) == "device"


def tags_by_name(values: dict[str, Any], unknown: str = "host") -> DeviceTags:
    """Tag named inputs: names ending in `_cpu` (SGLang's host mirrors) are host, others device."""
    import torch

    dev = [v for k, v in values.items() if isinstance(v, torch.Tensor) and not k.endswith("_cpu")]
    host = [v for k, v in values.items() if isinstance(v, torch.Tensor) and k.endswith("_cpu")]
    return DeviceTags(dev, host, unknown)


_HOST_READS = {"tolist", "numpy", "cpu"}
_MASK_INDEX = {"index.Tensor", "index_put_.default", "index_put.default", "_index_put_impl_.default"}


def _masked_fill_path(name: str, args: tuple, kwargs: dict, tags: DeviceTags) -> bool:
    """`x[mask] = scalar` on a device: PyTorch's `_index_put_impl_` turns an index_put with one
    bool mask, one host value element and no accumulate into `masked_fill_` (no nonzero, no
    sync; Python's setitem makes a scalar a host tensor for exactly that)."""
    if not name.startswith(("index_put", "_index_put_impl_")) or len(args) < 3:
        return False
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    masks = [t for t in args[1] if t is not None]
    value = args[2]
    return (not accumulate and len(masks) == 1 and value.numel() == 1
            and not tags.on_device(value) and tags.on_device(masks[0]) == tags.on_device(args[0]))


def _cpu_modes(report: SyncReport, tags: DeviceTags):
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    skip = (_torch_dir(),)

    def hit(op: str, n: int = 1) -> None:
        fn, path, ln = _caller(skip)
        report.events.extend(SyncEvent(op, fn, path, ln) for _ in range(n))

    def tensors(obj: Any) -> list:
        return [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]

    def dev_like(d: Any) -> bool:
        if isinstance(d, torch.device):
            return True
        return isinstance(d, str) and d != "cpu"

    class Dispatch(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # This mode never runs under torch.compile; torch's default wraps the handler in
            # dynamo.disable, which imports torch._dynamo (over a second) on the first op.
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = f"{func._opname}.{func._overloadname}"
            ins = tensors((args, kwargs))
            on_dev = any(tags.on_device(t) for t in ins)
            if name == "repeat_interleave.Tensor":
                if kwargs.get("output_size") is None and tags.on_device(args[0]):
                    hit("repeat_interleave without output_size", 2)
            elif name in _MASK_INDEX:
                idx = [t for t in tensors(args[1]) if t.dtype in (torch.bool, torch.uint8)]
                if idx and (on_dev or any(tags.on_device(t) for t in idx)) \
                        and not _masked_fill_path(name, args, kwargs, tags):
                    hit(f"{func._opname} with a bool mask")
            elif name == "bincount.default" and on_dev:
                # CUDA/HIP bincount reads min() (skipped for uint8) and max() back before it
                # launches, minlength or not; nothing for an empty input (SummaryOps.cu
                # `_bincount_cuda_template`), as the GPU reports
                if args[0].numel():
                    hit("bincount", 1 if args[0].dtype == torch.uint8 else 2)
            elif on_dev and (torch.Tag.data_dependent_output in func.tags
                             or torch.Tag.dynamic_output_shape in func.tags):
                hit(func._opname)
            out = func(*args, **kwargs)
            if ins:
                where = "device" if on_dev else (
                    "host" if all(tags.explicit(t) == "host" for t in ins) else None)
                if where:
                    for t in tensors(out):
                        if not any(t is i for i in ins) or tags.explicit(t) is None:
                            tags.tag(t, where)
            return out

    class Function(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            src = args[0] if args and isinstance(args[0], torch.Tensor) else None
            if src is not None and name in _HOST_READS and tags.on_device(src):
                hit(f"Tensor.{name}")
                out = func(*args, **kwargs)
                if name == "cpu" and isinstance(out, torch.Tensor):
                    out = out.clone() if out is src else out
                    tags.tag(out, "host")
                return out
            if src is not None and name in ("to", "cuda"):
                dest = kwargs.get("device", args[1] if len(args) > 1 else None)
                if name == "cuda":
                    dest = torch.device("cpu")  # stands for the device here
                if isinstance(dest, torch.Tensor):
                    dest = dest.device
                if isinstance(dest, (str, torch.device)):
                    out = func(*args, **kwargs)
                    to_dev = dev_like(dest)
                    if to_dev != tags.on_device(src):
                        if to_dev and not kwargs.get("non_blocking", False):
                            hit("blocking host->device copy")
                        elif not to_dev:
                            hit("device->host copy")
                        if out is src:
                            out = src.clone()
                    tags.tag(out, "device" if to_dev else "host")
                    return out
            if src is not None and name == "new_tensor":
                # `t.new_tensor(data)`: `data` onto t's device (or `device=`), the blocking copy
                # of torch.tensor(data, device=d) where the data is not already a device tensor
                dest = kwargs.get("device")
                to_dev = dev_like(dest) if dest is not None else tags.on_device(src)
                data = args[1] if len(args) > 1 else kwargs.get("data")
                if to_dev and not (isinstance(data, torch.Tensor) and tags.on_device(data)):
                    hit("Tensor.new_tensor from host data (blocking copy)")
                out = func(*args, **kwargs)
                tags.tag(out, "device" if to_dev else "host")
                return out
            if name in ("tensor", "as_tensor") and dev_like(kwargs.get("device")):
                hit(f"torch.{name} from host data (blocking copy)")
            out = func(*args, **kwargs)
            if isinstance(out, torch.Tensor) and not tensors((args, kwargs)):
                if kwargs.get("pin_memory") or kwargs.get("device") == "cpu":
                    tags.tag(out, "host")
                elif dev_like(kwargs.get("device")):
                    tags.tag(out, "device")
            return out

    return Function(), Dispatch()


# ------------------------------------------------------------------------------------- public


@contextlib.contextmanager
def count_syncs(mode: str = "auto", tags: DeviceTags | None = None) -> Iterator[SyncReport]:
    """Count syncs in the block. mode: "gpu", "cpu", or "auto" (gpu when one is available).

    In CPU mode `tags` says which tensors stand for device tensors (default: none are, so
    nothing is flagged unless tagged; pass `DeviceTags(unknown="device")` to treat all as device).
    """
    if mode == "auto":
        mode = "gpu" if gpu_available() else "cpu"
    if mode not in ("gpu", "cpu"):
        raise ValueError(f"mode must be gpu, cpu or auto, not {mode!r}")
    report = SyncReport(mode)
    t0 = time.perf_counter()
    try:
        if mode == "gpu":
            if not gpu_available():
                raise RuntimeError("GPU sync counting needs a CUDA/ROCm torch with a device")
            with _gpu_scope(report):
                yield report
        else:
            fmode, dmode = _cpu_modes(report, tags or DeviceTags())
            with fmode, dmode:
                yield report
    finally:
        report.seconds = time.perf_counter() - t0


def counted(fn: Callable, mode: str = "auto",
            tags: Callable[..., DeviceTags] | None = None) -> Callable:
    """Wrap `fn`: each call is counted, its report appended to `wrapper.reports`.

    `tags(*args, **kwargs)` builds the CPU-mode tags for a call (e.g. from the argument names).
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with count_syncs(mode, tags(*args, **kwargs) if tags else None) as rep:
            out = fn(*args, **kwargs)
        wrapper.reports.append(rep)
        return out

    wrapper.reports = []  # type: ignore[attr-defined]
    return wrapper


_FOLD: Any = None  # the `syncs` events' fold (builder, phase, syncs per call, sites) -> sums

# SGLang's ForwardMode names -> the phases of a speculative step (the census's names). DECODE is
# the draft model's decode under EAGLE (the target verifies, it never decodes).
PHASE_OF_MODE = {"EXTEND": "target-extend", "TARGET_VERIFY": "target-verify",
                 "DRAFT_EXTEND": "draft-extend", "DRAFT_EXTEND_V2": "draft-extend",
                 "DECODE": "draft-decode", "IDLE": "idle"}


def _mode_name(a: Any) -> str | None:
    mode = getattr(a, "forward_mode", None)
    if mode is None and hasattr(a, "is_target_verify"):
        mode = a
    name = getattr(mode, "name", None)
    return name if isinstance(name, str) else None


def call_phase(args: tuple, kwargs: dict) -> str | None:
    """The phase of a metadata-builder call, from its ForwardBatch's (or a ForwardMode
    argument's) mode; None when the call carries neither."""
    for a in (*args, *kwargs.values()):
        name = _mode_name(a)
        if name is not None:
            return PHASE_OF_MODE.get(name, name.lower())
    return None


def _call_batch(args: tuple, kwargs: dict) -> int | None:
    for a in (*args, *kwargs.values()):
        v = getattr(a, "batch_size", None)
        if isinstance(v, int):
            return v
    return None


def call_key(args: tuple, kwargs: dict) -> tuple[str | None, int | None]:
    """(phase, batch size) of a builder call: `call_phase` and `_call_batch` in one look, fast
    on the common shape (`self, forward_batch`: the batch's own attributes, read from its
    `__dict__`, no attribute miss raised on `self`); any other shape takes the general scan."""
    if len(args) == 2 and not kwargs:
        d = getattr(args[1], "__dict__", None)
        if d is not None:
            mode, bs = d.get("forward_mode"), d.get("batch_size")
            name = getattr(mode, "name", None)
            if isinstance(name, str) and (bs is None or isinstance(bs, int)):
                return PHASE_OF_MODE.get(name, name.lower()), bs
    return call_phase(args, kwargs), _call_batch(args, kwargs)


def _fast_shape(mode: Any, bs: Any) -> bool:
    """Whether `call_key` reads a (self, forward_batch) call from the batch's own mode and size
    (its fast case): only then does the mode object stand for the key's phase."""
    return isinstance(getattr(mode, "name", None), str) and (bs is None or isinstance(bs, int))


ENV_SAMPLE = "DIAG_SYNC_SAMPLE"  # "1": count every call (exact); N: once stable, one call in N
# one in 256: a counted call costs a real builder ~450 us more than a sampled one (H200, 0.5.23,
# triton: 718-763 us against 281-306 us per call in tests/gpu_lane/overhead-h200-bs16-run3's
# events); at 1 in 64 that was ~0.3 % of a batch-16 step, at 1 in 256 under 0.1 %
SAMPLE_EVERY = 256
STABLE_RUN = 5

# the sampled calls of each stable key, held in place (`telemetry.Tally`: no allocation, no lock,
# no dict built per call) and emitted by the agent's periodic work as `syncs` events, `sampled`,
# with count = calls x the stable count per call
SAMPLED = telemetry.Tally("syncs", "calls", scale=("count", "per_call"))


class KeyState:
    """A (builder, phase, batch size) key's sampling state: the last count and how many times in
    a row it was seen, calls since the last counted one, its sites, and once stable the slot its
    sampled calls are tallied in."""

    __slots__ = ("count", "run", "since", "sites", "slot")

    def __init__(self, count: int, sites: list[str]) -> None:
        self.count, self.run, self.since, self.sites = count, 1, 0, sites
        self.slot: telemetry.Slot | None = None


class Sampler:
    """Which builder calls get the GPU sync-debug scope (it costs the warnings machinery and a
    frame walk per sync, on the scheduler's thread). Per (builder, phase, batch size): every
    call until the count is stable (the same count `stable` times in a row), then one call in
    `every`; a counted call that differs from the stable count starts the key over. The calls
    in between take the stable count and are emitted as `sampled` (scaled, and labelled so on
    every surface). `every` <= 1: every call is counted (exact)."""

    def __init__(self, every: int = SAMPLE_EVERY, stable: int = STABLE_RUN,
                 tally: telemetry.Tally | None = None) -> None:
        self.every, self.stable = every, stable
        self.tally = tally if tally is not None else SAMPLED
        self.keys: dict[Any, KeyState] = {}
        # the stable keys again, by the batch's own ForwardMode object, batch size and builder:
        # the wrapper finds a stable call's state with three dict reads, no key built and no
        # enum `.name` read (a Python-level descriptor: `call_key` cost ~0.5 us of the ~0.9 us
        # a sampled call cost on this 2-core host)
        self.fast: dict[Any, dict[Any, dict[str, KeyState]]] = {}

    def should_count(self, key: Any) -> bool:
        st = self.keys.get(key)
        if st is None or st.slot is None:
            return True
        st.since += 1
        if st.since >= self.every:
            st.since = 0
            return True
        return False

    def counted(self, key: Any, n: int, sites: list[str]) -> None:
        st = self.keys.get(key)
        if st is not None and st.count == n:
            st.run += 1
        else:  # a first count, or a change: count every call again until stable
            if st is not None:
                st.slot = None  # its entry in `fast` no longer samples: calls take the slow path
            st = self.keys[key] = KeyState(n, sites)
        if st.slot is None and st.run >= self.stable and self.every > 1:
            builder, phase = (key[0], key[1]) if isinstance(key, tuple) and len(key) > 1 \
                else (str(key), None)
            st.slot = self.tally.slot((builder, phase, n, tuple(sites)), builder=builder,
                                      phase=phase, per_call=n, sites=sites, sampled=True)

    def stable_count(self, key: Any) -> tuple[int, list[str]]:
        st = self.keys[key]
        return st.count, st.sites


def sample_every(env: Any = None) -> int:
    """DIAG_SYNC_SAMPLE: 1 counts every call; N > 1 one in N once stable (default 256)."""
    raw = (os.environ if env is None else env).get(ENV_SAMPLE, "")
    try:
        return max(1, int(raw)) if raw.strip() else SAMPLE_EVERY
    except ValueError:
        return SAMPLE_EVERY


_SAMPLER: Sampler | None = None


def _telemetry_wrapper(fn: Callable, builder: str) -> Callable:
    global _FOLD, _SAMPLER
    if _FOLD is None:
        _FOLD = telemetry.Folder("syncs", "calls")
    if _SAMPLER is None:
        _SAMPLER = Sampler(sample_every())

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not telemetry._sinks or not gpu_available():
            return fn(*args, **kwargs)  # the cheap path: no sink, or nothing to count
        sampler = _SAMPLER
        st = mode = bs = None
        d = getattr(args[1], "__dict__", None) if len(args) == 2 and not kwargs else None
        if d is not None:  # the common shape (self, forward_batch): a stable key's state, fast
            mode, bs = d.get("forward_mode"), d.get("batch_size")
            try:
                st = sampler.fast[mode][bs][builder]
            except (KeyError, TypeError):  # not stable yet (or an unhashable mode)
                st = None
        if st is None:
            key = (builder, *call_key(args, kwargs))
            st = sampler.keys.get(key)
        else:
            key = None  # built only if this call is counted
        if st is not None and st.slot is not None:  # stable: one in `every` calls is counted
            st.since += 1
            if st.since < sampler.every:  # tallied in place with the stable count
                t0 = perf_counter()
                out = fn(*args, **kwargs)
                slot = st.slot
                slot.n += 1
                slot.s += perf_counter() - t0
                return out
            st.since = 0
        if key is None:
            key = (builder, *call_key(args, kwargs))
        t0 = perf_counter()
        report = SyncReport("gpu")
        with _gpu_scope(report, blocking=False) as counting:
            out = fn(*args, **kwargs)
        if counting:
            n = report.count
            sites = [f"{os.path.basename(e.file)}:{e.line}" for e in report.events]
            sampler.counted(key, n, sites)
            st = sampler.keys[key]
            if d is not None and st.slot is not None and _fast_shape(mode, bs):
                with contextlib.suppress(TypeError):  # stable now: found fast from here on
                    sampler.fast.setdefault(mode, {}).setdefault(bs, {})[builder] = st
            _FOLD.add({"builder": builder, "phase": key[1], "per_call": n, "sites": sites},
                      seconds=perf_counter() - t0, count=n)
        return out

    wrapper.__diag_builder__ = builder  # type: ignore[attr-defined]
    return wrapper


def rewrap(counter: Callable, inner: Callable) -> Callable:
    """The same counting wrapper around another function (a fix that rewrites a counted one)."""
    return _telemetry_wrapper(inner, counter.__diag_builder__)  # type: ignore[attr-defined]


def builder_patch(builders: Iterable[tuple[str, str]] | dict[str, Iterable[str]]):
    """A Patch wrapping each (module, qualname) builder to count its syncs per call on the device.

    Emits telemetry "syncs" (builder, phase, calls, count, seconds, sites; folded) when a sink is installed and a GPU is
    present; otherwise the wrapper calls straight through. Another thread already counting makes
    the call go uncounted rather than wait.
    """
    from diag.patcher import Patch

    pairs = [(m, q) for m, qs in builders.items() for q in qs] if isinstance(builders, dict) \
        else list(builders)
    patch = Patch("sync-counter")
    for module, qualname in pairs:
        patch.add(module, qualname,
                  functools.partial(_telemetry_wrapper, builder=f"{module}.{qualname}"))
    return patch


# The metadata builders the runtime counter wraps; only those present in the running release's
# source are wrapped (checked by AST, so a missing one is not an error). Their definitions in
# sglang 0.5.23, srt/layers/attention/: deepseek_v4_backend_hip_radix.py:2700,
# dsa_backend.py:1095, qwen_sparse_attn_backend.py:596, minimax_sparse_backend.py:1102,
# deepseek_v4_backend.py:1818, each with a `repeat_interleave` of tensor repeats.
BUILDERS: tuple[tuple[str, str], ...] = (
    ("sglang.srt.layers.attention.deepseek_v4_backend_hip_radix",
     "DeepseekV4HipRadixBackend._attach_unified_kv_prefill_meta"),
    ("sglang.srt.layers.attention.dsa_backend", "DeepseekSparseAttnBackend.init_forward_metadata"),
    ("sglang.srt.layers.attention.qwen_sparse_attn_backend",
     "QwenSparseAttnBackend._metadata_from_forward_batch"),
    ("sglang.srt.layers.attention.minimax_sparse_backend",
     "MiniMaxSparseAttnBackend._build_prefill_meta"),
    ("sglang.srt.layers.attention.deepseek_v4_backend",
     "DeepseekV4AttnBackend._build_late_layer_tail_metadata"),
    # the triton backend (the GPU engine lane's): eager metadata, and the host part of each
    # replayed step (`*_out_graph`, from 0.5.2x; absent before, so not wrapped there)
    ("sglang.srt.layers.attention.triton_backend", "TritonAttnBackend.init_forward_metadata"),
    ("sglang.srt.layers.attention.triton_backend",
     "TritonAttnBackend.init_forward_metadata_out_graph"),
    ("sglang.srt.layers.attention.triton_backend",
     "TritonMultiStepDraftBackend.init_forward_metadata"),
    ("sglang.srt.layers.attention.triton_backend",
     "TritonMultiStepDraftBackend.init_forward_metadata_out_graph"),
    # fa3 (Hopper's EAGLE default; the allow-list lane's and the field kit's backend on CUDA):
    # the same four entry points. Their census sites include host reads on replayed steps, e.g.
    # 0.5.22 flashattention_backend.py:2866-2867 (`_host_max_seq_len`: `.cpu()` without the CPU
    # mirror, `.item()`), reached from init_forward_metadata_out_graph via
    # _init_full_cg_decode_metadata (:545)
    ("sglang.srt.layers.attention.flashattention_backend",
     "FlashAttentionBackend.init_forward_metadata"),
    ("sglang.srt.layers.attention.flashattention_backend",
     "FlashAttentionBackend.init_forward_metadata_out_graph"),
    ("sglang.srt.layers.attention.flashattention_backend",
     "FlashAttentionMultiStepBackend.init_forward_metadata"),
    ("sglang.srt.layers.attention.flashattention_backend",
     "FlashAttentionMultiStepBackend.init_forward_metadata_out_graph"),
)


def builders_in(target: Any) -> list[tuple[str, str]]:
    """The `BUILDERS` defined in the target's source (by AST; nothing imported)."""
    from diag.patcher import PatchError, find_def
    from diag.probes.source import parse_text

    out = []
    for module, qualname in BUILDERS:
        rel = module.split(".", 1)[1].replace(".", "/") + ".py"
        src = target.source(rel)
        if not src:
            continue
        with contextlib.suppress(PatchError, SyntaxError):
            find_def(parse_text(src), qualname)
            out.append((module, qualname))
    return out


def runtime_patch(target: Any):
    """The metadata-syncs probe's runtime counter: `builder_patch` over the builders of the
    running release (`target`, a `diag.target.Target`); None when it has none (or no target)."""
    found = builders_in(target) if target is not None else []
    return builder_patch(found) if found else None
