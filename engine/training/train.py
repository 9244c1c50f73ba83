"""Train `munuibot-tiny`, the engine's default model, from nothing, on CPU.

    python -m engine.training.train --out engine/models/munuibot-tiny

Steps: generate the 문의봇 corpus (`corpus.make_corpus`), train the byte-level BPE tokenizer on it
(`tokenizer.train_tokenizer`), build a small Llama (GQA, tied embeddings), train it with AdamW
(linear warm-up, cosine decay, gradient clipping) on the assistant tokens only, and save a plain
transformers checkpoint: config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json (with the chat template) and training_log.json.

The examples of a batch share one system prompt, so a batch computes it once: the prefix
`<s><|system|>...<|end|>` runs forward at batch size 1, its key/value cache is broadcast to the
batch, and the per-example suffix (`<|user|>...<|assistant|>\\n answer </s>`) attends to it. The
gradient flows through the broadcast back into the prefix, so this is the same loss as running
every full sequence, at a fraction of the cost (`test_training.py` checks the equality).

Which prompt a batch shares is drawn per batch (`prompt_mix`): the full `SYSTEM_PROMPT`, the
template's `DEFAULT_SYSTEM_PROMPT` (what a conversation without a system message is given), one
of the other short prompts a learner might write, or none at all (`<s>` alone, as a raw
completion prompt starts); every `long_prompt_every`-th batch uses `LONG_SYSTEM_PROMPT`. A model
that only ever saw one prompt answers nothing else well (issue #28).

Reproducible: the corpus, tokenizer, initial weights and batch order all follow `--seed`, and
torch/random/numpy are seeded; the same seed and thread count give the same weights.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from engine.training.corpus import (
    DEFAULT_SYSTEM_PROMPT,
    LONG_SYSTEM_PROMPT,
    SHORT_SYSTEM_PROMPTS,
    SYSTEM_PROMPT,
    make_corpus,
)
from engine.training.tokenizer import save_tokenizer, train_tokenizer

DEFAULT_OUT = "engine/models/munuibot-tiny"

# New inquiries (not produced verbatim by the generator) used for the sample answers in the log.
SAMPLE_INQUIRIES = (
    "안녕하세요. 지난주 토요일에 주문한 가습기가 아직도 안 왔어요. 아이 방에 두려고 산 거라 빨리 받고 싶습니다. 언제쯤 도착할까요?",
    "어제 받은 블루투스 스피커가 충전이 전혀 안 됩니다. 교환이나 환불 중에 어떻게 해야 하나요?",
    "적립금이 5,000원 있는데 니트 원피스 결제할 때 왜 안 써지는지 모르겠어요.",
)


@dataclass
class TrainConfig:
    out: str = DEFAULT_OUT
    steps: int = 4000
    examples: int = 70000
    seed: int = 1234
    batch_size: int = 16
    seq_len: int = 384  # max tokens after the system prompt (user turn + answer); longer ones are cut
    threads: int = 2
    vocab_size: int = 6000
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 704
    max_position_embeddings: int = 2048
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 60
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    long_prompt_every: int = 10  # every n-th batch uses LONG_SYSTEM_PROMPT (0: never)
    system_prompt: str | None = None  # one prompt for every batch; None: the mix below
    # Shares of the batches per system prompt: full SYSTEM_PROMPT, the template's default, another
    # short prompt, none at all (ignored when system_prompt is set).
    prompt_mix: tuple[float, float, float, float] = (0.45, 0.25, 0.2, 0.1)
    category_weight: float = 10.0  # loss weight of the `분류: …` line's tokens (1: unweighted)
    eval_examples: int = 64
    samples: int = 3  # sample answers to write into training_log.json (0: none)
    sample_max_new_tokens: int = 300
    log_every: int = 20
    progress: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Data.
# ---------------------------------------------------------------------------------------------


def _render_prefix(tok, system: str) -> str:
    return tok.apply_chat_template([{"role": "system", "content": system}], tokenize=False)


def prefix_tensor(tok, system: str | None) -> torch.Tensor:
    """(1, P) ids of `<s><|system|>\\n{system}<|end|>\\n`, or of `<s>` alone for None."""
    if system is None:
        return torch.tensor([[tok.bos_token_id]])
    return torch.tensor([tok(_render_prefix(tok, system), add_special_tokens=False)["input_ids"]])


def prefix_mix(tok, cfg: "TrainConfig", full: torch.Tensor, shorts: tuple[str, ...]):
    """A function drawing the next batch's shared prefix by `cfg.prompt_mix` (reproducibly)."""
    if not shorts:
        return lambda: full
    default = prefix_tensor(tok, DEFAULT_SYSTEM_PROMPT)
    others = [prefix_tensor(tok, s) for s in shorts if s != DEFAULT_SYSTEM_PROMPT]
    bare = prefix_tensor(tok, None)
    rng = random.Random(cfg.seed + 2)
    kinds = ([full], [default], others, [bare])

    def draw() -> torch.Tensor:
        return rng.choice(rng.choices(kinds, weights=cfg.prompt_mix)[0])
    return draw


