"""The tiny local policy of the CPU default: tokenizer, model and a short supervised warm start.

Decisions:
- RL needs groups with mixed outcomes: a random tiny model never writes a correct ``\\boxed{}`` and a
  fully trained one always does. The warm start trains on worked solutions (loss on the completion
  and its eos only) and stops at the first check whose *sampled* pass rate (temperature 1, the RL
  sampling) on training problems lies inside ``target_pass_rate``.
- Any dataset whose problems carry worked solutions works (GSM8K's, ``data.solution_field``, the text
  before ``data.answer_pattern``'s match): tokenizer and warm start are trained on its training
  problems, keeping the examples that fit ``model.tiny.max_position_embeddings``. A dataset without
  solutions is refused by the config unless ``model.warm_start.steps=0``.
- Everything is cached under ``model.cache_dir`` (the user's model cache unless set,
  :func:`~arrol_pl.models.cache.default_cache_dir`) by a content key of the task (the arithmetic settings, or the
  dataset's texts), architecture and warm-start settings, so repeated runs, from any directory, and tests reuse the
  same directory. The warm start is built in a temporary directory and renamed into place
  (:func:`~arrol_pl.models.cache.cache_entry`): a run that needs it while another builds it waits for that build
  and reads it, a stopped or failed build is removed, one a killed run left is removed at the next start.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

import torch

from arrol_pl.engine.console import progress
from arrol_pl.models.cache import cache_entry, remove_stale, resolve_cache_dir
from arrol_pl.models.tiny import build_tiny_model, build_tokenizer
from arrol_pl.tasks.arithmetic import ArithmeticConfig, arithmetic_splits, sft_examples, tokenizer_corpus
from arrol_pl.tasks.extraction import extract_boxed
from arrol_pl.tasks.problem import Problem
from arrol_pl.tasks.registry import is_generated, load_train
from arrol_pl.train.config.model import ModelConfig
from arrol_pl.train.config.sections import DataConfig

logger = logging.getLogger(__name__)


def sampled_pass_rate(model, tokenizer, problems: Sequence[Problem], max_new_tokens: int, seed: int = 0) -> float:
    """Fraction of problems whose sampled (temperature 1) completion boxes the gold answer.

    Exact string match of the boxed integer: the arithmetic golds are integers, and this check runs
    often during the warm start, where worker-process math-verify would dominate the time.
    """
    torch.manual_seed(seed)
    tokenizer.padding_side = "left"
    enc = tokenizer([p.prompt for p in problems], return_tensors="pt", padding=True, add_special_tokens=False)
    model.eval()
    with torch.no_grad():
        out = model.generate(
            **enc,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            max_new_tokens=max_new_tokens,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return sum(extract_boxed(t) == p.answer for t, p in zip(texts, problems)) / len(problems)


def _sft_batch(
    tokenizer, pairs: Sequence[tuple[str, str]], encoded: dict[tuple[str, str], tuple[list[int], list[int]]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids, attention_mask, labels`` with the loss on completion + eos only; each pair's token
    ids are kept in ``encoded`` (pairs recur over the warm start's steps)."""
    rows, labels = [], []
    for prompt, completion in pairs:
        pair = (prompt, completion)
        if pair not in encoded:
            encoded[pair] = (
                tokenizer.encode(prompt, add_special_tokens=False),
                tokenizer.encode(completion, add_special_tokens=False) + [tokenizer.eos_token_id],
            )
        p, c = encoded[pair]
        rows.append(p + c)
        labels.append([-100] * len(p) + c)
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    lab = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, lb) in enumerate(zip(rows, labels)):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(lb)] = torch.tensor(lb)
        mask[i, : len(r)] = 1
    return ids, mask, lab


