"""The lesson's questions as a learner meets them (issue #9): the key is not given away by being
the longest option, and nothing teaches a preemption log line as vLLM V1's signal."""
import re

import pytest

from courseapp.quizzes.models import Question


def texts(q) -> list[str]:
    """Everything a learner can read on or after the card."""
    out = [q.prompt, q.explanation, q.hint, *q.choice_feedback.values()]
    for group in ("choices", "items", "left", "right"):
        out += [e["text"] for e in q.public.get(group, [])]
    out += q.key.get("answers", []) + [q.key.get("model_answer", "")]
    return [t for t in out if t]


def key_texts(q) -> list[str]:
    """The options a learner is told are right."""
    if q.type == "single":
        return [c["text"] for c in q.public["choices"] if c["id"] == q.key["answer"]]
    if q.type == "multi":
        return [c["text"] for c in q.public["choices"] if c["id"] in q.key["answer"]]
    if q.type == "ordering":
        return [i["text"] for i in q.public["items"]]
    if q.type == "matching":
        rights = set(q.key["pairs"].values())
        return [r["text"] for r in q.public["right"] if r["id"] in rights]
    return [*q.key.get("answers", []), q.key.get("model_answer", "")]


@pytest.mark.django_db
def test_the_key_is_not_usually_the_longest_option():
    singles = list(Question.objects.filter(type="single"))
    assert len(singles) >= 10
    longest = []
    for q in singles:
        key = next(len(c["text"]) for c in q.public["choices"] if c["id"] == q.key["answer"])
        if all(key > len(c["text"]) for c in q.public["choices"] if c["id"] != q.key["answer"]):
            longest.append(q.slug)
    assert len(longest) <= len(singles) // 2, longest


@pytest.mark.django_db
def test_every_multi_select_has_right_and_wrong_options():
    """With an empty key, ticking nothing would be the answer; with all options right, ticking
    everything would be: neither tests a decision."""
    for q in Question.objects.filter(type="multi"):
        assert 0 < len(q.key["answer"]) < len(q.key["choices"]), q.slug


V0_LOG = re.compile(r"PreemptionMode|preempted by|Sequence group", re.IGNORECASE)
LOG_AS_SIGNAL = re.compile(r"(로그|log).{0,30}(preempt|선점)|(preempt|선점).{0,30}(로그|log)", re.IGNORECASE)


@pytest.mark.django_db
def test_no_question_teaches_a_preemption_log_line_as_the_v1_signal():
    for q in Question.objects.all():
        for text in key_texts(q):
            if LOG_AS_SIGNAL.search(text):
                # a right option may mention the log only to say V1 leaves it silent
                assert re.search(r"남기지 않|찍히지 않|조용|없다고 단정", text), (q.slug, text)
        for text in texts(q):
            if V0_LOG.search(text):
                assert "V0" in text, (q.slug, text)


@pytest.mark.django_db
def test_the_v1_preemption_signals_are_what_the_preemption_items_teach():
    symptoms = Question.objects.get(slug="preemption-symptoms")
    right = " ".join(key_texts(symptoms))
    for metric in ("vllm:num_preemptions_total", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert metric in right
    log_choice = next(c["id"] for c in symptoms.public["choices"] if "로그" in c["text"])
    assert log_choice not in symptoms.key["answer"]
    sequence = " ".join(key_texts(Question.objects.get(slug="preemption-sequence")))
    assert "맨 앞" in sequence and "뒤로" not in sequence  # V1 puts it at the front of the queue
