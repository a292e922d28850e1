"""`diag bench draft-extend-allowlist`: a draft-extend-shaped step, eager vs CUDA/HIP graph replay.

What the fix changes in the engine: without it the draft-extend forward launches every kernel
from the host (eager); with it one graph replay launches them all. This bench times exactly that
difference on the local GPU with real torch work.

Default shape (`preset=mtp`), close to a one-layer MTP draft model (DeepSeek-style MTP head, a
Llama-like decoder layer): batch 8 requests x 4 draft tokens (speculative_num_steps 3 + 1),
hidden 4096, 32 heads, MLP 11008, a 1024-token KV context per request, vocab 32000, bf16. One
step = embed + enorm/hnorm + eh_proj, `layers` decoder layers (RMSNorm, QKV, the new K/V
stored after `context` cached tokens, SDPA over the cache, O-proj, residual, RMSNorm, gate/up,
SiLU*up, down, residual), final norm, lm_head.

`preset=design`: the reference 72-kernel step: 12 layers x 6 small kernels (matmul, bias add,
SiLU, scale, residual add, tanh), hidden 1024, batch 8, bf16. On an H200 (torch 2.11): eager
1107 us, graph replay 179 us (6.2x).

Parameters (`--param k=v`): preset, layers, hidden, heads, mlp, batch, tokens (per request),
context, vocab, dtype (bf16|fp16|fp32), repeats (samples), inner (steps per sample).
Each sample runs `inner` steps back to back and synchronizes once; the time per step is the
sample's wall time / inner (what a stream of draft-extend passes costs). Without a GPU the
bench is `skipped`: a graph needs a device, and no number is made up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from diag.bench import BenchResult, Param, Row, Stats
from diag.errors import DiagError

FIX_ID = "draft-extend-allowlist"
TITLE = "draft-extend step: eager vs graph replay"

PRESETS: dict[str, dict[str, Any]] = {
    "mtp": {"layers": 1, "hidden": 4096, "heads": 32, "mlp": 11008, "batch": 8, "tokens": 4,
            "context": 1024, "vocab": 32000, "dtype": "bf16"},
    "design": {"layers": 12, "hidden": 1024, "batch": 8, "tokens": 1, "dtype": "bf16"},
}
KERNELS_PER_DESIGN_LAYER = 6
_INT_KEYS = ("layers", "hidden", "heads", "mlp", "batch", "tokens", "context", "vocab",
             "repeats", "inner")
# Each one's bound (docs/bench.md): past it the step does not fit a GPU or the run a day.
_INT_MAX = {"layers": 256, "hidden": 32768, "heads": 512, "mlp": 131072, "batch": 4096,
            "tokens": 64, "context": 1_048_576, "vocab": 1_048_576, "repeats": 100_000,
            "inner": 10_000}

# The --param keys this bench takes (diag bench checks them before any work).
PARAMS = {"preset": Param(str, choices=tuple(PRESETS), doc="the step's shape"),
          "dtype": Param(str, choices=("bf16", "fp16", "fp32")),
          **{k: Param(int, 1, maximum=_INT_MAX[k]) for k in _INT_KEYS}}


def resolve_params(params: dict[str, Any]) -> dict[str, Any]:
    """Preset defaults overlaid with the given params; one-line DiagError on bad values."""
    preset = str(params.get("preset") or "mtp")
    if preset not in PRESETS:
        raise DiagError(f"--param preset={preset!r}: expected one of {', '.join(PRESETS)}",
                        exit_code=2)
    quick = bool(params.get("quick"))
    p: dict[str, Any] = {"preset": preset, **PRESETS[preset],
                         "repeats": 10 if quick else 50, "inner": 5 if quick else 20}
    for k, v in params.items():
        if k in ("quick", "sglang", "preset") or v is None:
            continue
        if k in _INT_KEYS:
            try:
                v = int(v)
            except (TypeError, ValueError):
                raise DiagError(f"--param {k}={v!r}: expected an integer", exit_code=2) from None
            if v < 1:
                raise DiagError(f"--param {k}={v}: must be >= 1", exit_code=2)
        elif k == "dtype":
            if v not in ("bf16", "fp16", "fp32"):
                raise DiagError(f"--param dtype={v!r}: expected bf16, fp16 or fp32", exit_code=2)
        else:
            raise DiagError(f"--param {k}: unknown (known: preset, dtype, {', '.join(_INT_KEYS)})",
                            exit_code=2)
        p[k] = v
    if preset == "mtp" and p["hidden"] % p["heads"]:
        raise DiagError(f"--param hidden={p['hidden']} is not a multiple of heads={p['heads']}",
                        exit_code=2)
    return p


def build_step(p: dict[str, Any], device: str) -> tuple[Callable[[], Any], Any]:
    """(step, output buffer holder): the step reads fixed input tensors and returns its output."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[p["dtype"]]
    g = torch.Generator(device="cpu").manual_seed(0)

    def w(*shape: int, scale: float = 0.02) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dtype)

    n_tok = p["batch"] * p["tokens"]
    h = p["hidden"]
    if p["preset"] == "design":
        layers = [(w(h, h), w(h)) for _ in range(p["layers"])]
        x0 = w(n_tok, h, scale=1.0)

        def step() -> torch.Tensor:
            x = x0
            for weight, bias in layers:  # 6 kernels per layer
                y = torch.mm(x, weight)
                y = y + bias
                y = torch.nn.functional.silu(y)
                y = y * 0.5
                x = x + y
                x = torch.tanh(x)
            return x

        return step, x0

    heads, mlp, ctx, vocab = p["heads"], p["mlp"], p["context"], p["vocab"]
    hd = h // heads
    eps = 1e-6
    ids = torch.randint(0, vocab, (n_tok,), generator=g).to(device)
    prev_hidden = w(n_tok, h, scale=1.0)
    embed, lm_head = w(vocab, h), w(vocab, h)
    enorm, hnorm, fnorm = (torch.ones(h, device=device, dtype=dtype) for _ in range(3))
    eh_proj = w(h, 2 * h)
    T = p["tokens"]
    kv = [(w(p["batch"], heads, ctx + T, hd, scale=1.0), w(p["batch"], heads, ctx + T, hd,
                                                              scale=1.0))
          for _ in range(p["layers"])]
    layers = [{"n1": torch.ones(h, device=device, dtype=dtype), "qkv": w(3 * h, h),
               "o": w(h, h), "n2": torch.ones(h, device=device, dtype=dtype),
               "gu": w(2 * mlp, h), "down": w(h, mlp)} for _ in range(p["layers"])]
    F = torch.nn.functional

    def rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (h,), weight, eps)

    def step() -> torch.Tensor:
        e = F.embedding(ids, embed)
        x = F.linear(torch.cat([rms(e, enorm), rms(prev_hidden, hnorm)], dim=-1), eh_proj)
        for layer, (k, v) in zip(layers, kv):
            r = x
            q, kk, vv = F.linear(rms(x, layer["n1"]), layer["qkv"]).split(h, dim=-1)
            q = q.view(p["batch"], T, heads, hd).transpose(1, 2)
            # store the new tokens' K/V in the cache slots after the context, then attend to all
            k[:, :, ctx:].copy_(kk.view(p["batch"], T, heads, hd).transpose(1, 2))
            v[:, :, ctx:].copy_(vv.view(p["batch"], T, heads, hd).transpose(1, 2))
            a = F.scaled_dot_product_attention(q, k, v)
            x = r + F.linear(a.transpose(1, 2).reshape(n_tok, h), layer["o"])
            gate, up = F.linear(rms(x, layer["n2"]), layer["gu"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer["down"])
        return F.linear(rms(x, fnorm), lm_head)

    return step, ids


def _sample(fn: Callable[[], Any], sync: Callable[[], Any], repeats: int, inner: int,
            warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        out.append((time.perf_counter() - t0) / inner)
    return out


def _kernel_count(step: Callable[[], Any]) -> int | None:
    """GPU kernels one eager step launches, counted by torch.profiler (None if unavailable)."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type.name in ("CUDA", "PrivateUse1")
                   and not e.name.startswith(("Memcpy", "Memset")))
    except Exception:
        return None


def run(params: dict[str, Any], progress: Callable[[str], None]) -> BenchResult:
    p = resolve_params(params)
    shown = {k: p[k] for k in p if k not in ("repeats", "inner")}
    try:
        import torch
    except ImportError:
        return BenchResult(FIX_ID, TITLE, "none", shown, skipped="torch is not installed")
    if not torch.cuda.is_available():
        return BenchResult(FIX_ID, TITLE, "cpu", shown,
                           skipped="no CUDA/ROCm GPU: a CUDA/HIP graph needs one (run it on the "
                                   "GPU host: diag bench draft-extend-allowlist)")
    device = "cuda"
    name = torch.cuda.get_device_name(0)
    runtime = f"ROCm {torch.version.hip}" if getattr(torch.version, "hip", None) else \
        f"CUDA {torch.version.cuda}"
    dev = f"{name}, torch {torch.__version__}, {runtime}"
    progress(f"draft-extend bench: preset {p['preset']}, {p['layers']} layer(s), hidden "
             f"{p['hidden']}, batch {p['batch']} x {p['tokens']} tokens, {p['dtype']}")
    with torch.inference_mode():
        step, _ = build_step(p, device)
        sync = torch.cuda.synchronize
        eager_ref = step().clone()
        kernels = _kernel_count(step)
        progress("eager ...")
        eager = _sample(step, sync, p["repeats"], p["inner"])

        progress("capture ...")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        sync()
        graph = torch.cuda.CUDAGraph()
        mem0 = torch.cuda.memory_reserved()
        t0 = time.perf_counter()
        with torch.cuda.graph(graph):
            static_out = step()
        sync()
        capture_s = time.perf_counter() - t0
        pool_mb = (torch.cuda.memory_reserved() - mem0) / 2**20
        graph.replay()
        sync()
        diff = (static_out.float() - eager_ref.float()).abs().max().item()
        progress("replay ...")
        replay = _sample(graph.replay, sync, p["repeats"], p["inner"])

    before, after = Stats.of(eager), Stats.of(replay)
    speedup = before.median / after.median if after.median else float("nan")
    notes = [f"speedup eager/graph = {speedup:.2f}x (reference: H200, torch 2.11, "
             "preset design: 6.2x)",
             f"graph capture {capture_s * 1e3:.1f} ms, graph pool +{pool_mb:.1f} MiB reserved",
             f"max |graph - eager| on the output = {diff:.3g}",
             f"{p['repeats']} samples of {p['inner']} back-to-back steps each, synchronized "
             "per sample"]
    if kernels is not None:
        notes.insert(1, f"GPU kernels per eager step (torch.profiler): {kernels}")
    rows = [Row("step (eager -> graph replay)", "s", before, after)]
    return BenchResult(FIX_ID, TITLE, dev, shown, rows, notes)
