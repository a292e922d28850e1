"""What the served models decide for the census: whether a backend has a sliding window, and
whether the model is an encoder-decoder one (flashinfer's wrapper dispatch, `encoder_decoder`).

Why: builders test `self.sliding_window_size` (triton's window buffers: a device scalar as a
size and as slice bounds, 0.5.23 triton_backend.py:2877/2897/2899), a value the model runner
takes from the model, not from a server argument. SGLang sets it (0.5.9
model_runner.py:1021-1031; 0.5.23 model_runner_components/load_model_utils.py:144-157) from the
model class's `get_attention_sliding_window_size()` when it has one, else from a hybrid-SWA
config's `sliding_window`, else from `attention_chunk_size`, else None. The target model's
backend serves target-extend and target-verify; the draft model's serves draft-extend and the
draft's decode steps. Read from a model directory's config.json (`--model`, or a server's model
and draft model paths when readable here); anything else leaves the window unknown (`depends`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def _defines_window(target: Any, arch: str) -> str | None:
    """`models/<file>.py:<line>` where the release's class `arch` (or a base class named in its
    header) defines get_attention_sliding_window_size; None when neither does."""
    base = target.file(MODELS_DIR)
    if not base.is_dir():
        return None
    texts: list[tuple[Path, str]] = []
    for path in sorted(base.glob("*.py")):  # each file read once, whatever the class chain
        try:
            texts.append((path, path.read_text(encoding="utf-8", errors="replace")))
        except OSError:
            continue
    want, seen = [arch], set()
    while want:
        name = want.pop()
        if name in seen:
            continue
        seen.add(name)
        head = re.compile(rf"^class {re.escape(name)}\(([^)]*)\)", re.M)
        for path, text in texts:
            m = head.search(text)
            if m is None:
                continue
            end = re.compile(r"^class \w", re.M).search(text, m.end())
            body = text[m.start():end.start() if end else len(text)]
            hit = body.find("def get_attention_sliding_window_size")
            if hit >= 0:
                line = text.count("\n", 0, m.start() + hit) + 1
                return f"{target.relpath(path)}:{line}"
            want += [b.strip().split(".")[-1] for b in m.group(1).split(",") if b.strip()]
            break
    return None


_ENCDEC = re.compile(r"def is_encoder_decoder_model\([^)]*\)[^:]*:\s*models\s*=\s*\[([^\]]*)\]")


def encoder_decoder(target: Any, arch: str) -> tuple[bool | None, str]:
    """Whether the release serves `arch` as an encoder-decoder model: flashinfer then runs its
    cross-attention updaters (0.5.23 flashinfer_backend.py:414-416, from
    configs/model_config.py:871 `is_encoder_decoder_model`, the list at :2540-2546)."""
    path = target.file("srt/configs/model_config.py")
    try:
        m = _ENCDEC.search(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        m = None
    if m is None:
        return None, f"{target.relpath(path)}: no is_encoder_decoder_model list found"
    names = set(re.findall(r"[\"']([\w.]+)[\"']", m.group(1)))
    yes = arch in names
    return yes, f"{arch} is {'' if yes else 'not '}an encoder-decoder model " \
        f"({target.relpath(path)}: is_encoder_decoder_model)"


def window(target: Any, model: str | None, which: str) -> Window:
    """The sliding window of the `which` ("target" or "draft") model, `model` its path, and
    whether it is an encoder-decoder model."""
    w, arch = _window(target, model, which)
    if arch is None:
        return Window(w.known, w.value, w.why, None,
                      f"whether the {which} model is an encoder-decoder model (" + (
                          "pass --model" if not model and which == "target" else
                          "the draft model's path comes from --server" if not model else
                          f"{model}: no architecture readable here") + ")")
    yes, why = encoder_decoder(target, arch)
    return Window(w.known, w.value, w.why, yes, why)


def _config_file(model: str) -> Path | None:
    p = Path(model)
    return p / "config.json" if p.is_dir() else p if p.name == "config.json" else None


def _window(target: Any, model: str | None, which: str) -> tuple[Window, str | None]:
    """The window, and the architecture config.json names (None when none is readable)."""
    if not model:
        return Window(False, None, f"the {which} model's sliding window (" + (
            "pass --model" if which == "target" else "the draft model's path comes from "
            "--server") + ")"), None
    cfg_file = _config_file(model)
    if cfg_file is None or not cfg_file.is_file():
        return Window(False, None, f"the {which} model's sliding window ({model}: no "
                      "config.json readable here)"), None
    try:
        params = json.loads(cfg_file.read_text(encoding="utf-8"))
        params = params if isinstance(params, dict) else {}
    except (OSError, ValueError):
        return Window(False, None,
                      f"the {which} model's sliding window ({cfg_file} unreadable)"), None
    archs = params.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    if arch is None:
        return Window(False, None, f"the {which} model's sliding window ({cfg_file} names no "
                      "architecture)"), None
    where = _defines_window(target, arch)
    if where is not None:
        return Window(False, None, f"{arch} sets its own sliding window ({where})"), arch
    if params.get("sliding_window") is not None or any(
            isinstance(t, str) and "sliding" in t for t in params.get("layer_types") or []):
        return Window(False, None, f"{arch}'s config.json has a sliding window: whether SGLang "
                      "reads it as hybrid SWA"), arch
    chunk = params.get("attention_chunk_size")
    if isinstance(chunk, int) and not isinstance(chunk, bool):
        return Window(True, chunk, f"{arch}: attention_chunk_size {chunk}"), arch
    return Window(True, None, f"{arch}: no sliding window (no get_attention_sliding_window_size, "
                  "no sliding_window or attention_chunk_size in config.json)"), arch


def windows(target: Any, model: str | None, draft: str | None = None) -> dict[str, Window]:
    """Both models' windows, as `census_config.decide` reads them."""
    return {"target": window(target, model, "target"), "draft": window(target, draft, "draft")}