def encode_example(tok, user: str, assistant: str, seq_len: int) -> tuple[list[int], int]:
    """Token ids of the suffix `<|user|>\\n{user}<|end|>\\n<|assistant|>\\n{assistant}</s>` and
    the index where the answer starts (the tokens from there on are the training targets)."""
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": user}]
    pre = _render_prefix(tok, "S")
    prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)[len(pre):]
    full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": assistant}], tokenize=False)
    answer = full[len(pre) + len(prompt):]
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    a_ids = tok(answer, add_special_tokens=False)["input_ids"]
    ids = (p_ids + a_ids)[:seq_len]
    return ids, len(p_ids)


def _check_split(tok, system: str, ex: dict, seq_len: int) -> None:
    """Prefix ids + suffix ids must equal the ids of the whole rendered conversation."""
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": ex["user"]},
            {"role": "assistant", "content": ex["assistant"]}]
    whole = tok(tok.apply_chat_template(msgs, tokenize=False), add_special_tokens=False)["input_ids"]
    prefix = tok(_render_prefix(tok, system), add_special_tokens=False)["input_ids"]
    ids, _ = encode_example(tok, ex["user"], ex["assistant"], 10**9)
    if prefix + ids != whole:
        raise AssertionError("chat template does not split cleanly at the system prompt")


