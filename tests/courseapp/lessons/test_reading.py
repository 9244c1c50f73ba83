"""Reading aids (issue #9): one glossary link per term per section, demo scene links, the
table of contents with the section's subsections, the progress line, and lang="ko" on the
Korean lesson text in the English UI."""
import re

import pytest
from bs4 import BeautifulSoup
from django.urls import reverse
from django.utils import translation

from courseapp.demo.presets import PRESETS
from courseapp.lessons import rendering
from courseapp.lessons.outline import outline_get


def soup(client, url):
    response = client.get(url)
    assert response.status_code == 200, url
    return BeautifulSoup(response.content, "html.parser")


def in_english(client):
    client.post(reverse("set_language"), {"language": "en", "next": "/"})


@pytest.mark.django_db
def test_each_term_is_linked_once_per_section_at_its_first_plain_occurrence(client, lesson):
    terms = list(lesson.glossary.all())
    pattern, by_alias = rendering._gloss_pattern(terms)
    for section in lesson.sections.all():
        body = soup(client, section.get_absolute_url()).select_one(".lesson-body")
        linked = [a["data-term"] for a in body.select(".gloss-term")]
        assert len(linked) == len(set(linked)), (section.slug, linked)
        for a in body.select(".gloss-term"):
            # No earlier occurrence of the same term in running text was left unlinked.
            before = "".join(
                str(t) for t in a.find_all_previous(string=True)
                if t.find_parent(class_="lesson-body") is body and t.find_parent(["p", "li", "td", "th", "dd"])
                and not t.find_parent(["h1", "h2", "h3", "h4", "a", "code", "pre", "figure", "label", "summary"])
                and not t.find_parent(class_=["gloss-tip", "diagram", "question", "scene-link"])
                and not t.find_parent(attrs={"data-calculator": True})
            )
            assert not any(by_alias[m.group(0)].slug == a["data-term"] for m in pattern.finditer(before)), (section.slug, a["data-term"])
    s2 = soup(client, reverse("lessons:section", args=[21, "s2"])).select(".lesson-body .gloss-term")
    assert 0 < len(s2) <= len(terms)  # was 51 links: 76 Tab presses before the first question


@pytest.mark.django_db
def test_a_scene_directive_becomes_a_link_to_its_demo_scene(lesson):
    section = lesson.sections.get(slug="s3")
    section.body += "\n\n[[scene static-vs-continuous]]\n"
    html = BeautifulSoup(rendering.render_section(section, []), "html.parser")
    block = html.select_one(".scene-link[data-scene=static-vs-continuous]")
    link = block.find("a")
    assert link["href"] == "/demo/?preset=static-vs-continuous"
    assert str(PRESETS["static-vs-continuous"]["title"]) in link.get_text()
    with translation.override("ko"):
        words = translation.gettext("See it on the engine")
        assert words in BeautifulSoup(rendering.render_section(section, []), "html.parser").select_one(".scene-link a").get_text()
    assert "[[scene" not in str(html)


@pytest.mark.django_db
@pytest.mark.parametrize("line", ["[[scene no-such-scene]]", "[[scene Reservation]]", "[[secne reservation]]"])
def test_an_unknown_scene_or_directive_fails_loudly(lesson, line):
    section = lesson.sections.get(slug="s1")
    section.body += f"\n\n{line}\n"
    assert rendering.directive_errors(section.body)
    with pytest.raises(rendering.DirectiveError):
        rendering.render_section(section, [])


@pytest.mark.django_db
def test_the_lessons_own_directives_are_all_known(lesson):
    for section in lesson.sections.all():
        assert rendering.directive_errors(section.body) == [], section.slug


@pytest.mark.django_db
def test_every_scene_is_linked_from_the_section_it_illustrates(client, lesson):
    outline = outline_get(number=21)
    linked = {}
    for section in lesson.sections.all():
        for block in soup(client, section.get_absolute_url()).select(".lesson-body .scene-link"):
            name = re.fullmatch(r"/demo/\?preset=([a-z-]+)", block.find("a")["href"]).group(1)
            assert name in PRESETS and block["data-scene"] == name
            assert block.select_one(".gloss-term") is None  # the link's own words are not glossed
            linked[name] = section.get_absolute_url()
    for name, preset in PRESETS.items():
        assert linked.get(name) == outline.anchor_pages[preset["section"]], name


