"""The munuibot tokenizer: byte-level BPE trained on the generated corpus, with a chat template.

Byte-level BPE never meets an unknown character: a Hangul syllable it has not merged falls back to
its three UTF-8 bytes. Input is NFC-normalised first, so decomposed Hangul (as some systems type
it) becomes the same syllables the merges were learnt on.

The chat format (rendered by `CHAT_TEMPLATE`, stored as `chat_template` in tokenizer_config.json)::

    <s><|system|>\\n{system}<|end|>\\n<|user|>\\n{user}<|end|>\\n<|assistant|>\\n{answer}</s>

An assistant turn ends with the eos token `</s>`, so generation stops there. A conversation that
starts without a system message gets `DEFAULT_SYSTEM_PROMPT` as its system turn, as Qwen2.5's
template gives its own: the README's curl, the openai client's default and a learner's script
send one user message, and the model is trained on that shape too (issue #28).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from engine.training.corpus import DEFAULT_SYSTEM_PROMPT

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
SPECIAL_TOKENS = (PAD, BOS, EOS, *ROLE_TOKENS)  # ids 0..6, in this order

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if not messages or messages[0]['role'] != 'system' %}"
    "{{ '<|system|>\\n' + " + json.dumps(DEFAULT_SYSTEM_PROMPT, ensure_ascii=False) + " + '<|end|>\\n' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% else %}{{ '<|end|>\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 6000, min_frequency: int = 2):
    """Train byte-level BPE on `texts`; returns a transformers fast tokenizer with the chat template."""
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        extra_special_tokens=list(ROLE_TOKENS),
        model_max_length=2048,
        padding_side="left",  # batched generation pads on the left
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def save_tokenizer(tokenizer, out_dir: str) -> None:
    """tokenizer.json + tokenizer_config.json, the chat template inside the latter (no .jinja file)."""
    tokenizer.save_pretrained(out_dir, save_jinja_files=False)
