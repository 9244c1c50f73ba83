"""Lesson Markdown → HTML: Markdown, then directives (diagrams, calculator, demo scenes), then
glossary popovers.

The self-check directive is left as a placeholder because it depends on the learner; the
view fills it in (see views.section_detail).
"""
import hashlib
import re
from functools import lru_cache
from pathlib import Path

import markdown
from bs4 import BeautifulSoup, NavigableString
from django.core.cache import cache
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import escape
from django.utils.translation import get_language

from courseapp.demo import presets as presets_module
from courseapp.demo.presets import PRESETS  # plain data (no engine, no torch): safe for page requests

SELFCHECK_SLOT = '<div data-directive="selfcheck"></div>'
_DIRECTIVE_P = re.compile(r"<p>\[\[(diagram ([a-z0-9-]+)|scene ([a-z0-9-]+)|calculator|selfcheck)\]\]</p>")
_ANY_DIRECTIVE_P = re.compile(r"<p>\[\[([^\]]*)\]\]</p>")
_HANGUL = re.compile("[\uac00-\ud7a3]")
_TASK_ITEM = re.compile(r'<li class="task-list-item"><input type="checkbox"\s*/?>\s*(.*?)</li>', re.S)
_CALLOUTS = {"💡": "tip", "⚠️": "warn", "⭐": "star", "❌": "warn", "✅": "tip"}
# Where a glossary popover would be noise or invalid HTML.
_NO_GLOSS = {"a", "button", "code", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "figure", "label", "summary", "script", "style"}
_GLOSS_IN = {"p", "li", "td", "th", "dd", "blockquote"}


@lru_cache(maxsize=4096)
def markdown_to_html(text: str) -> str:
    """Pure in its input, and the same prompts and explanations render on every page view."""
    html = markdown.markdown(text, extensions=["extra", "sane_lists", "pymdownx.tasklist"],
                             extension_configs={"pymdownx.tasklist": {"clickable_checkbox": True}}, output_format="html")
    # A "- [ ]" item is a checkbox the learner can tick; its text is the checkbox's label.
    return _TASK_ITEM.sub(r'<li class="task-list-item"><label><input type="checkbox"/> \1</label></li>', html)


@lru_cache(maxsize=4096)
def markdown_inline(text: str) -> str:
    """One paragraph's worth of Markdown without the <p> wrapper (question prompts, choices)."""
    html = markdown_to_html(text).strip()
    if html.startswith("<p>") and html.endswith("</p>") and html.count("<p>") == 1:
        return html[3:-4]
    return html


class DirectiveError(ValueError):
    """A `[[…]]` paragraph the renderer does not know: a typo must not reach learners as text
    or as a dead link."""


def directive_errors(body: str) -> list[str]:
    """What is wrong with the `[[…]]` directives of a section's Markdown (empty when nothing)."""
    errors = []
    for line in body.splitlines():
        m = re.fullmatch(r"\s*\[\[(.*)\]\]\s*", line)
        if not m:
            continue
        words = m.group(1).split()
        if words[:1] == ["scene"] and len(words) == 2:
            if words[1] not in PRESETS:
                errors.append(f"[[scene {words[1]}]]: no such scene (known: {', '.join(sorted(PRESETS))})")
        elif words[:1] == ["diagram"] and len(words) == 2:
            if not (Path(__file__).parents[2] / "templates/lessons/diagrams" / f"{words[1]}.html").is_file():
                errors.append(f"[[diagram {words[1]}]]: no such diagram")
        elif not _DIRECTIVE_P.fullmatch(f"<p>[[{m.group(1)}]]</p>"):
            errors.append(f"[[{m.group(1)}]]: unknown directive")
    return errors


def _scene_link(name: str) -> str:
    preset = PRESETS.get(name)
    if preset is None:
        raise DirectiveError(f"[[scene {name}]]: no such scene (known: {', '.join(sorted(PRESETS))})")
    title = str(preset["title"])
    return render_to_string(
        "lessons/partials/scene_link.html",
        {
            "name": name,
            "title": title,
            # The link's words are UI chrome (the page's language); the title is Korean unless
            # the presets translate it.
            "title_lang": "ko" if _HANGUL.search(title) else get_language(),
            "ui_lang": get_language(),
        },
    )


def _expand_directive(match: re.Match) -> str:
    name = match.group(1)
    if name == "selfcheck":
        return SELFCHECK_SLOT
    if name == "calculator":
        return render_to_string("lessons/diagrams/calculator.html")
    if match.group(3):
        return _scene_link(match.group(3))
    return render_to_string(f"lessons/diagrams/{match.group(2)}.html")


