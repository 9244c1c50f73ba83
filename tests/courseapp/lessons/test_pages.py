"""Lesson pages: anchors, course map, glossary popovers, diagrams, prompts."""
import pytest
from bs4 import BeautifulSoup
from django.urls import reverse

SUB_ANCHORS = ["s1-1", "s1-2", "s2-1", "s2-2", "s2-3", "s3-1", "s3-2", "s3-3", "s4-1", "s4-2", "s4-3"]


def soup(client, url):
    response = client.get(url)
    assert response.status_code == 200, url
    return BeautifulSoup(response.content, "html.parser")


@pytest.mark.django_db
def test_every_section_page_carries_its_stable_anchors(client, lesson):
    found = set()
    for section in lesson.sections.all():
        page = soup(client, section.get_absolute_url())
        assert page.find(id=section.slug) is not None
        found |= {a for a in SUB_ANCHORS if page.find(id=a) is not None}
    assert found == set(SUB_ANCHORS)


@pytest.mark.django_db
def test_lesson_page_shows_the_course_map_keywords_and_six_objectives(client, lesson):
    page = soup(client, lesson.get_absolute_url())
    course_map = page.select_one(".course-map")
    assert "3일차" in course_map.get_text() and "③추론 엔진 층의 내부" in course_map.get_text()
    neighbours = {li["data-lesson"]: li for li in course_map.select(".map-lesson")}
    assert set(neighbours) == {"20", "21", "22"}
    for n in ("20", "22"):
        assert "unavailable" in neighbours[n]["class"]
        assert neighbours[n].select_one(".badge") is not None
    assert [k.get_text() for k in page.select(".keyword")] == ["PagedAttention", "KV Cache", "Continuous Batching", "동시 요청 처리"]
    assert len(page.select(".objectives .mastery")) == 6


def test_the_lessons_address_without_a_number_leads_to_the_course_home(client):
    response = client.get("/lessons/")
    assert response.status_code == 302 and response["Location"] == reverse("home")


@pytest.mark.django_db
def test_unavailable_lessons_are_not_served(client):
    assert client.get(reverse("lessons:lesson", args=[22])).status_code == 404


@pytest.mark.django_db
def test_glossary_terms_become_popovers_outside_headings_and_widgets(client):
    page = soup(client, reverse("lessons:section", args=[21, "s2"]))
    terms = page.select(".lesson-body .gloss-term")
    assert terms, "glossary terms are linked"
    for term in terms:
        tip = page.find(id=term["aria-describedby"])
        assert tip is not None and tip["role"] == "tooltip"
        assert "구별된다" in tip.get_text()
        assert term.find_parent(["h1", "h2", "h3", "figure"]) is None
        assert term.find_parent(attrs={"data-calculator": True}) is None
        assert term.find_parent(class_="question") is None
    ids = [t["aria-describedby"] for t in terms]
    assert len(ids) == len(set(ids))


@pytest.mark.django_db
@pytest.mark.parametrize(
    "slug,figure", [("s1", "fig-1-2"), ("s2", "fig-2-1"), ("s2", "fig-2-2"), ("s2", "fig-2-3"), ("s3", "fig-3-2")]
)
def test_ascii_diagrams_are_redrawn_as_accessible_figures(client, slug, figure):
    page = soup(client, reverse("lessons:section", args=[21, slug]))
    fig = page.find("figure", id=figure)
    assert fig is not None, figure
    assert fig.find("figcaption") is not None
    for svg in fig.find_all("svg"):
        assert svg.get("role") == "img" or svg.get("aria-hidden") == "true"
        if svg.get("role") == "img":
            assert svg.find("title") is not None


@pytest.mark.django_db
def test_static_vs_continuous_timeline_is_a_real_table(client):
    page = soup(client, reverse("lessons:section", args=[21, "s3"]))
    tables = page.find("figure", id="fig-3-2").find_all("table")
    assert len(tables) == 2
    assert all(t.find("caption") is not None for t in tables)


def lesson_table_after(heading):
    """The first table of the lesson text after a heading (not one inside a figure)."""
    return next(t for t in heading.find_all_next("table") if t.find_parent("figure") is None)


@pytest.mark.django_db
def test_section_2_2_has_the_correspondence_table_ending_in_swap(client):
    page = soup(client, reverse("lessons:section", args=[21, "s2"]))
    table = lesson_table_after(page.find(id="s2-2"))
    rows = [r.get_text(" ", strip=True) for r in table.select("tbody tr")]
    assert any("프로세스" in r and "요청" in r for r in rows)
    assert any("페이지 테이블" in r and "블록 테이블" in r for r in rows)
    assert "스왑" in rows[-1] and "선점" in rows[-1]


@pytest.mark.django_db
def test_section_4_3_has_the_prompt_placement_table(client):
    page = soup(client, reverse("lessons:section", args=[21, "s4"]))
    table = lesson_table_after(page.find(id="s4-3"))
    assert "시각" in table.get_text()


@pytest.mark.django_db
def test_section_6_has_the_checklist_and_appendix_c_a_prompt_to_copy(client):
    s6 = soup(client, reverse("lessons:section", args=[21, "s6"]))
    assert len(s6.find(id="s6-3").find_next("ul").find_all("li")) >= 6
    c = soup(client, reverse("lessons:section", args=[21, "appendix-c"]))
    prompt = c.select_one("pre > code.language-prompt")
    assert prompt is not None and "6문제" in prompt.get_text()


@pytest.mark.django_db
def test_appendix_a_lists_every_question_grouped_by_objective(client, lesson):
    page = soup(client, reverse("lessons:section", args=[21, "appendix-a"]))
    groups = page.select(".selfcheck-group")
    assert [g["data-objective"] for g in groups] == [o.slug for o in lesson.objectives.all()]
    assert len(page.select(".selfcheck .question")) == lesson.questions.count()


@pytest.mark.django_db
def test_glossary_page_links_each_term_to_where_it_is_defined(client, lesson):
    page = soup(client, reverse("lessons:glossary", args=[21]))
    entry = page.find(id="g-paged-attention")
    assert "#s2-1" in entry.select_one("a.gloss-source")["href"]
