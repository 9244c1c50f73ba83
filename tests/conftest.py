import os
from collections import Counter

import pytest
from django.conf import settings
from hypothesis import Phase, settings as hypothesis_settings

# Property tests explore the same examples on every run (a suite that fails at random blocks
# everyone); HYPOTHESIS_PROFILE=explore searches anew each time, to look for new failures.
hypothesis_settings.register_profile("suite", derandomize=True, database=None)
hypothesis_settings.register_profile("explore")
# tests/mutation.py: a property that fails is enough; shrinking its example would take longer than
# mutmut allows a mutant, and the mutant would count as a timeout rather than as killed.
hypothesis_settings.register_profile("mutation", parent=hypothesis_settings.get_profile("suite"),
                                     phases=[Phase.explicit, Phase.reuse, Phase.generate])
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """tests/mutation.py names a module's tests fastest first (MUTATION_TEST_ORDER): mutmut hands
    pytest a mutant's tests in no order, and a mutant that the unit tests kill in seconds would
    otherwise wait for the slow ones first (and could run past its time limit).
    Otherwise the heaviest files go first (HEAVIEST_FIRST, below).
    And no two tests share an id: pytest-xdist hands tests out by id and would run one of them."""
    ids = Counter(item.nodeid for item in items)
    twice = sorted(nodeid for nodeid, n in ids.items() if n > 1)
    if twice:
        raise pytest.UsageError(f"tests sharing an id (give each its own): {twice}")
    order = os.environ.get("MUTATION_TEST_ORDER")
    rank = {path: i for i, path in enumerate(order.split(",") if order else HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


# The files that take longest (CI's durations, 2 cores), longest first; the rest keep
# pytest-randomly's order. pytest-xdist hands out whole files in collection order, so one of
# these drawn last kept one process busy for minutes after the other had finished (the same
# suite took 643 to 716 s by the order alone). Longest first leaves the short files for the end.
HEAVIEST_FIRST = (
    "tests/e2e/test_scaled.py", "tests/bench/test_engine_bench_smoke.py", "tests/e2e/test_demo.py",
    "tests/e2e/test_scaled_faults.py", "tests/e2e/test_presets_process.py", "tests/e2e/test_readme_scaled.py",
    "tests/bench/test_web_bench_smoke.py", "tests/e2e/test_axe.py", "tests/engine/test_compiled.py",
    "tests/courseapp/demo/test_traces.py", "tests/e2e/test_lab.py", "tests/e2e/test_serving.py",
)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The real lesson content, loaded once into the test database (every test sees it;
    each test's own writes roll back)."""
    from courseapp.lessons.loader import content_load

    with django_db_blocker.unblock():
        content_load(root=settings.CONTENT_DIR)
    yield
    from django.db import connection

    if connection.vendor == "postgresql":  # server processes and engine threads may linger a moment
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


DB_FIXTURES = {"db", "transactional_db", "live_server"}


@pytest.fixture(autouse=True)
def _lesson_content(request):
    """The lesson is there when a test starts, whatever ran before it in this process: a
    transactional test empties every table as it ends, and with `-n` (pytest-xdist) a worker
    may be handed such a test before others that only read (pytest-django's db-first order
    holds within one process's share, not across the files it is handed)."""
    uses_db = DB_FIXTURES & set(request.fixturenames) or request.node.get_closest_marker("django_db")
    if not uses_db:
        return
    request.getfixturevalue("django_db_setup")
    from courseapp.lessons.loader import content_load
    from courseapp.lessons.models import Lesson

    with request.getfixturevalue("django_db_blocker").unblock():
        if not Lesson.objects.exists():
            content_load(root=settings.CONTENT_DIR)


@pytest.fixture
def lesson(db):
    from courseapp.lessons.models import Lesson

    return Lesson.objects.get(number=21)


@pytest.fixture(autouse=True)
def _default_language():
    """Each test starts in the site's default language: a request through the test client leaves
    its language active in the thread (LocaleMiddleware never deactivates), so an English request
    in one test turned the next test's Korean strings English, by test order alone."""
    from django.utils import translation

    translation.deactivate()
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Sessions, throttles and rendered sections live in the cache, the lesson outline in the
    process: no test sees another's (a rolled-back edit sends no signal)."""
    from django.core.cache import cache

    from courseapp.lessons.outline import outline_forget

    cache.clear()
    from django.core.cache import caches

    caches["limits"].clear()  # rate-limit counts: another cache when the server has worker processes
    outline_forget()
    yield
