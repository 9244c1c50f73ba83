"""courseapp/warm.py: a process serves its pages once before it takes requests."""
import pytest


@pytest.mark.django_db(transaction=True)  # the WSGI handler closes connections after each page
def test_warming_serves_each_page_once_writes_nothing_and_survives_a_failure(caplog):
    """A process warms its pages before it takes requests (issue #33: a cold first page); GETs
    write nothing, and a page that fails is logged, not fatal to the server starting."""
    from django.contrib.sessions.models import Session
    from django.core.wsgi import get_wsgi_application

    from courseapp.learners.models import Learner
    from courseapp.warm import warm

    seen = []
    app = get_wsgi_application()

    def counting(environ, start_response):
        seen.append(environ["PATH_INFO"])
        if environ["PATH_INFO"] == "/boom/":
            raise RuntimeError("boom")
        return app(environ, start_response)

    warm(counting, ("/", "/lessons/21/s2/", "/boom/", "/no-such-page/"))
    assert seen == ["/", "/lessons/21/s2/", "/boom/", "/no-such-page/"]
    assert not Session.objects.exists() and not Learner.objects.exists()
    logged = caplog.text
    assert "/boom/ failed" in logged and "/no-such-page/ answered 404" in logged
    assert "/lessons/21/s2/" not in logged
