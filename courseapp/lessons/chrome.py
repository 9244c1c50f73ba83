"""The site's header — brand, menu, log in/out, language — rendered once per language and
visitor, not on every page.

It is the same markup on every page a visitor opens except for three things: the CSRF token of
its two forms and the page's own path (the language form's `next`, the log-in link's). So it is
rendered with stand-ins for those, kept in the cache per (template code, language, account,
teacher or not), and the stand-ins are replaced on each request: ~25 `{% url %}` and
`{% translate %}` a page cost a page worker ~0.5 ms (docs/benchmarks.md, issue #33).
"""
import hashlib
from urllib.parse import quote

from django.core.cache import cache
from django.middleware.csrf import get_token
from django.template.loader import render_to_string
from django.utils.html import escape
from django.utils.safestring import mark_safe
from django.utils.translation import get_language

from courseapp.lessons.rendering import code_stamp

_CSRF, _PATH, _PATH_Q = "\x00csrf\x00", "\x00path\x00", "\x00path-q\x00"
_STAMP = code_stamp("partials")
SECONDS = 24 * 3600


def site_header(request) -> str:
    user = getattr(request, "user", None)
    signed_in = user is not None and user.is_authenticated
    teach = signed_in and user.has_perm("instructor.teach_cohort")
    name = user.get_username() if signed_in else ""
    language = get_language()
    key = "chrome:" + hashlib.sha1(f"{_STAMP}/{language}/{user.pk if signed_in else 0}/{name}/{teach}".encode()).hexdigest()
    html = cache.get(key)
    if html is None:
        html = render_to_string("partials/site_header.html", {
            "user": user, "teach": teach, "LANG": language, "csrf_token": _CSRF, "path": _PATH, "path_q": _PATH_Q})
        cache.set(key, html, SECONDS)
    path = request.get_full_path()
    # As the template filled them: `{{ path }}` escaped, `{{ path|urlencode }}` quoted then escaped.
    return mark_safe(html.replace(_CSRF, escape(get_token(request))).replace(_PATH_Q, escape(quote(path, safe="/")))
                     .replace(_PATH, escape(path)))


def chrome(request) -> dict:
    """Context processor: `{{ site_header }}`, rendered only by a page that shows it (a callable:
    the template calls it when it gets there; partials never do)."""
    return {"site_header": lambda: site_header(request)}
