"""Make a tiny random-weight Llama plus a locally trained byte-level BPE tokenizer.

Usage: python make_tiny_model.py OUTDIR [--shape llama-3.1-8b]

--shape llama-3.1-8b writes Llama-3.1-8B's architecture (hidden 4096, 32 layers, 32 heads, 8 KV
heads, intermediate 14336, vocab 128256) with the same tokenizer and no weights at all: serve it
with vLLM's ``--load-format dummy`` (random weights made on the GPU, nothing to download or
load). Timing with ``--ignore-eos`` does not depend on the weights' values.

Deterministic (fixed seeds, corpus generated in this file), offline, ~5 s on one CPU core.
The result loads with transformers.AutoTokenizer / AutoModelForCausalLM and serves with vLLM.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 0
VOCAB_SIZE = 2048
MAX_LEN = 2048

BOS, EOS, EOT = "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"
START_HEADER, END_HEADER = "<|start_header_id|>", "<|end_header_id|>"
SPECIAL_TOKENS = [BOS, EOS, EOT, START_HEADER, END_HEADER]

# Llama-3-like chat template.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

WORDS = (
    "the of and to in is that it for was on are as with his they at be this from have or by one had not but what"
    " all were when we there can an your which their said if do will each about how up out them then she many some"
    " so these would other into has more her two like him see time could no make than first been its who now people"
    " my made over did down only way find use may water long little very after words called just where most know"
    " model token prefill decode cache server request router prompt memory transfer layer tensor batch engine"
    " container network health metric latency stream chunk block core thread buffer socket queue worker"
).split()
SYLLABLES = "ba be bi bo bu ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu ra re ri ro ru sa se si so su ta te ti to tu".split()


def corpus(seed: int = SEED, lines: int = 6000) -> list[str]:
    """Pseudo-English text, generated here so training needs no download and never changes."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = []
        for _ in range(rng.randint(6, 16)):
            r = rng.random()
            if r < 0.7:
                words.append(rng.choice(WORDS))
            elif r < 0.9:
                words.append("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
            else:
                words.append(str(rng.randint(0, 9999)))
        sentence = " ".join(words)
        out.append(sentence[0].upper() + sentence[1:] + rng.choice([".", ".", "?", "!", ","]))
    return out


def make_tokenizer(outdir: Path) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOT,
        pad_token=EOS,
        model_max_length=MAX_LEN,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(outdir)
    return fast


def make_model(outdir: Path, tok: PreTrainedTokenizerFast) -> None:
    torch.manual_seed(SEED)
    eos_ids = [tok.convert_tokens_to_ids(EOT), tok.convert_tokens_to_ids(EOS)]
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_LEN,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=eos_ids,
        pad_token_id=tok.pad_token_id,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = eos_ids
    model.generation_config.bos_token_id = tok.bos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(outdir, safe_serialization=True)


def write_llama_8b_config(outdir: Path, tok: PreTrainedTokenizerFast) -> None:
    """Llama-3.1-8B's shape, no weights (vLLM's --load-format dummy makes random ones)."""
    eos_ids = [tok.convert_tokens_to_ids(EOT), tok.convert_tokens_to_ids(EOS)]
    config = LlamaConfig(
        vocab_size=128256,  # the model's; the tokenizer's 2048 ids are a subset
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=eos_ids,
        pad_token_id=tok.pad_token_id,
        torch_dtype="bfloat16",
    )
    config.save_pretrained(outdir)


def main() -> None:
    args = sys.argv[1:]
    if len(args) not in (1, 3) or (len(args) == 3 and args[1:] != ["--shape", "llama-3.1-8b"]):
        sys.exit(f"usage: {sys.argv[0]} OUTDIR [--shape llama-3.1-8b]")
    outdir = Path(args[0])
    outdir.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(outdir)
    if len(tok) != VOCAB_SIZE:
        sys.exit(f"tokenizer has {len(tok)} tokens, expected {VOCAB_SIZE}")
    if len(args) == 3:
        write_llama_8b_config(outdir, tok)
    else:
        make_model(outdir, tok)
    for path in (
        outdir.iterdir()
    ):  # safetensors writes its file 0600 (temp file + rename): make it world-readable
        path.chmod(0o644)
    print(
        json.dumps(
            {
                "outdir": str(outdir),
                "vocab": len(tok),
                "files": sorted(p.name for p in outdir.iterdir()),
            }
        )
    )


if __name__ == "__main__":
    main()
