"""Tiny Qwen3-architecture policies built locally, for tests, CPU smoke runs and benchmarks.

Decisions:
- The tokenizer is a byte-level BPE trained with the ``tokenizers`` library, with digits split one per
  token, so any text (digits, ``+ - * = ( )``, ``\\boxed{}``, spaces, newlines, English) round-trips.
  It carries ``<|endoftext|>`` (eos) and ``<|pad|>`` and is saved as a ``PreTrainedTokenizerFast`` dir.
- The model is a randomly initialised ``Qwen3ForCausalLM`` whose ``vocab_size == len(tokenizer)``: a
  padded vocab lets vLLM sample ids the tokenizer cannot decode, which the detokenizer then fails on. ``head_dim``
  must be ≥ 32 (vLLM's CPU attention rejects 16). Weights are saved in float32.
- Both builders cache by a content key (the corpus / tokenizer files plus every config field and the
  seed): the output is ``out_dir/<kind>-<key>``, built in a temp dir and renamed
  (:func:`~arrol_pl.models.cache.cache_entry`), so a repeated call — or a concurrent one — reuses the finished
  directory.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from arrol_pl.models.cache import cache_entry, make_cache

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

DEFAULT_CORPUS: tuple[str, ...] = (
    "Question: What is 12 + 35? Answer: 12 + 35 = 47, so the answer is \\boxed{47}.",
    "Question: Compute (3 * 4) - 5. Answer: 3 * 4 = 12 and 12 - 5 = 7. The answer is \\boxed{7}.",
    "Let us think step by step.\nFirst, add the numbers.\nThen multiply the result by 2.\n",
    "The quick brown fox jumps over the lazy dog. A small model learns to count and to add.",
    "Solve for x: 2 * x + 6 = 10. Subtract 6 from both sides: 2 * x = 4, so x = 2. \\boxed{2}",
    "Question: What is 9 * 8? Answer: 9 * 8 = 72. \\boxed{72}\n",
    "Question: What is 100 - 58? Answer: 100 - 58 = 42. The final answer is \\boxed{42}.\n",
    "We check the answer again: (1 + 2) * (3 + 4) = 3 * 7 = 21. Therefore \\boxed{21}.",
    "If a train travels 60 miles in 1 hour, how far does it travel in 3 hours? 60 * 3 = 180.",
    "Wait, let me re-check the computation. 45 + 17 = 62, not 52. So the answer is \\boxed{62}.",
) + tuple(
    f"{a} + {b} = {a + b}\n{a} * {b} = {a * b}\n{a} - {b} = {a - b}\n" for a in range(0, 40, 3) for b in range(1, 30, 4)
)


def _key(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\x00")
    return h.hexdigest()[:16]


def build_tokenizer(corpus: Iterable[str] | None, out_dir: str | os.PathLike, vocab_size: int = 512) -> Path:
    """Train a byte-level BPE tokenizer on ``corpus`` (default: a small arithmetic/English corpus).

    Returns the directory (``out_dir/tokenizer-<key>``) loadable with ``AutoTokenizer.from_pretrained``.
    ``vocab_size`` is an upper bound: BPE stops early when the corpus has no more merges.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = list(DEFAULT_CORPUS if corpus is None else corpus)
    if not texts:
        raise ValueError("build_tokenizer: corpus is empty")
    if vocab_size < 256 + 2:
        raise ValueError(f"build_tokenizer: vocab_size must be ≥ 258 (256 bytes + eos + pad), got {vocab_size}")
    out = Path(out_dir)
    final = out / f"tokenizer-{_key('tok-v1', vocab_size, texts)}"
    if (final / "done").exists():
        return final
    make_cache(out)

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN)
    with cache_entry(final) as tmp:
        if tmp is not None:  # None: another process built it meanwhile
            fast.save_pretrained(tmp)
            (tmp / "done").write_text("ok\n")
    return final


def build_tiny_model(
    tokenizer_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 32,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 2048,
    initializer_range: float = 0.1,
    tie_word_embeddings: bool = False,
    seed: int = 0,
) -> Path:
    """Save a randomly initialised ``Qwen3ForCausalLM`` (float32) plus the tokenizer files.

    Returns the directory (``out_dir/qwen3-tiny-<key>``), usable as a vLLM or transformers model path.
    ``initializer_range`` is larger than Qwen's 0.02 so that random logits are well separated
    (greedy parity tests need no near-ties).
    """
    if head_dim < 32:
        raise ValueError(f"build_tiny_model: head_dim must be ≥ 32 (vLLM CPU attention), got {head_dim}")
    if num_heads % num_kv_heads:
        raise ValueError(f"build_tiny_model: num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    tokenizer_dir = Path(tokenizer_dir)
    tok_bytes = b"".join((tokenizer_dir / f).read_bytes() for f in _TOKENIZER_FILES if (tokenizer_dir / f).exists())
    if not tok_bytes:
        raise ValueError(f"build_tiny_model: no tokenizer files in {tokenizer_dir}")
    fields = dict(
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate_size or 3 * hidden_size,
        max_position_embeddings=max_position_embeddings,
        initializer_range=initializer_range,
        tie_word_embeddings=tie_word_embeddings,
        seed=seed,
    )
    out = Path(out_dir)
    final = out / f"qwen3-tiny-{_key('model-v1', fields, tok_bytes)}"
    if (final / "done").exists():
        return final
    make_cache(out)

    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=fields["intermediate_size"],
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        initializer_range=initializer_range,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config).to(torch.float32)
    with cache_entry(final) as tmp:
        if tmp is not None:  # None: another process built it meanwhile
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / "done").write_text("ok\n")
    return final