def _style_callouts(soup: BeautifulSoup) -> None:
    for quote in soup.find_all("blockquote"):
        text = quote.get_text().lstrip()
        for mark, kind in _CALLOUTS.items():
            if text.startswith(mark):
                quote["class"] = quote.get("class", []) + ["callout", f"callout-{kind}"]
                break


def _is_widget(tag) -> bool:
    """Diagrams, the calculator, scene links and question cards carry their own labels; no popovers inside."""
    classes = tag.get("class") or []
    return "diagram" in classes or "question" in classes or "scene-link" in classes or tag.has_attr("data-calculator") or tag.has_attr("data-directive")


def _gloss_pattern(terms):
    aliases = {}
    for term in terms:
        for alias in term.aliases or [term.term]:
            aliases.setdefault(alias, term)
    if not aliases:
        return None, {}
    ordered = sorted(aliases, key=len, reverse=True)  # longest first: "정적 배칭" before "배칭"
    return re.compile("|".join(re.escape(a) for a in ordered)), aliases


def _link_glossary(soup: BeautifulSoup, terms, glossary_url: str) -> None:
    pattern, by_alias = _gloss_pattern(terms)
    if pattern is None:
        return
    linked: set[str] = set()  # one link per term per page: §2 had 51, 76 Tab presses before its first question
    for text_node in list(soup.find_all(string=True)):
        parents = {p.name for p in text_node.parents}
        if parents & _NO_GLOSS or not parents & _GLOSS_IN:
            continue
        if any(_is_widget(p) for p in text_node.parents if p.name):
            continue
        text = str(text_node)
        if not pattern.search(text):
            continue
        pieces, last = [], 0
        for m in pattern.finditer(text):
            term = by_alias[m.group(0)]
            if term.slug in linked:
                continue
            linked.add(term.slug)
            tip_id = f"gl-{term.slug}"
            pieces.append(escape(text[last : m.start()]))
            pieces.append(
                f'<span class="gloss"><a class="gloss-term" href="{glossary_url}#g-{term.slug}" '
                f'aria-describedby="{tip_id}" data-term="{term.slug}">{escape(m.group(0))}</a>'
                f'<span class="gloss-tip" role="tooltip" id="{tip_id}"><strong>{escape(term.term)}</strong> — '
                f"{escape(term.definition)}</span></span>"
            )
            last = m.end()
        if last == 0:
            continue
        pieces.append(escape(text[last:]))
        text_node.replace_with(BeautifulSoup("".join(pieces), "html.parser"))


def render_section(section, terms) -> str:
    html = markdown_to_html(section.body)
    html = _DIRECTIVE_P.sub(_expand_directive, html)
    leftover = _ANY_DIRECTIVE_P.search(html)
    if leftover:
        raise DirectiveError(f"§{section.number}: [[{leftover.group(1)}]]: unknown directive")
    soup = BeautifulSoup(html, "html.parser")
    _style_callouts(soup)
    glossary_url = reverse("lessons:glossary", kwargs={"number": section.lesson.number})
    _link_glossary(soup, terms, glossary_url)
    return str(soup)


def code_stamp(*folders: str) -> str:
    """A digest of this module and the templates in `folders`: part of every cache key for
    rendered HTML, so a deploy never serves markup made by older code from a shared (Redis)
    cache."""
    root = Path(__file__).parents[2] / "templates"
    files = [Path(__file__), *(f for folder in folders for f in sorted((root / folder).glob("*.html")))]
    digest = hashlib.sha1()
    for f in files:
        digest.update(f.read_bytes())
    return digest.hexdigest()[:12]


# The scene titles are part of the markup too: presets.py is in the digest (a renamed scene is a new key).
CODE_STAMP = code_stamp("lessons/diagrams", "lessons/partials") + hashlib.sha1(Path(presets_module.__file__).read_bytes()).hexdigest()[:6]
CACHE_SECONDS = 24 * 60 * 60


def section_cache_key(section, *, outline) -> str:
    """Section, language and content version (see outline.py): a new version is a new key,
    so an edit never needs a purge."""
    version = f"{section.pk}:{outline.version}:{get_language()}:{CODE_STAMP}"
    return "section-html:" + hashlib.sha1(version.encode()).hexdigest()


def render_section_cached(section, *, outline) -> str:
    """The section's HTML (without the learner's self-check cards), rendered once per version."""
    key = section_cache_key(section, outline=outline)
    html = cache.get(key)
    if html is None:
        html = render_section(section, list(outline.glossary))
        cache.set(key, html, CACHE_SECONDS)
    return html