def make_batches(lengths: list[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """One epoch of batches: shuffle, sort by length inside windows of 64 batches, shuffle batches."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = batch_size * 64
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start:start + window], key=lambda i: lengths[i])
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return [b for b in batches if len(b) == batch_size] or batches


def collate(encoded: list[tuple[list[int], int]], idx: list[int], pad_id: int):
    width = max(len(encoded[i][0]) for i in idx)
    ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
    labels = torch.full((len(idx), width), -100, dtype=torch.long)
    for row, i in enumerate(idx):
        seq, start = encoded[i]
        ids[row, :len(seq)] = torch.tensor(seq)
        labels[row, start:len(seq)] = torch.tensor(seq[start:])
    return ids, labels


# ---------------------------------------------------------------------------------------------
# Model and loss.
# ---------------------------------------------------------------------------------------------


def build_model(cfg: TrainConfig, tok):
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        use_cache=True,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        max_new_tokens=300,
        do_sample=False,
    )
    return model


def token_losses(model, prefix_ids: torch.Tensor, ids: torch.Tensor, labels: torch.Tensor,
                 weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token losses of the labelled suffix tokens (flat) and their weights, the shared prefix
    computed once.

    prefix_ids: (1, P); ids, labels: (B, S), right-padded, labels -100 where not trained;
    weights: (B, S) aligned with labels, or None for 1 everywhere.
    """
    from transformers.cache_utils import DynamicCache

    batch, width = ids.shape
    cache = DynamicCache(config=model.config)
    model.model(input_ids=prefix_ids, cache=cache, use_cache=True)
    for layer in cache.layers:  # broadcast the prefix's keys/values to the batch (no copy)
        layer.keys = layer.keys.expand(batch, -1, -1, -1)
        layer.values = layer.values.expand(batch, -1, -1, -1)
    p = prefix_ids.shape[1]
    positions = torch.arange(p, p + width).unsqueeze(0).expand(batch, -1)
    # Right padding + causal attention: no real token ever sees a pad, so no mask is needed.
    hidden = model.model(input_ids=ids, cache=cache, position_ids=positions, use_cache=True).last_hidden_state
    # Hidden state at t predicts token t+1; the prefix's last state predicts no labelled token
    # (the suffix starts with <|user|>), so the targets are labels[:, 1:].
    targets = labels[:, 1:]
    keep = targets != -100
    logits = model.lm_head(hidden[:, :-1][keep])
    ce = F.cross_entropy(logits.float(), targets[keep], reduction="none")
    return ce, (torch.ones_like(ce) if weights is None else weights[:, 1:][keep])


def prefix_loss(model, prefix_ids: torch.Tensor, ids: torch.Tensor, labels: torch.Tensor,
                weights: torch.Tensor | None = None) -> torch.Tensor:
    """The (weighted) mean of `token_losses`."""
    ce, w = token_losses(model, prefix_ids, ids, labels, weights)
    return (ce * w).sum() / w.sum()


def full_loss(model, prefix_ids: torch.Tensor, ids: torch.Tensor, labels: torch.Tensor,
              weights: torch.Tensor | None = None) -> torch.Tensor:
    """The same loss as `prefix_loss`, computed the plain way (each row = prefix + suffix)."""
    batch = ids.shape[0]
    seq = torch.cat([prefix_ids.expand(batch, -1), ids], dim=1)
    lab = torch.cat([torch.full_like(prefix_ids.expand(batch, -1), -100), labels], dim=1)
    logits = model(input_ids=seq).logits[:, :-1]
    targets = lab[:, 1:]
    keep = targets != -100
    ce = F.cross_entropy(logits[keep].float(), targets[keep], reduction="none")
    if weights is None:
        return ce.mean()
    w = torch.cat([torch.ones_like(prefix_ids.expand(batch, -1), dtype=weights.dtype), weights], dim=1)[:, 1:][keep]
    return (ce * w).sum() / w.sum()


def category_weights(encoded: list[tuple[list[int], int]], idx: list[int], cat_lens: list[int],
                     weight: float) -> torch.Tensor:
    """(B, S) weights aligned with `collate`'s labels: `weight` on the tokens of each answer's
    `분류: …` line, 1 elsewhere. The category is a handful of an answer's ~90 tokens; unweighted,
    the model learns the answer's wording long before it learns which category an unfamiliar
    inquiry belongs to (issue #28)."""
    width = max(len(encoded[i][0]) for i in idx)
    w = torch.ones((len(idx), width))
    for row, i in enumerate(idx):
        start = encoded[i][1]
        w[row, start:start + cat_lens[i]] = weight
    return w


def category_tokens(tok, assistant: str) -> int:
    """How many of the answer's tokens spell its first line, `분류: …` and its newline."""
    first = assistant.split("\n", 1)[0] + "\n"
    return len(tok(first, add_special_tokens=False)["input_ids"])


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


@torch.no_grad()
def generate_answer(model, tok, user: str, system: str | None = SYSTEM_PROMPT, max_new_tokens: int = 300) -> str:
    """Greedy answer; `system=None` sends no system message (the template supplies its default)."""
    msgs = ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": user}]
    enc = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens)
    return tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


# ---------------------------------------------------------------------------------------------
# Training.
# ---------------------------------------------------------------------------------------------


def _as_config(cfg: TrainConfig | argparse.Namespace | dict | None) -> TrainConfig:
    if cfg is None:
        return TrainConfig()
    if isinstance(cfg, TrainConfig):
        return cfg
    data = vars(cfg) if isinstance(cfg, argparse.Namespace) else dict(cfg)
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = set(data) - names
    if unknown:
        raise TypeError(f"unknown training options: {sorted(unknown)}")
    return TrainConfig(**data)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def train(cfg: TrainConfig | argparse.Namespace | dict | None = None) -> dict[str, Any]:
    """Build corpus, tokenizer and model, train, save everything into `cfg.out`; returns the log."""
    import transformers
    from tqdm.auto import tqdm

    cfg = _as_config(cfg)
    started = time.time()
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, cfg.threads))
    try:
        seed_everything(cfg.seed)
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        system = SYSTEM_PROMPT if cfg.system_prompt is None else cfg.system_prompt
        long_system = LONG_SYSTEM_PROMPT if cfg.system_prompt is None else None
        shorts = SHORT_SYSTEM_PROMPTS if cfg.system_prompt is None else ()

        # 1. Corpus and tokenizer.
        corpus = make_corpus(cfg.examples, seed=cfg.seed, system=system)
        texts = [system, *shorts] + ([long_system] if long_system else [])
        texts += [f"{ex['user']}\n{ex['assistant']}" for ex in corpus]
        tok = train_tokenizer(texts, vocab_size=cfg.vocab_size)
        for ex in corpus[:20]:
            _check_split(tok, system, ex, cfg.seq_len)
            ids, start = encode_example(tok, ex["user"], ex["assistant"], 10**9)
            first = tok(ex["assistant"].split("\n", 1)[0] + "\n", add_special_tokens=False)["input_ids"]
            if ids[start:start + len(first)] != first:
                raise AssertionError("the answer's 분류 line does not tokenize on its own")
        kept = [(encode_example(tok, ex["user"], ex["assistant"], cfg.seq_len), category_tokens(tok, ex["assistant"]))
                for ex in corpus]
        kept = [(e, n) for e, n in kept if e[1] < len(e[0])]  # drop any whose answer was cut off entirely
        if not kept:
            raise ValueError("seq_len leaves no answer tokens to train on")
        encoded, cat_lens = [e for e, _ in kept], [n for _, n in kept]
        lengths = [len(ids) for ids, _ in encoded]
        prefix_ids = prefix_tensor(tok, system)
        draw_prefix = prefix_mix(tok, cfg, prefix_ids, shorts)
        long_prefix_ids = None
        if long_system and cfg.long_prompt_every > 0:
            long_prefix_ids = torch.tensor(
                [tok(_render_prefix(tok, long_system), add_special_tokens=False)["input_ids"]])
            if long_prefix_ids.shape[1] + cfg.seq_len > cfg.max_position_embeddings:
                long_prefix_ids = None
        if prefix_ids.shape[1] + cfg.seq_len > cfg.max_position_embeddings:
            raise ValueError("system prompt + seq_len exceed max_position_embeddings")

        # 2. Model.
        seed_everything(cfg.seed)
        model = build_model(cfg, tok)
        model.train()
        n_params = sum(p.numel() for p in model.parameters())
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8,
        )

        # 3. Loop.
        rng = random.Random(cfg.seed)
        batches: list[list[int]] = []
        losses: list[float] = []
        curve: list[list[float]] = []
        tokens_seen = 0
        bar = tqdm(range(cfg.steps), desc="munuibot", disable=not cfg.progress, mininterval=5.0,
                   dynamic_ncols=False, ncols=100, file=sys.stderr)
        for step in bar:
            if not batches:
                batches = make_batches(lengths, cfg.batch_size, rng)
            idx = batches.pop()
            ids, labels = collate(encoded, idx, tok.pad_token_id)
            use_long = long_prefix_ids is not None and cfg.long_prompt_every > 0 \
                and step % cfg.long_prompt_every == cfg.long_prompt_every - 1
            pre = long_prefix_ids if use_long else draw_prefix()
            lr = lr_at(step, cfg)
            for group in opt.param_groups:
                group["lr"] = lr
            ce, w = token_losses(model, pre, ids, labels,
                                 category_weights(encoded, idx, cat_lens, cfg.category_weight))
            loss = (ce * w).sum() / w.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            value = float(ce.detach().mean())  # the plain mean, comparable across weightings
            if not math.isfinite(value):
                raise FloatingPointError(f"loss became {value} at step {step}")
            losses.append(value)
            tokens_seen += int((labels != -100).sum())
            if step % cfg.log_every == 0 or step == cfg.steps - 1:
                curve.append([step, round(sum(losses[-cfg.log_every:]) / len(losses[-cfg.log_every:]), 4)])
                bar.set_postfix(loss=f"{curve[-1][1]:.3f}", lr=f"{lr:.1e}")
        bar.close()
        train_seconds = time.time() - started

        # 4. Held-out loss and samples.
        model.eval()
        eval_loss = None
        if cfg.eval_examples > 0:
            held = make_corpus(cfg.eval_examples, seed=cfg.seed + 1, system=system)
            enc = [encode_example(tok, ex["user"], ex["assistant"], cfg.seq_len) for ex in held]
            enc = [e for e in enc if e[1] < len(e[0])]
            total, count = 0.0, 0
            with torch.no_grad():
                for start in range(0, len(enc), cfg.batch_size):
                    idx = list(range(start, min(len(enc), start + cfg.batch_size)))
                    ids, labels = collate(enc, idx, tok.pad_token_id)
                    n = int((labels[:, 1:] != -100).sum())
                    total += float(prefix_loss(model, prefix_ids, ids, labels)) * n
                    count += n
            eval_loss = round(total / max(1, count), 4)
        samples = []
        for user in SAMPLE_INQUIRIES[:cfg.samples]:
            samples.append({"user": user,
                            "answer": generate_answer(model, tok, user, None, cfg.sample_max_new_tokens),
                            "answer_with_system_prompt": generate_answer(model, tok, user, system,
                                                                         cfg.sample_max_new_tokens)})

        # 5. Save.
        model.save_pretrained(out)
        os.chmod(out / "model.safetensors", 0o644)
        save_tokenizer(tok, str(out))
        tail = losses[-cfg.log_every:] if losses else [float("nan")]
        log = {
            "model": out.name,
            "steps": cfg.steps,
            "examples": cfg.examples,
            "corpus_size": len(corpus),
            "trained_examples": len(encoded),
            "seed": cfg.seed,
            "batch_size": cfg.batch_size,
            "seq_len": cfg.seq_len,
            "threads": cfg.threads,
            "vocab_size": len(tok),
            "parameters": n_params,
            "first_loss": round(losses[0], 4) if losses else None,
            "final_loss": round(sum(tail) / len(tail), 4),
            "last_step_loss": round(losses[-1], 4) if losses else None,
            "eval_loss": eval_loss,
            "train_seconds": round(train_seconds, 1),
            "seconds": round(time.time() - started, 1),
            "trained_tokens": tokens_seen,
            "system_prompt_tokens": int(prefix_ids.shape[1]),
            "long_system_prompt_tokens": int(long_prefix_ids.shape[1]) if long_prefix_ids is not None else None,
            "loss_curve": curve,
            "samples": samples,
            "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("system_prompt", "extra")},
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        }
        (out / "training_log.json").write_text(json.dumps(log, ensure_ascii=False, indent=2) + "\n",
                                               encoding="utf-8")
        return log
    finally:
        torch.set_num_threads(prev_threads)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    d = TrainConfig()
    p = argparse.ArgumentParser(prog="python -m engine.training.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=d.out, help="output directory (default: %(default)s)")
    p.add_argument("--steps", type=int, default=d.steps, help="optimizer steps (default: %(default)s)")
    p.add_argument("--examples", type=int, default=d.examples, help="generated examples (default: %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed for data, init and order (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="default: %(default)s")
    p.add_argument("--seq-len", type=int, default=d.seq_len,
                   help="max tokens after the system prompt per example (default: %(default)s)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads (default: %(default)s)")
    p.add_argument("--vocab-size", type=int, default=d.vocab_size, help="BPE vocabulary (default: %(default)s)")
    p.add_argument("--hidden-size", type=int, default=d.hidden_size, help="default: %(default)s")
    p.add_argument("--num-layers", type=int, default=d.num_layers, help="default: %(default)s")
    p.add_argument("--num-heads", type=int, default=d.num_heads, help="default: %(default)s")
    p.add_argument("--num-kv-heads", type=int, default=d.num_kv_heads, help="default: %(default)s")
    p.add_argument("--intermediate-size", type=int, default=d.intermediate_size, help="default: %(default)s")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (default: %(default)s)")
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help="default: %(default)s")
    p.add_argument("--category-weight", type=float, default=d.category_weight,
                   help="loss weight of the answer's 분류 line, 1 = none (default: %(default)s)")
    p.add_argument("--long-prompt-every", type=int, default=d.long_prompt_every,
                   help="every n-th batch uses LONG_SYSTEM_PROMPT, 0 = never (default: %(default)s)")
    p.add_argument("--samples", type=int, default=d.samples, help="sample answers to log (default: %(default)s)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(argv)
    log = train(args)
    print(f"saved to {args.out}: {log['parameters']:,} parameters, {log['steps']} steps, "
          f"final loss {log['final_loss']}, eval loss {log['eval_loss']}, {log['train_seconds']:.0f} s")
    for s in log["samples"]:
        print(f"\n[문의] {s['user']}\n{s['answer']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
