"""Page requests never load the engine: torch and transformers take seconds to import and
hundreds of MB; only a demo run (in its own process under `make run`) needs them."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.e2e.conftest import server_database_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db(transaction=True)
def test_no_page_imports_torch_or_transformers(lesson):
    from courseapp.lessons.loader import content_load
    from django.conf import settings

    content_load(root=settings.CONTENT_DIR)  # the transactional test starts from an empty database
    urls = ["/", "/lessons/21/", "/lessons/21/glossary/", "/progress/", "/demo/", "/demo/?preset=preemption",
            "/accounts/login/", "/accounts/signup/"] + [s.get_absolute_url() for s in lesson.sections.all()]
    script = textwrap.dedent(f"""
        import os, sys, django
        os.environ["DJANGO_SETTINGS_MODULE"] = "courseapp.settings.test"
        django.setup()
        from django.test import Client
        client = Client(HTTP_HOST="127.0.0.1")
        for url in {urls!r}:
            assert client.get(url).status_code == 200, url
        client.post("/lessons/21/s1/read/")
        print(sorted(m for m in ("torch", "transformers", "engine") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "DATABASE_URL": server_database_url(), "DEMO_ENGINE_PROCESS": "0"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
