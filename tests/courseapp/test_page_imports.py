"""Page requests never load the engine: torch and transformers take seconds to import and
hundreds of MB; only a demo run needs them, in its own process under `make run` (starting one
from the web process imports neither)."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.e2e.conftest import server_database_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db(transaction=True)
def test_no_page_imports_torch_or_transformers():
    from courseapp.lessons.models import Lesson

    lesson = Lesson.objects.get(number=21)
    urls = ["/", "/lessons/21/", "/lessons/21/glossary/", "/progress/", "/demo/", "/demo/?preset=preemption",
            "/accounts/login/", "/accounts/signup/"] + [s.get_absolute_url() for s in lesson.sections.all()]
    # Starting a run: the engine process loads torch, not this one; a learner's own engine (knobs)
    # is checked against the smallest prompt here, counted without torch (engine/chat_prompt.py).
    starts = [("/demo/runs/", {"preset": "preemption", "paused": "1"}), ("/demo/runs/", {"num_blocks": "64"}),
              ("/demo/runs/", {"num_blocks": "4"})]
    script = textwrap.dedent(f"""
        import os, sys, django
        os.environ["DJANGO_SETTINGS_MODULE"] = "courseapp.settings.test"
        django.setup()
        from django.test import Client
        client = Client(HTTP_HOST="127.0.0.1")
        for url in {urls!r}:
            assert client.get(url).status_code == 200, url
        client.post("/lessons/21/s1/read/")
        for (url, data), status in zip({starts!r}, (201, 201, 400)):  # 4 blocks cannot hold the smallest prompt
            assert client.post(url, data, HTTP_ACCEPT="application/json").status_code == status, (url, data)
        print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "DATABASE_URL": server_database_url(), "DEMO_ENGINE_PROCESS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
