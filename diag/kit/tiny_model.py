"""Tiny models for a real SGLang server (seeded; no hub download): made by the tests' engine lane
(tests/engine_models.py), the GPU lane and `diag kit run` without `--model`. Runs in the SGLang
environment's python (it needs torch, tokenizers and safetensors): `python -m diag.kit.tiny_model
make DIR [SEED [PROFILE]]` prints the folders as JSON.

- `tokenizer`: a byte-level BPE trained here with `tokenizers` on a fixed text.
- `target`: a random 2-layer `LlamaForCausalLM` (attention matters: the stand-in check).
- `bigram` + `draft`: a 1-layer Llama whose attention output projection is zero, so its next
  token depends on the current token only, and a `LlamaForCausalLMEagle` draft
  (`srt/models/llama_eagle.py`: one layer, no input_layernorm in layer 0, no final norm, `fc`
  over cat(embeds, hidden)) built to agree with it: `fc` passes the embedding through, the layer
  copies the target's MLP and post-attention norm, the head is the target's (final norm weight
  1, so `argmax(W h) == argmax(W norm(h))`). EAGLE then accepts every draft token.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

HIDDEN, HEADS, KV_HEADS, INTER, VOCAB = 64, 4, 2, 128, 512
# The GPU lane (benchmarks/gpu_engine): bf16, heads of 64 (the head size SGLang's CUDA rope and
# triton attention kernels take on their main path), the same construction otherwise.
PROFILES = {"cpu": {"hidden": 64, "inter": 128, "dtype": "float32"},
            "gpu": {"hidden": 256, "inter": 512, "dtype": "bfloat16"}}
_TEXT = (
    "speculative decoding drafts a few tokens with a small model and verifies them with the "
    "target in one pass; the draft extend step runs eager or replays a graph. "
    "Beautiful is better than ugly. Explicit is better than implicit. Simple is better than "
    "complex. Complex is better than complicated. Flat is better than nested. Sparse is better "
    "than dense. Readability counts. Errors should never pass silently. "
)


def _tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([_TEXT] * 20, trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "model_max_length": 512}))
    return tok.get_vocab_size()


def _config(arch: str, layers: int, dtype: str = "float32") -> dict:
    return {
        "architectures": [arch], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": INTER, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "num_hidden_layers": layers, "vocab_size": VOCAB, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": dtype, "bos_token_id": 0,
        "eos_token_id": 1,
    }


def _layer(g: torch.Generator, prefix: str, zero_o: bool, input_norm: bool = True) -> dict:
    hd = HIDDEN // HEADS

    def r(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    w = {
        f"{prefix}self_attn.q_proj.weight": r(HEADS * hd, HIDDEN),
        f"{prefix}self_attn.k_proj.weight": r(KV_HEADS * hd, HIDDEN),
        f"{prefix}self_attn.v_proj.weight": r(KV_HEADS * hd, HIDDEN),
        f"{prefix}self_attn.o_proj.weight": torch.zeros(HIDDEN, HEADS * hd) if zero_o else r(HIDDEN, HEADS * hd),
        f"{prefix}mlp.gate_proj.weight": r(INTER, HIDDEN),
        f"{prefix}mlp.up_proj.weight": r(INTER, HIDDEN),
        f"{prefix}mlp.down_proj.weight": r(HIDDEN, INTER),
        f"{prefix}post_attention_layernorm.weight": 1 + 0.1 * torch.randn(HIDDEN, generator=g),
    }
    if input_norm:
        w[f"{prefix}input_layernorm.weight"] = 1 + 0.1 * torch.randn(HIDDEN, generator=g)
    return w


def _save(out: Path, config: dict, weights: dict, tok_dir: Path) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=1))
    save_file({k: v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (out / name).write_bytes((tok_dir / name).read_bytes())


def _target(g: torch.Generator, layers: int, zero_o: bool) -> dict:
    w = {"model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN, generator=g),
         "model.norm.weight": torch.ones(HIDDEN),
         "lm_head.weight": torch.randn(VOCAB, HIDDEN, generator=g) * 0.2}
    for i in range(layers):
        w.update(_layer(g, f"model.layers.{i}.", zero_o))
    return w


def make_models(root: Path, seed: int = 0, profile: str = "cpu") -> dict[str, Path]:
    """Write tokenizer, target, bigram and draft under `root`; return their folders."""
    global HIDDEN, INTER
    prof = PROFILES[profile]
    HIDDEN, INTER = prof["hidden"], prof["inter"]
    dt = getattr(torch, prof["dtype"])
    root = Path(root)
    tok_dir = root / "tokenizer"
    tok_dir.mkdir(parents=True, exist_ok=True)
    n = _tokenizer(tok_dir)
    if n > VOCAB:
        raise RuntimeError(f"tokenizer has {n} tokens > {VOCAB}")
    g = torch.Generator().manual_seed(seed)
    paths = {"target": root / "target", "bigram": root / "bigram", "draft": root / "draft"}
    _save(paths["target"], _config("LlamaForCausalLM", 2, prof["dtype"]),
          _cast(_target(g, 2, zero_o=False), dt), tok_dir)
    bigram = _target(g, 1, zero_o=True)
    _save(paths["bigram"], _config("LlamaForCausalLM", 1, prof["dtype"]), _cast(bigram, dt),
          tok_dir)
    draft = {k.removeprefix("model."): v.clone() for k, v in bigram.items()
             if k.startswith("model.layers.0.") and "input_layernorm" not in k}
    draft["embed_tokens.weight"] = bigram["model.embed_tokens.weight"].clone()
    draft["lm_head.weight"] = bigram["lm_head.weight"].clone()
    draft["fc.weight"] = torch.cat([torch.eye(HIDDEN), torch.zeros(HIDDEN, HIDDEN)], dim=1)
    draft["fc.bias"] = torch.zeros(HIDDEN)
    draft_cfg = _config("LlamaForCausalLMEagle", 1, prof["dtype"])
    _save(paths["draft"], draft_cfg, _cast(draft, dt), tok_dir)
    return paths


def _cast(weights: dict, dtype: torch.dtype) -> dict:
    return {k: v.to(dtype) for k, v in weights.items()}


def bigram_greedy(model_dir: Path, first: int, steps: int) -> list[int]:
    """The bigram target's greedy continuation computed in plain torch from its weights."""
    from safetensors.torch import load_file

    w = load_file(str(Path(model_dir) / "model.safetensors"))
    eps = 1e-5

    def norm(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    out, tok = [], first
    p = "model.layers.0."
    for _ in range(steps):
        h = w["model.embed_tokens.weight"][tok]
        x = norm(h, w[p + "post_attention_layernorm.weight"])
        m = torch.nn.functional.silu(w[p + "mlp.gate_proj.weight"] @ x) * (w[p + "mlp.up_proj.weight"] @ x)
        h = h + w[p + "mlp.down_proj.weight"] @ m
        tok = int(torch.argmax(w["lm_head.weight"] @ norm(h, w["model.norm.weight"])))
        out.append(tok)
    return out


if __name__ == "__main__":
    import sys

    cmd, *rest = sys.argv[1:]
    if cmd == "make":
        made = make_models(Path(rest[0]), int(rest[1]), *rest[2:3])
        print(json.dumps({k: str(v) for k, v in made.items()}))
    elif cmd == "greedy":
        print(json.dumps(bigram_greedy(Path(rest[0]), int(rest[1]), int(rest[2]))))
    else:
        raise SystemExit(f"unknown command {cmd!r}")
