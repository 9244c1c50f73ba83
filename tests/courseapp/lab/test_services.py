"""The smallest pool the lab allows must hold experiment 3's longest request whole, counted by the
served model's own tokenizer: a new model or a longer system prompt moves it (CI once failed when
the count was a constant and the prompt grew past it)."""
from datetime import datetime

from django.conf import settings
from transformers import AutoTokenizer

from courseapp.lab import services
from courseapp.lab.experiments import shared_prefix_messages
from engine.config import EngineConfig


def test_the_smallest_pool_holds_experiment_3s_longest_request_as_the_model_tokenizes_it():
    tokenizer = AutoTokenizer.from_pretrained(EngineConfig().model, local_files_only=True)
    stamp = f"현재 시각: {datetime(2088, 8, 28, 18, 58, 59):%Y-%m-%d %H:%M:%S}\n"
    messages = shared_prefix_messages("[세션 80808080]\n", stamp)
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert len(prompt) > 1000  # the long system prompt is in it
    assert len(prompt) + settings.LAB_MAX_TOKENS <= services.min_num_blocks() * services.BLOCK_SIZE
