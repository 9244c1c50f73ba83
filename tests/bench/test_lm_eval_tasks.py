"""The lm-eval tasks in bench/lm_eval_tasks stay in step with the shipped model: the multiple-choice
prompt is the chat endpoint's own prompt, the choices are the model's categories, and every
labelled inquiry has one of them."""
import json
from pathlib import Path

import yaml
from transformers import AutoTokenizer

from bench.lm_eval_tasks import utils
from engine.training.corpus import CATEGORIES

TASKS = Path(__file__).resolve().parents[2] / "bench" / "lm_eval_tasks"


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!function", lambda loader, node: ("function", loader.construct_scalar(node)))


def test_the_multiple_choice_prompt_is_the_chat_endpoints_prompt():
    tokenizer = AutoTokenizer.from_pretrained(utils.MODEL)
    doc = {"text": "환불 언제 들어와요?", "category": "환불/반품"}
    chat = tokenizer.apply_chat_template([{"role": "user", "content": doc["text"]}], add_generation_prompt=True, tokenize=False)
    assert utils.chat_prompt(doc) == chat + "분류:"
    assert utils.categories(doc) == list(CATEGORIES) and utils.category_index(doc) == CATEGORIES.index("환불/반품")


def test_both_tasks_read_the_hand_written_set_whose_labels_are_the_models_categories():
    for name in ("munuibot_category_mc.yaml", "munuibot_category_gen.yaml"):
        task = yaml.load((TASKS / name).read_text(encoding="utf-8"), Loader=_Loader)
        data = Path(__file__).resolve().parents[2] / task["dataset_kwargs"]["data_files"]["test"]
        labels = {json.loads(line)["category"] for line in data.read_text(encoding="utf-8").splitlines() if line.strip()}
        assert labels == set(CATEGORIES), name
