"""Demo pages over HTTP: presets from their URL, bad input, the busy cap, the htmx summary."""
import pytest
from django.urls import reverse
from django.utils import translation

from courseapp.demo import services
from courseapp.demo.models import DemoRun


@pytest.mark.django_db
def test_unknown_preset_is_a_400_listing_the_scenes(client):
    response = client.get(reverse("demo:index"), {"preset": "nope"})
    assert response.status_code == 400
    assert "prefix-caching" in response.content.decode()


@pytest.mark.django_db
def test_bad_knobs_are_refused_with_the_limit(client):
    response = client.post(reverse("demo:run-create"), {"num_blocks": "4", "max_num_seqs": "8"})
    assert response.status_code == 400
    with translation.override("ko"):
        expected = translation.gettext("%(name)s must be between %(lo)d and %(hi)d") % {"name": "num_blocks", "lo": 16, "hi": 512}
    assert expected in response.content.decode()
    assert not DemoRun.objects.exists()


@pytest.mark.django_db
def test_too_many_runs_gives_a_busy_page(client, settings, monkeypatch):
    settings.DEMO_MAX_ACTIVE_RUNS = 1
    monkeypatch.setattr(services, "_launch", lambda run: None)  # no engine needed to fill the seats
    DemoRun.objects.create(spec={}, status="running")
    response = client.get(reverse("demo:index"), {"preset": "preemption"})
    assert response.status_code == 503


@pytest.mark.django_db
def test_one_active_run_per_learner(client, monkeypatch):
    sent = []
    monkeypatch.setattr(services, "_launch", lambda run: None)
    monkeypatch.setattr(services, "run_command", lambda *, run, cmd: sent.append((run.pk, cmd)))
    client.get(reverse("demo:index"), {"preset": "preemption"})
    first = DemoRun.objects.get()
    client.get(reverse("demo:index"), {"preset": "concurrency"})
    assert (first.pk, {"type": "stop"}) in sent


@pytest.mark.django_db
def test_summary_polls_while_active_and_stops_after(client):
    run = DemoRun.objects.create(spec={}, status="running", host="embedded")
    live = client.get(reverse("demo:run-summary", args=[run.pk]))
    assert live.status_code == 200 and 'hx-trigger="every 2s"' in live.content.decode()
    DemoRun.objects.filter(pk=run.pk).update(status="failed", error="the engine worker stopped responding")
    done = client.get(reverse("demo:run-summary", args=[run.pk]))
    assert done.status_code == 286 and "stopped responding" in done.content.decode()


@pytest.mark.django_db
def test_a_preset_can_open_paused(client, monkeypatch):
    monkeypatch.setattr(services, "_launch", lambda run: None)
    client.get(reverse("demo:index"), {"preset": "preemption", "paused": "1"})
    assert DemoRun.objects.get().spec["start_paused"] is True


@pytest.mark.django_db
@pytest.mark.parametrize("hh,mm,ss", [(9, 0, 5), (17, 10, 59), (23, 59, 58), (12, 34, 16)])
def test_timestamped_prompts_differ_inside_the_first_block(hh, mm, ss):
    """The prefix-caching scene's point: a clock at the front leaves no block to share."""
    from datetime import datetime

    from courseapp.demo import presets
    from engine import EngineConfig, LLMEngine

    spec = presets.spec_for("prefix-caching", system_prompt="시스템", now=datetime(2026, 1, 1, hh, mm, ss))
    engine = LLMEngine(EngineConfig(num_blocks=64, max_num_seqs=8))
    a, b = (engine.encode_chat([{"role": "system", "content": r["system"]}, {"role": "user", "content": "q"}])
            for r in spec["requests"] if r["key"].startswith("time"))
    first_diff = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert first_diff < 16
