"""What the served models decide for the census: whether a backend has a sliding window,
whether the model is an encoder-decoder one (flashinfer's wrapper dispatch and every batch's
`encoder_lens`, `encoder_decoder`), whether it has chunked local attention (fa3's local
builder, `local_attention`), whether fa3 keeps a prefill-aware window (`prefill_aware_swa`)
and whether its attention is MLA (every backend's `self.use_mla`, `mla_of`).

Why: builders test `self.sliding_window_size` (triton's window buffers: a device scalar as a
size and as slice bounds, 0.5.23 triton_backend.py:2877/2897/2899), a value the model runner
takes from the model, not from a server argument. SGLang sets it (0.5.9
model_runner.py:1021-1031; 0.5.23 model_runner_components/load_model_utils.py:144-157) from the
model class's `get_attention_sliding_window_size()` when it has one, else from a hybrid-SWA
config's `sliding_window`, else from `attention_chunk_size`, else None. The target model's
backend serves target-extend and target-verify; the draft model's serves draft-extend and the
draft's decode steps. Read from a model directory's config.json (`--model`, or a server's model
and draft model paths when readable here); anything else leaves the window unknown (`depends`).
A family or architecture name (`--model llama`) decides what the architecture alone decides
(the model_config.py lists, the model class), not the window a checkpoint's config.json sets;
a name that is neither a family nor a model class of the release decides nothing.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diag.probes.startup.resolve import (
    MODEL_CONFIG,
    architectures_listed,
    config_index,
    model_config,
)

# census modes the draft model's backend runs (the rest run on the target model's)
DRAFT_MODES = frozenset({"draft-extend", "decode"})
MODELS_DIR = "srt/models"


@dataclass(frozen=True)
class Window:
    known: bool  # False: no input decides it
    value: int | None  # the sliding window size when known (None: no window)
    why: str
    # whether SGLang serves it as an encoder-decoder model (`encoder_decoder`); None: unknown
    encoder_decoder: bool | None = None
    encdec_why: str = ""
    # whether SGLang serves it with chunked local attention (`local_attention`); None: unknown
    local_attention: bool | None = None
    local_why: str = ""
    # whether fa3 keeps prefill tokens of a sliding window (`prefill_aware_swa`); None: unknown
    prefill_aware: bool | None = None
    prefill_why: str = ""
    # whether its attention is MLA (`mla`); None: unknown
    mla: bool | None = None
    mla_why: str = ""


@functools.lru_cache(maxsize=4)
def _classes(models_dir: str) -> tuple[dict[str, tuple[str, list[str], int, int]],
                                       dict[str, str]]:
    """The model classes of a release's srt/models: name -> (file, base names, the class's
    start and end in the file's text), and each file's text, from one read of each file."""
    head, nxt = re.compile(r"^class (\w+)\(([^)]*)\)", re.M), re.compile(r"^class \w", re.M)
    out: dict[str, tuple[str, list[str], int, int]] = {}
    texts: dict[str, str] = {}
    for path in sorted(Path(models_dir).glob("*.py")):
        try:
            text = texts[str(path)] = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for m in head.finditer(text):
            end = nxt.search(text, m.end())
            out.setdefault(m.group(1), (
                str(path), [b.strip().split(".")[-1] for b in m.group(2).split(",") if b.strip()],
                m.start(), end.start() if end else len(text)))
    return out, texts


def _defines(target: Any, arch: str, method: str) -> tuple[str, str] | None:
    """(`models/<file>.py:<line>`, the method's text) where the release's class `arch` (or a
    base class named in its header) defines `method`; None when none does."""
    base = target.file(MODELS_DIR)
    if not base.is_dir():
        return None
    classes, texts = _classes(str(base))
    want, seen = [arch], set()
    while want:
        name = want.pop()
        if name in seen or name not in classes:
            continue
        seen.add(name)
        path, bases, start, end = classes[name]
        text = texts[path]
        hit = text.find(f"def {method}(", start, end)
        if hit >= 0:
            nxt = text.find("\n    def ", hit + 1, end)
            return f"{target.relpath(Path(path))}:{text.count(chr(10), 0, hit) + 1}", \
                text[hit:nxt if nxt > 0 else end]
        want += bases
    return None


def prefill_aware_swa(target: Any, arch: str) -> tuple[bool | None, str]:
    """Whether the model runner sets `prefill_aware_swa` for `arch`: `hasattr(self.model,
    "is_prefill_aware_swa") and self.model.is_prefill_aware_swa()` (0.5.23
    model_executor/model_runner.py:1357-1360), which fa3 keeps as `self.is_prefill_aware_swa`
    (layers/attention/flashattention_backend.py:257). Decided where the class has no such
    method, or one that returns True (0.5.23 models/unlimited_ocr.py:100-102)."""
    if not target.file(MODELS_DIR).is_dir() or \
            arch not in _classes(str(target.file(MODELS_DIR)))[0]:
        return None, f"{arch}: no such model class in sglang/{MODELS_DIR}"
    got = _defines(target, arch, "is_prefill_aware_swa")
    if got is None:
        return False, f"{arch} has no is_prefill_aware_swa (not a prefill-aware SWA model)"
    where, text = got
    if _RETURNS_TRUE.search(text):
        return True, f"{arch}.is_prefill_aware_swa returns True ({where})"
    return None, f"what {arch}.is_prefill_aware_swa returns ({where})"


_RETURNS_TRUE = re.compile(r"\)[^:]*:\s*(?:(?:\"\"\"[\s\S]*?\"\"\"|#[^\n]*)\s*)*return True\s*$")


def listed(target: Any, arch: str, func: str, words: str) -> tuple[bool | None, str]:
    """Whether `arch` is among the architectures the release's model_config.py predicate `func`
    names (None where the release has none), and why in words with its file:line."""
    got = architectures_listed(target, func)
    if got is None:
        return None, f"sglang/{MODEL_CONFIG}: no {func}"
    names, where = got
    yes = arch in names
    return yes, f"{arch} is {'' if yes else 'not '}{words} ({where} {func})"


def encoder_decoder(target: Any, arch: str) -> tuple[bool | None, str]:
    """Whether the release serves `arch` as an encoder-decoder model: flashinfer then runs its
    cross-attention updaters (0.5.23 flashinfer_backend.py:414-416, from
    configs/model_config.py:871 `is_encoder_decoder_model`, the list at :2540-2546), and every
    batch carries `encoder_lens` (managers/schedule_batch.py:3128-3129 -> :2748)."""
    return listed(target, arch, "is_encoder_decoder_model", "an encoder-decoder model")


def local_attention(target: Any, arch: str) -> tuple[bool | None, str]:
    """Whether the release serves `arch` with chunked local attention: fa3 then builds its
    `LocalAttentionMetadataBuilder` (0.5.23 flashattention_backend.py:383-386, from
    configs/model_config.py:872 `is_local_attention_model`, :2549-2550: Llama 4) and tests
    `self.has_local_attention` before (0.5.19 flashattention_backend.py:227)."""
    return listed(target, arch, "is_local_attention_model", "a local-attention model")


def window(target: Any, model: str | None, which: str) -> Window:
    """The sliding window of the `which` ("target" or "draft") model, `model` its path or name,
    and what its architecture decides (encoder-decoder, local attention, prefill-aware window,
    MLA)."""
    w, arch = _window(target, model, which)
    if arch is None:
        why = "pass --model" if not model and which == "target" else \
            "pass --draft-model, or --server" if not model else \
            f"{model}: no architecture readable here"
        return Window(w.known, w.value, w.why, None,
                      f"whether the {which} model is an encoder-decoder model ({why})", None,
                      f"whether the {which} model has chunked local attention ({why})", None,
                      f"whether the {which} model is a prefill-aware SWA model ({why})", None,
                      f"whether the {which} model's attention is MLA ({why})")
    enc, enc_why = encoder_decoder(target, arch)
    loc, loc_why = local_attention(target, arch)
    pa, pa_why = prefill_aware_swa(target, arch)
    mla, mla_why = mla_of(target, arch)
    return Window(w.known, w.value, w.why, enc, enc_why, loc, loc_why, pa, pa_why, mla, mla_why)


def mla_of(target: Any, arch: str) -> tuple[bool | None, str]:
    """Whether the release gives `arch` MLA attention: a backend's `self.use_mla` is
    `model_config.attention_arch == AttentionArch.MLA` (0.5.23 aiter_backend.py:385,
    flashattention_backend.py:203) or the model runner's `use_mla_backend`, the same test
    (model_executor/model_runner.py:406); model_config.py sets it in a branch that names the
    architecture (`resolve.config_index`, as the gate reads it)."""
    index = config_index(target)
    if index is None:
        return None, f"sglang/{MODEL_CONFIG} unreadable"
    line = index.mla.get(arch)
    if line is None:
        return False, f"{arch} is not an MLA model (no AttentionArch.MLA branch of " \
                      f"sglang/{MODEL_CONFIG} names it)"
    return True, f"{arch} is an MLA model (sglang/{MODEL_CONFIG}:{line})"


def _window(target: Any, model: str | None, which: str) -> tuple[Window, str | None]:
    """The window, and the architecture the model names (None when none is readable): a
    config.json's, or a family or architecture name's (`resolve.model_config`), which decides
    what the architecture decides but not the window a checkpoint's config.json sets."""
    if not model:
        return Window(False, None, f"the {which} model's sliding window (" + (
            "pass --model" if which == "target" else "pass --draft-model, or --server")
            + ")"), None
    try:
        got = model_config(model)
    except ValueError as e:
        return Window(False, None, f"the {which} model's sliding window ({e})"), None
    if got is None:
        return Window(False, None, f"the {which} model's sliding window ({model}: not on this "
                      "machine)"), None
    arch, params, source = got
    if _config_file(model) is None and target.file(MODELS_DIR).is_dir() and \
            arch not in _classes(str(target.file(MODELS_DIR)))[0]:
        return Window(False, None, f"the {which} model ({model}: neither a family name nor a "
                      f"model class of sglang/{MODELS_DIR}; pass the model's directory)"), None
    own = _defines(target, arch, "get_attention_sliding_window_size")
    if own is not None:
        return Window(False, None, f"{arch} sets its own sliding window ({own[0]})"), arch
    if _config_file(model) is None:
        return Window(False, None, f"the {which} model's sliding window ({source}: a name "
                      "carries no config.json; pass the model's directory)"), arch
    if params.get("sliding_window") is not None or any(
            isinstance(t, str) and "sliding" in t for t in params.get("layer_types") or []):
        return Window(False, None, f"{arch}'s config.json has a sliding window: whether SGLang "
                      "reads it as hybrid SWA"), arch
    chunk = params.get("attention_chunk_size")
    if isinstance(chunk, int) and not isinstance(chunk, bool):
        return Window(True, chunk, f"{arch}: attention_chunk_size {chunk}"), arch
    return Window(True, None, f"{arch}: no sliding window (no get_attention_sliding_window_size, "
                  "no sliding_window or attention_chunk_size in config.json)"), arch


def _config_file(model: str) -> Path | None:
    p = Path(model)
    return p / "config.json" if p.is_dir() else p if p.name == "config.json" else None


def windows(target: Any, model: str | None, draft: str | None = None) -> dict[str, Window]:
    """Both models' windows, as `census_config.decide` reads them."""
    return {"target": window(target, model, "target"), "draft": window(target, draft, "draft")}
