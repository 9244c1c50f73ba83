"""The content loader: idempotent, validating, and faithful to the files."""
import shutil

import pytest
from django.conf import settings

from courseapp.learners.models import Learner
from courseapp.lessons.loader import ContentError, content_load
from courseapp.lessons.models import GlossaryTerm, Lesson, Objective, Section
from courseapp.quizzes.models import Attempt, Question

MODELS = [Lesson, Objective, Section, GlossaryTerm, Question]


def snapshot():
    return {m.__name__: sorted(m.objects.values_list(*[f.attname for f in m._meta.concrete_fields if f.attname != "updated_at"])) for m in MODELS}


@pytest.mark.django_db
def test_loading_twice_leaves_the_same_rows():
    before = snapshot()
    content_load(root=settings.CONTENT_DIR)
    content_load(root=settings.CONTENT_DIR)
    assert snapshot() == before


@pytest.mark.django_db
def test_reload_keeps_learner_progress():
    q = Question.objects.first()
    learner = Learner.objects.create()
    Attempt.objects.create(learner=learner, question=q, response={}, score=1.0, nonce="n")
    content_load(root=settings.CONTENT_DIR)
    assert Attempt.objects.get(learner=learner).question_id == q.pk


@pytest.mark.django_db
def test_lesson_21_has_what_the_issue_asks_for(lesson):
    assert lesson.available and lesson.day == 3 and "추론 엔진" in lesson.layer
    assert [o.slug for o in lesson.objectives.all()] == [
        "kv-waste", "paged-attention", "static-vs-continuous", "throughput-not-latency", "prefix-caching", "preemption",
    ]
    slugs = [s.slug for s in lesson.sections.all()]
    assert slugs == ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "appendix-a", "appendix-b", "appendix-c"]
    anchors = {a for s in lesson.sections.all() for a in s.anchors}
    for anchor in ["s1-1", "s1-2", "s2-1", "s2-2", "s2-3", "s3-1", "s3-2", "s3-3", "s4-1", "s4-2", "s4-3"]:
        assert anchor in anchors
    assert not Lesson.objects.get(number=20).available and not Lesson.objects.get(number=22).available


@pytest.mark.django_db
def test_question_bank_covers_every_objective_and_type(lesson):
    questions = list(lesson.questions.all())
    assert len(questions) >= 24
    for objective in lesson.objectives.all():
        assert objective.questions.count() >= 4, objective.slug
    assert {q.type for q in questions} == {"single", "multi", "numeric", "short", "ordering", "matching"}


@pytest.mark.django_db
def test_glossary_has_the_seeds_definitions(lesson):
    terms = {t.term: t for t in lesson.glossary.all()}
    for term in ["PagedAttention", "가상 메모리", "페이징", "연속 배칭", "프리픽스 캐싱", "선점", "스왑", "무상태"]:
        assert term in terms, term
    assert "구별된다" in terms["PagedAttention"].definition


@pytest.fixture
def content_copy(tmp_path):
    root = tmp_path / "content"
    shutil.copytree(settings.CONTENT_DIR, root)
    return root


@pytest.mark.django_db
def test_a_question_citing_a_missing_section_is_refused_with_its_id(content_copy):
    path = content_copy / "lesson21" / "questions.yaml"
    text = path.read_text(encoding="utf-8")
    first_anchor = text.split("section: ", 1)[1].split("\n", 1)[0]
    path.write_text(text.replace(f"section: {first_anchor}", "section: s99-9", 1), encoding="utf-8")
    with pytest.raises(ContentError, match="s99-9"):
        content_load(root=content_copy)


@pytest.mark.django_db
def test_a_section_without_front_matter_is_refused(content_copy):
    (content_copy / "lesson21" / "sections" / "99-broken.md").write_text("# no front matter\n", encoding="utf-8")
    with pytest.raises(ContentError, match="front matter"):
        content_load(root=content_copy)


@pytest.mark.django_db
def test_a_section_linking_a_scene_that_does_not_exist_is_refused_at_load(content_copy):
    path = next((content_copy / "lesson21" / "sections").glob("05-*.md"))
    path.write_text(path.read_text(encoding="utf-8") + "\n[[scene no-such-scene]]\n", encoding="utf-8")
    with pytest.raises(ContentError, match="no-such-scene"):
        content_load(root=content_copy)


@pytest.mark.django_db
def test_a_failed_load_changes_nothing(content_copy):
    """Edits the load reaches before it fails (the lesson's title, a section's title) are rolled
    back with it: without the loader's transaction they would already be written."""
    before = snapshot()
    lesson_yaml = content_copy / "lesson21" / "lesson.yaml"
    lesson_yaml.write_text(lesson_yaml.read_text(encoding="utf-8").replace(
        "title: vLLM이 동시 요청을 견디는 이유", "title: 바뀐 제목", 1), encoding="utf-8")
    section = sorted((content_copy / "lesson21" / "sections").glob("*.md"))[0]
    section.write_text(section.read_text(encoding="utf-8").replace("\ntitle: ", "\ntitle: 바뀐 절 ", 1), encoding="utf-8")
    glossary = content_copy / "lesson21" / "glossary.yaml"
    glossary.write_text(glossary.read_text(encoding="utf-8") + "\n- slug: broken\n  term: x\n", encoding="utf-8")
    # both edits took: the files really differ from what the database holds
    assert "바뀐 제목" in lesson_yaml.read_text(encoding="utf-8") and "바뀐 절" in section.read_text(encoding="utf-8")

    with pytest.raises(ContentError, match=r"glossary\.yaml: glossary entry 'broken' needs .*'section'"):
        content_load(root=content_copy)
    assert snapshot() == before
    assert Lesson.objects.get(number=21).title == "vLLM이 동시 요청을 견디는 이유"


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["section", "genus"])
def test_a_glossary_entry_missing_a_field_is_refused_naming_the_file_the_entry_and_the_field(content_copy, field):
    path = content_copy / "lesson21" / "glossary.yaml"
    text = path.read_text(encoding="utf-8")
    first = text.index("- slug: kv-cache")
    entry_end = text.index("\n\n", first)
    entry = "\n".join(line for line in text[first:entry_end].split("\n") if not line.lstrip().startswith(f"{field}:"))
    path.write_text(text[:first] + entry + text[entry_end:], encoding="utf-8")
    with pytest.raises(ContentError) as caught:
        content_load(root=content_copy)
    assert str(path) in str(caught.value) and "'kv-cache'" in str(caught.value) and f"'{field}'" in str(caught.value)