@pytest.mark.django_db
def test_the_table_of_contents_lists_the_current_sections_subsections(client, lesson):
    page = soup(client, reverse("lessons:section", args=[21, "s2"]))
    current = page.select_one(".toc li.current")
    assert current["data-section"] == "s2"
    assert current.select_one(".toc-row a")["aria-current"] == "page"
    subs = current.select(".toc-sub a")
    assert [a["href"] for a in subs] == ["#s2-1", "#s2-2", "#s2-3"]
    assert subs[0].get_text(strip=True).startswith("2.1")
    for a in subs:
        assert page.find(id=a["href"][1:]) is not None
    assert len(page.select(".toc-sub")) == 1, "only the current section is opened"


@pytest.mark.django_db
def test_the_sidebar_comes_before_the_text_so_tab_order_is_visual_order(client):
    page = soup(client, reverse("lessons:section", args=[21, "s3"]))
    layout = page.select_one(".lesson-layout")
    assert [c.name for c in layout.find_all(recursive=False)] == ["aside", "article"]


@pytest.mark.django_db
def test_the_progress_line_says_which_section_of_how_many_and_how_many_read(client, lesson):
    sections = list(lesson.sections.all())
    for slug in ("s0", "s1"):
        client.post(reverse("lessons:section-read", args=[21, slug]))
    in_english(client)
    line = soup(client, reverse("lessons:section", args=[21, "s2"])).select_one("[data-testid=section-progress]")
    assert line.get_text(strip=True) == f"Section 3 of {len(sections)} · 2 read"
    last = sections[-1]
    line = soup(client, last.get_absolute_url()).select_one("[data-testid=section-progress]")
    assert line.get_text(strip=True).startswith(f"Section {len(sections)} of {len(sections)}")


@pytest.mark.django_db
@pytest.mark.parametrize("url_name,args", [
    ("lessons:section", [21, "s2"]), ("lessons:section", [21, "appendix-a"]), ("lessons:glossary", [21]),
    ("lessons:lesson", [21]), ("progress", []), ("home", []),
])
def test_korean_content_is_marked_korean_in_the_english_ui(client, lesson, url_name, args):
    in_english(client)
    page = soup(client, reverse(url_name, args=args))
    assert page.html["lang"] == "en"
    ko = page.select("[lang=ko]")
    korean_text = " ".join(e.get_text(" ") for e in ko)
    if url_name == "lessons:section":
        assert page.select_one(".lesson-body")["lang"] == "ko"
        assert page.select_one("article h1")["lang"] == "ko"
        assert all(a.get("lang") == "ko" for a in page.select(".toc a"))
    if url_name == "lessons:glossary":
        for entry in page.select(".glossary-entry"):
            assert entry.find("dt")["lang"] == "ko"
            assert entry.find("dd").find(lang="ko") is not None
    if url_name != "lessons:glossary":  # every other page lists the objectives, with their meters
        for objective in lesson.objectives.all():
            assert objective.text in korean_text
    # No Hangul left in the page's English chrome outside the marked content.
    for e in page.select("[lang=ko]"):
        e.decompose()
    for e in page.select("script, style, title, option"):
        e.decompose()
    leftover = re.findall(r"[\uac00-\ud7a3][\uac00-\ud7a3 ]*", page.body.get_text(" "))
    assert leftover == [], leftover


@pytest.mark.django_db
def test_subsection_titles_come_from_the_headings(lesson):
    from courseapp.lessons.selectors import section_subsections

    s4 = lesson.sections.get(slug="s4")
    assert [s.anchor for s in section_subsections(section=s4)] == ["s4-1", "s4-2", "s4-3"]
    assert outline_get(number=21).section("s4").pk == s4.pk
