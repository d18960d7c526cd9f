"""Tiny, locally built models: a byte-level BPE tokenizer and a random-init causal LM.

No model hub is reachable here, so tests and the quickstart build their model from a
config. The result is an ordinary Hugging Face directory (``config.json``, weights,
``tokenizer.json``, ``tokenizer_config.json`` with a chat template) that
``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained`` load
exactly like a downloaded checkpoint, so nothing downstream special-cases it.

The agent tags (``<think>``, ``<search>``, …) are added tokens that are *not* special:
each is one token id (so a stop string such as ``</search>`` is completed by exactly
one sampled token), and ``decode(..., skip_special_tokens=True)`` keeps them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast, Qwen2Config

PAD_TOKEN = "<|pad|>"
BOS_TOKEN = "<|endoftext|>"  # also what Qwen2Tokenizer uses as unk, so it is in-vocab
EOS_TOKEN = "<|im_end|>"  # ends an assistant message, as in Qwen-style chat models
IM_START_TOKEN = "<|im_start|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, BOS_TOKEN, IM_START_TOKEN, EOS_TOKEN)
TAG_TOKENS: tuple[str, ...] = (
    "<think>",
    "</think>",
    "<search>",
    "</search>",
    "<information>",
    "</information>",
    "<answer>",
    "</answer>",
)
# The hermes format's tags, single tokens only when asked for (``tool_call_tokens=True``): adding
# them by default would change every id of the quickstart's tokenizer.
TOOL_CALL_TOKENS: tuple[str, ...] = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Enough English and agent-format text for the BPE to learn useful merges, so that a
# nano model's tokenizer is not just bytes. Also serves as the default corpus.
DEFAULT_TEXTS: tuple[str, ...] = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information.",
    "After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between "
    "<information> and </information>.",
    "You can search as many times as you want. If you find no further external knowledge "
    "needed, you can directly provide the answer inside <answer> and </answer>, without "
    "detailed illustrations. For example, <answer> Beijing </answer>.",
    "<think> I need to find the capital of France. </think> <search> capital of France </search>",
    '<information>Doc 1(Title: "Paris") Paris is the capital and largest city of France.</information>',
    "<think> The documents say Paris. </think> <answer> Paris </answer>",
    "Question: who wrote the novel Pride and Prejudice? <think> I should search. </think> "
    '<search> author of Pride and Prejudice </search> <information>Doc 1(Title: "Jane Austen") '
    "Jane Austen was an English novelist known for Pride and Prejudice.</information> "
    "<answer> Jane Austen </answer>",
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a "
    "single step. The river flows north through the valley before it reaches the sea.",
    "In 1969 the first humans landed on the Moon. The mission was called Apollo 11 and the "
    "astronauts were Neil Armstrong, Buzz Aldrin and Michael Collins.",
    "Water boils at one hundred degrees Celsius at sea level. The largest planet in the solar "
    "system is Jupiter, and the closest star to the Earth is the Sun.",
    "What is the capital of Germany? Berlin. What is the capital of Italy? Rome. What is the "
    "capital of Spain? Madrid. How many legs does a spider have? Eight.",
    "The Eiffel Tower is in Paris. The Great Wall is in China. The Statue of Liberty is in New "
    "York. Mount Everest is the highest mountain on Earth.",
    "She said that they would meet again in the morning, when the sun was high and the market "
    "was full of people selling bread, fish, apples and flowers.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 20 100 1000 2024. Punctuation: , . ; : ! ? ( ) \" ' -",
)

_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

Arch = Literal["qwen2", "llama"]
Size = Literal["nano", "small"]

# name -> (vocab_size, hidden_size, layers, heads, kv_heads, intermediate_size).
# head_dim (hidden / heads) is 32: vLLM's CPU attention supports head sizes 32, 64, 80, ...
_SIZES: dict[str, tuple[int, int, int, int, int, int]] = {
    "nano": (512, 64, 2, 2, 1, 128),
    "small": (2048, 256, 4, 8, 4, 768),
}


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, out_dir: str | Path | None = None, tool_call_tokens: bool = False
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts`` and wrap it as a transformers fast tokenizer.

    Special tokens (never produced by the BPE, stripped by ``skip_special_tokens``):
    pad ``<|pad|>``, bos ``<|endoftext|>``, ``<|im_start|>`` and eos ``<|im_end|>``. pad differs
    from eos so that masks never confuse padding with a real end of message. The agent
    tags are added as non-special single tokens, and with ``tool_call_tokens`` the hermes
    format's ``TOOL_CALL_TOKENS`` too. ``vocab_size`` is an upper bound: the
    trainer stops early when the corpus has no more merges. If ``out_dir`` is given the
    tokenizer is saved there.
    """
    tags = (*TAG_TOKENS, *(TOOL_CALL_TOKENS if tool_call_tokens else ()))
    if vocab_size < 256 + len(SPECIAL_TOKENS) + len(tags):
        raise ValueError(
            f"vocab_size must be >= {256 + len(SPECIAL_TOKENS) + len(tags)} "
            f"(256 bytes + special + tag tokens), got {vocab_size}"
        )
    texts = list(texts)
    if not texts:
        raise ValueError("texts must contain at least one string to train the tokenizer on")

    tok = Tokenizer(models.BPE())
    # The same normalizer and pre-tokenizer as transformers' Qwen2Tokenizer: for a
    # ``qwen2`` config, AutoTokenizer rebuilds the pipeline with that class and would
    # otherwise split text differently from the tokenizer returned here.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(tags),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in tags])

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        model_max_length=4096,
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
    )
    hf_tok.add_special_tokens({"additional_special_tokens": [IM_START_TOKEN]})
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        hf_tok.save_pretrained(out)
    return hf_tok


