"""Locally built policies: :func:`build_tokenizer` and :func:`build_tiny_model` (no hub access)."""

from arrol_pl.models.tiny import DEFAULT_CORPUS, EOS_TOKEN, PAD_TOKEN, build_tiny_model, build_tokenizer

__all__ = ["DEFAULT_CORPUS", "EOS_TOKEN", "PAD_TOKEN", "build_tiny_model", "build_tokenizer"]
