"""Lesson Markdown → HTML: Markdown, then directives (diagrams, calculator), then glossary popovers.

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

SELFCHECK_SLOT = '<div data-directive="selfcheck"></div>'
_DIRECTIVE_P = re.compile(r"<p>\[\[(diagram ([a-z0-9-]+)|calculator|selfcheck)\]\]</p>")
_CALLOUTS = {"💡": "tip", "⚠️": "warn", "⭐": "star", "❌": "warn", "✅": "tip"}
# Where a glossary popover would be noise or invalid HTML.
_NO_GLOSS = {"a", "button", "code", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "figure", "label", "summary", "script", "style"}
_GLOSS_IN = {"p", "li", "td", "th", "dd", "blockquote"}


@lru_cache(maxsize=4096)
def markdown_to_html(text: str) -> str:
    """Pure in its input, and the same prompts and explanations render on every page view."""
    return markdown.markdown(text, extensions=["extra", "sane_lists"], output_format="html")


@lru_cache(maxsize=4096)
def markdown_inline(text: str) -> str:
    """One paragraph's worth of Markdown without the <p> wrapper (question prompts, choices)."""
    html = markdown_to_html(text).strip()
    if html.startswith("<p>") and html.endswith("</p>") and html.count("<p>") == 1:
        return html[3:-4]
    return html


def _expand_directive(match: re.Match) -> str:
    name = match.group(1)
    if name == "selfcheck":
        return SELFCHECK_SLOT
    if name == "calculator":
        return render_to_string("lessons/diagrams/calculator.html")
    return render_to_string(f"lessons/diagrams/{match.group(2)}.html")


def _style_callouts(soup: BeautifulSoup) -> None:
    for quote in soup.find_all("blockquote"):
        text = quote.get_text().lstrip()
        for mark, kind in _CALLOUTS.items():
            if text.startswith(mark):
                quote["class"] = quote.get("class", []) + ["callout", f"callout-{kind}"]
                break


def _is_widget(tag) -> bool:
    """Diagrams, the calculator and question cards carry their own labels; no popovers inside."""
    classes = tag.get("class") or []
    return "diagram" in classes or "question" in classes or tag.has_attr("data-calculator") or tag.has_attr("data-directive")


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
    counter = 0
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
            counter += 1
            tip_id = f"gl-{term.slug}-{counter}"
            pieces.append(escape(text[last : m.start()]))
            pieces.append(
                f'<span class="gloss"><a class="gloss-term" href="{glossary_url}#g-{term.slug}" '
                f'aria-describedby="{tip_id}" data-term="{term.slug}">{escape(m.group(0))}</a>'
                f'<span class="gloss-tip" role="tooltip" id="{tip_id}"><strong>{escape(term.term)}</strong> — '
                f"{escape(term.definition)}</span></span>"
            )
            last = m.end()
        pieces.append(escape(text[last:]))
        text_node.replace_with(BeautifulSoup("".join(pieces), "html.parser"))


def render_section(section, terms) -> str:
    html = markdown_to_html(section.body)
    html = _DIRECTIVE_P.sub(_expand_directive, html)
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


CODE_STAMP = code_stamp("lessons/diagrams")
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