def build_tiny_causal_lm(
    tokenizer: PreTrainedTokenizerFast,
    out_dir: str | Path,
    arch: Arch = "qwen2",
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int | None = None,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 4096,
    seed: int = 0,
    vocab_size: int | None = None,
) -> Path:
    """Random-init a causal LM sized to ``tokenizer`` and save model + tokenizer to ``out_dir``.

    ``vocab_size``: the embedding's rows, when not the tokenizer's size (a real model's shape, whose
    vocabulary this tokenizer does not fill: ``benchmarks/gpu_check.py``).

    The seed fixes the weights, so two builds with the same arguments are identical
    (tests rely on that). The LM head is untied from the embeddings: with tied weights a
    random model mostly echoes its last input token, which makes tests too easy to pass.
    Keep ``hidden_size // heads`` in vLLM's supported head sizes (32, 64, 80, ...) if the
    model will be served by vLLM on CPU.
    """
    if hidden_size % heads:
        raise ValueError(f"hidden_size ({hidden_size}) must be divisible by heads ({heads})")
    kv_heads = kv_heads or heads
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be divisible by kv_heads ({kv_heads})")
    common = dict(
        vocab_size=vocab_size or len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if arch == "qwen2":
        config = Qwen2Config(**common)
    elif arch == "llama":
        config = LlamaConfig(**common)
    else:
        raise ValueError(f"arch must be 'qwen2' or 'llama', got {arch!r}")

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "agentrl_tiny.json").write_text(json.dumps({"arch": arch, "seed": seed}) + "\n")
    return out


def make_tiny_model_dir(
    out_dir: str | Path,
    texts: Iterable[str] | None = None,
    size: Size = "nano",
    seed: int = 0,
    arch: Arch = "qwen2",
    tool_call_tokens: bool = False,
) -> Path:
    """Tokenizer + random model in one call (what tests and the quickstart use).

    ``nano`` is ~0.2M parameters and builds in about a second; ``small`` is ~5M.
    ``texts`` defaults to a built-in list covering the agent tags and some English.
    ``tool_call_tokens`` adds the hermes format's tags as single tokens (off: the ids stay as they were).
    """
    if size not in _SIZES:
        raise ValueError(f"size must be one of {sorted(_SIZES)}, got {size!r}")
    vocab, hidden, layers, heads, kv_heads, inter = _SIZES[size]
    tokenizer = train_tokenizer(
        DEFAULT_TEXTS if texts is None else texts, vocab_size=vocab, tool_call_tokens=tool_call_tokens
    )
    return build_tiny_causal_lm(
        tokenizer,
        out_dir,
        arch=arch,
        hidden_size=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        intermediate_size=inter,
        seed=seed,
    )
