"""The torch-free prompt count (engine/chat_prompt.py) agrees with transformers' own chat
template and tokenizer on the shipped model, so the web process can check knobs without torch."""
import pytest
from transformers import AutoTokenizer

from engine.chat_prompt import chat_prompt_ids
from engine.config import EngineConfig
from engine.training.corpus import SYSTEM_PROMPT

CHATS = [
    [{"role": "user", "content": "배송이 언제 오나요?"}],
    [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "환불은 어떻게 하나요?"}],
    [{"role": "system", "content": "짧게"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "KV cache, PagedAttention 😀 \n 줄바꿈"}],
]


@pytest.mark.parametrize("messages", CHATS)
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_counts_what_transformers_counts(messages, generation_prompt):
    model = EngineConfig().model
    reference = AutoTokenizer.from_pretrained(model, local_files_only=True).apply_chat_template(
        messages, add_generation_prompt=generation_prompt, tokenize=True)
    reference = reference["input_ids"] if hasattr(reference, "keys") else reference
    assert chat_prompt_ids(model, messages, add_generation_prompt=generation_prompt) == list(reference)