def warm_start(
    model_dir: Path,
    out_dir: Path,
    pairs: Sequence[tuple[str, str]],
    problems: Sequence[Problem],
    cfg: ModelConfig,
    max_new_tokens: int,
    seed: int,
) -> dict:
    """Supervised training of ``model_dir`` on ``(prompt, completion)`` ``pairs``, its pass rate checked on
    ``problems``; saves to ``out_dir``; returns its report."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ws = cfg.warm_start
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=ws.lr, weight_decay=0.0)
    probe = list(problems[:64])
    lo, hi = ws.target_pass_rate
    history = []
    encoded: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
    rate = sampled_pass_rate(model, tokenizer, probe, max_new_tokens, seed)
    step = 0
    with progress(total=ws.steps, desc="warm start", unit="step", leave=False) as bar:
        while step < ws.steps and not lo <= rate <= hi:
            model.train()
            for _ in range(ws.check_every):
                idx = torch.randint(len(pairs), (ws.batch_size,), generator=gen).tolist()
                ids, mask, labels = _sft_batch(tokenizer, [pairs[i] for i in idx], encoded)
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                bar.update()
            rate = sampled_pass_rate(model, tokenizer, probe, max_new_tokens, seed + step)
            history.append({"step": step, "loss": float(loss.detach()), "pass_rate": rate})
            logger.info("warm start step %d: loss %.3f, sampled pass rate %.2f", step, float(loss.detach()), rate)
    if not lo <= rate <= hi:
        logger.warning("warm start ended at pass rate %.2f, outside the target %s", rate, (lo, hi))
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    report = {"steps": step, "pass_rate": rate, "target": [lo, hi], "history": history}
    (out_dir / "warm_start.json").write_text(json.dumps(report, indent=2))
    return report


def task_texts(data: DataConfig) -> tuple[list[str], list[tuple[str, str]], list[Problem], object]:
    """``(tokenizer corpus, warm-start pairs, training problems, cache key part)`` of the run's task.

    A dataset's pairs are its problems' worked solutions (``"\\n" + solution``); without any (only
    reachable with ``model.warm_start.steps=0``) the corpus is its prompts and golds.
    """
    if is_generated(data.name):
        task = ArithmeticConfig(**data.options)
        train, _ = arithmetic_splits(task)
        return tokenizer_corpus(task), sft_examples(train), train, asdict(task)
    train = load_train(data).problems
    pairs = [(p.prompt, "\n" + p.solution) for p in train if p.solution]
    corpus = [prompt + completion for prompt, completion in pairs] or [
        f"{p.prompt}\n\\boxed{{{p.answer}}}" for p in train
    ]
    corpus.append("0123456789 + - * / = . \\boxed{}")
    return corpus, pairs, [p for p in train if p.solution], hashlib.sha256(json.dumps(corpus).encode()).hexdigest()


def fitting(
    tokenizer, pairs: Sequence[tuple[str, str]], problems: Sequence[Problem], max_len: int, max_new_tokens: int
) -> tuple[list[tuple[str, str]], list[Problem]]:
    """The pairs whose prompt + completion + eos fit ``max_len`` tokens, and the problems whose prompt leaves
    room for ``max_new_tokens``: the tiny policy has no positions beyond ``max_len``."""

    def length(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    kept_pairs = [(p, c) for p, c in pairs if length(p) + length(c) + 1 <= max_len]
    kept_problems = [p for p in problems if length(p.prompt) + max_new_tokens <= max_len]
    return kept_pairs, kept_problems


def prepare_tiny_policy(cfg: ModelConfig, data: DataConfig, max_new_tokens: int, seed: int = 0) -> Path:
    """Build (or reuse) tokenizer → tiny Qwen3 → warm start on the run's task; returns the policy directory."""
    corpus, pairs, problems, task_key = task_texts(data)
    cache = resolve_cache_dir(cfg.cache_dir)
    remove_stale(cache)
    tok_dir = build_tokenizer(corpus, cache, vocab_size=cfg.tiny.vocab_size)
    t = cfg.tiny
    model_dir = build_tiny_model(
        tok_dir,
        cache,
        hidden_size=t.hidden_size,
        num_layers=t.num_layers,
        num_heads=t.num_heads,
        num_kv_heads=t.num_kv_heads,
        head_dim=t.head_dim,
        max_position_embeddings=t.max_position_embeddings,
        seed=t.seed,
        initializer_range=0.02,
    )
    if cfg.warm_start.steps == 0:
        return model_dir
    key = hashlib.sha256(
        json.dumps([model_dir.name, task_key, asdict(cfg.warm_start), max_new_tokens, seed], sort_keys=True).encode()
    ).hexdigest()[:16]
    final = cache / f"warm-{key}"
    if (final / "warm_start.json").exists():
        logger.info("tiny policy: the warm start in %s", final)
        return final
    if not is_generated(data.name):
        from transformers import AutoTokenizer

        n_pairs, n_problems = len(pairs), len(problems)
        pairs, problems = fitting(
            AutoTokenizer.from_pretrained(tok_dir), pairs, problems, t.max_position_embeddings, max_new_tokens
        )
        if not pairs or not problems:
            raise ValueError(
                f"data.name={data.name}: none of {n_pairs} worked solutions (or {n_problems} prompts plus "
                f"algo.max_response_tokens={max_new_tokens}) fits the tiny policy's "
                f"model.tiny.max_position_embeddings={t.max_position_embeddings} tokens; raise it, or use a real "
                f"model (model=hf model.path=...)"
            )
        if len(pairs) < n_pairs:
            logger.warning(
                "warm start on %d of %d worked solutions of %s: the rest exceed %d tokens",
                len(pairs),
                n_pairs,
                data.name,
                t.max_position_embeddings,
            )
    logger.info(
        "tiny policy: warm start of up to %d steps into %s (once per task and settings)", cfg.warm_start.steps, final
    )
    with cache_entry(final, marker="warm_start.json") as tmp:
        if tmp is not None:  # None: another process built it meanwhile
            warm_start(model_dir, tmp, pairs, problems, cfg, max_new_tokens, seed)
    return final
