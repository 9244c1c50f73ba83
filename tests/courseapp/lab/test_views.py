"""The lab pages over HTTP: GET starts and stores nothing, a POST starts a run with checked knobs,
one run per learner at a time, reports and downloads only for their owner."""
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation

from courseapp.lab import runner, services
from courseapp.lab.models import LabRun
from courseapp.learners.models import Learner

GOOD = {"num_blocks": "512", "max_num_seqs": "32", "max_num_batched_tokens": "512", "enable_prefix_caching": "on"}


@pytest.fixture
def launched(monkeypatch):
    """Runs are created as usual; their threads are recorded, not started."""
    calls = []
    monkeypatch.setattr(runner, "launch", lambda run_id: calls.append(run_id))
    return calls


def ko(message, **params):
    with translation.override("ko"):
        return translation.gettext(message) % params if params else translation.gettext(message)


def start(client, **knobs):
    return client.post(reverse("lab:create"), {**GOOD, **knobs})


@pytest.mark.django_db
def test_the_lab_page_starts_nothing_and_stores_nothing(client):
    html = client.get(reverse("lab:index")).content.decode()
    assert 'name="num_blocks" value="512"' in html and "enable_prefix_caching" in html
    assert Learner.objects.count() == 0 and LabRun.objects.count() == 0
    small = client.get(reverse("lab:index"), {"preset": "small-pool"}).content.decode()
    assert f'name="num_blocks" value="{services.min_num_blocks()}"' in small
    assert 'name="v0_preemption_warnings" checked' in small and 'name="ignore_eos" checked' in small
    assert client.get(reverse("lab:index"), {"preset": "nope"}).status_code == 400


@pytest.mark.django_db
@pytest.mark.parametrize("knobs, message, params", [
    ({"num_blocks": "5"}, "%(name)s must be between %(low)d and %(high)d.", {"name": "num_blocks", "high": 1024}),
    ({"max_num_seqs": "lots"}, "%(name)s must be a whole number.", {"name": "max_num_seqs"}),
    ({"max_num_batched_tokens": "999999"}, "%(name)s must be between %(low)d and %(high)d.",
     {"name": "max_num_batched_tokens", "low": 64, "high": 2048}),
])
def test_knobs_out_of_range_are_refused_with_the_limit(client, launched, knobs, message, params):
    if params["name"] == "num_blocks":
        params["low"] = services.min_num_blocks()
    response = start(client, **knobs)
    assert response.status_code == 400 and ko(message, **params) in response.content.decode()
    assert LabRun.objects.count() == 0 and launched == []


@pytest.mark.django_db(transaction=True)
def test_a_post_starts_one_run_with_clean_knobs_and_a_second_waits_for_it(client, launched):
    response = start(client, ignore_eos="on")
    run = LabRun.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("lab:run", args=[run.pk])
    assert run.knobs == {"num_blocks": 512, "max_num_seqs": 32, "max_num_batched_tokens": 512,
                         "enable_prefix_caching": True, "ignore_eos": True, "v0_preemption_warnings": False}
    assert launched == [run.pk]
    again = start(client)
    assert again.status_code == 409
    assert ko("Your previous lab run is still going on: wait for its report first.") in again.content.decode()
    assert LabRun.objects.count() == 1 and len(launched) == 1


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_server_died_does_not_block_the_next(client, launched):
    start(client)
    LabRun.objects.update(beat_at=timezone.now() - timedelta(seconds=600))
    assert start(client).status_code == 302
    old, new = LabRun.objects.order_by("created_at")
    assert old.status == LabRun.Status.FAILED and old.error == ko("The server stopped while this run was going on.")
    assert new.status == LabRun.Status.QUEUED


@pytest.mark.django_db(transaction=True)
def test_runs_per_hour_are_limited_per_learner(client, launched, settings):
    settings.LAB_RUNS_PER_HOUR = 2
    for _ in range(2):
        assert start(client).status_code == 302
        LabRun.objects.update(status=LabRun.Status.FINISHED)
    refused = start(client)
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert start(Client()).status_code == 302, "another learner has an allowance of their own"


@pytest.mark.django_db(transaction=True)
def test_cookieless_starts_from_one_address_are_limited_and_the_queue_is_bounded(launched, settings):
    settings.LAB_MAX_ACTIVE_PER_ADDRESS, settings.LAB_MAX_QUEUED = 2, 4
    answers = [start(Client()) for _ in range(6)]  # six fresh guests, one address
    assert [a.status_code for a in answers] == [302, 302, 429, 429, 429, 429]
    assert int(answers[-1]["Retry-After"]) > 0 and ko("Your network has started as many lab runs as it may for now.") in \
        answers[-1].content.decode()
    assert LabRun.objects.count() == 2 and len(launched) == 2, "a refused start stores nothing"
    others = [start(Client(REMOTE_ADDR=f"10.0.0.{n}")) for n in range(1, 4)]
    assert [a.status_code for a in others] == [302, 302, 503], "server-wide: four waiting or measuring at most"
    assert int(others[-1]["Retry-After"]) > 0 and LabRun.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_runs_per_hour_are_limited_per_address_too(launched, settings):
    settings.LAB_RUNS_PER_HOUR_PER_ADDRESS = 2
    for _ in range(2):
        assert start(Client()).status_code == 302
        LabRun.objects.update(status=LabRun.Status.FINISHED)
    assert start(Client()).status_code == 429
    assert start(Client(REMOTE_ADDR="10.0.0.9")).status_code == 302, "another network has its own allowance"


@pytest.mark.django_db(transaction=True)
def test_the_lab_calls_the_address_in_settings_whatever_the_host_header_says(client, monkeypatch, settings):
    from courseapp.lab import experiments
    from courseapp.serving import engines

    settings.LAB_BASE_URL = "http://127.0.0.1:8123"
    threads = []
    monkeypatch.setattr(runner, "launch", threads.append)
    start(client, HTTP_HOST="127.0.0.1:8503")
    seen = []
    monkeypatch.setattr(engines, "lab_engine_open", lambda run_id, **options: ("tok" * 8, type("E", (), {"log_lines": list})()))
    monkeypatch.setattr(engines, "lab_engine_close", lambda token: None)

    def fake_run(lab, **kwargs):
        seen.append(lab)
        raise experiments.LabError("stopped here")

    monkeypatch.setattr(experiments, "run", fake_run)
    runner._run(threads[0])
    assert seen[0].base_url == "http://127.0.0.1:8123/lab/engines/" + "tok" * 8
    assert LabRun.objects.get().error == "stopped here"


def test_a_failed_run_shows_no_foreign_body_and_one_text_for_every_unreachable_port():
    import httpx2
    from openai import APIStatusError

    from courseapp.lab import experiments

    foreign = httpx2.Response(200, text="<html>SECRET internal page</html>",
                              request=httpx2.Request("POST", "http://127.0.0.1:8503/v1/chat/completions"))
    explained = experiments._explain(APIStatusError("bad", response=foreign, body=None))
    assert "SECRET" not in explained and "200" in explained
    texts = set()

    def refused(port):  # closed ports: refused alike
        lab = experiments.LabSettings(base_url=f"http://127.0.0.1:{port}", model="m", max_tokens=4, timeout_s=5)
        with pytest.raises(experiments.LabError) as failed:
            experiments.run(lab)
        texts.add(str(failed.value))

    # From its own thread, as the runner calls it: a browser test's Playwright on this xdist
    # worker keeps an event loop running on the main thread.
    with ThreadPoolExecutor(max_workers=1) as pool:
        for port in (9, 1):
            pool.submit(refused, port).result()
    assert len(texts) == 1 and "could not reach the server" in texts.pop()


def as_learner(client, learner) -> None:
    """This browser is that guest learner (the session says so)."""
    session = client.session
    session["learner_id"] = learner.pk
    session.save()


def _finished(learner, report, **knobs):
    return LabRun.objects.create(learner=learner, status=LabRun.Status.FINISHED, report=report,
                                 knobs={**services.knobs_for_preset("default"), **knobs}, script=report["script"])


@pytest.mark.django_db
def test_reports_and_downloads_are_their_owners_only(client, sample_report):
    owner = Learner.objects.create()
    as_learner(client, owner)
    run = _finished(owner, sample_report)
    page = client.get(reverse("lab:run", args=[run.pk])).content.decode()
    assert "2. 같은 요청 8건 동시" in page and "vllm serve x --max-num-seqs 8" in page
    assert 'href="/lessons/21/s3/#s3-3">§3.3</a>' in page and "읽는 법" in page  # each row links its section
    csv_response = client.get(reverse("lab:download", args=[run.pk, "csv"]))
    assert csv_response.content.decode("utf-8").startswith("\ufeff실험,조건,측정값,출력 원문")
    assert 'filename="lab-' in csv_response["Content-Disposition"]
    assert client.get(reverse("lab:download", args=[run.pk, "json"])).json()["knobs"]["num_blocks"] == 512
    assert client.get(reverse("lab:download", args=[run.pk, "xml"])).status_code == 404
    stranger = Client()
    for url in (reverse("lab:run", args=[run.pk]), reverse("lab:progress", args=[run.pk]),
                reverse("lab:download", args=[run.pk, "csv"]), reverse("lab:download", args=[run.pk, "json"])):
        assert stranger.get(url).status_code == 404
    assert stranger.get(reverse("lab:compare"), {"a": run.pk, "b": run.pk}).status_code == 400


@pytest.mark.django_db
def test_compare_marks_the_knob_that_differs_and_markup_stays_text(client, sample_report):
    learner = Learner.objects.create()
    as_learner(client, learner)
    sample_report["single"]["text"] = "<script>alert(1)</script>"
    a = _finished(learner, sample_report)
    b = _finished(learner, sample_report, enable_prefix_caching=False)
    html = client.get(reverse("lab:compare"), {"a": a.pk, "b": b.pk}).content.decode()
    row = html.split("<th scope=\"row\">enable_prefix_caching")[1].split("</tr>")[0]
    assert "badge" in row and "True" in row and "False" in row
    assert "<th scope=\"row\">num_blocks</th>" in html, "an unchanged knob carries no mark"
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@pytest.mark.django_db
def test_progress_polls_while_running_and_asks_for_a_reload_at_the_end(client):
    learner = Learner.objects.create()
    as_learner(client, learner)
    run = LabRun.objects.create(learner=learner, knobs=services.knobs_for_preset("default"), status=LabRun.Status.RUNNING,
                                progress={"done": 3, "total": 14, "message": "실험 1: 요청 1건"})
    partial = client.get(reverse("lab:progress", args=[run.pk])).content.decode()
    assert 'hx-trigger="every 1s"' in partial and 'value="3"' in partial and "실험 1: 요청 1건" in partial
    LabRun.objects.filter(pk=run.pk).update(status=LabRun.Status.FAILED, error="the server answered 400: too long")
    done = client.get(reverse("lab:progress", args=[run.pk]))
    assert done.status_code == 204 and done["HX-Refresh"] == "true"
    assert "the server answered 400: too long" in client.get(reverse("lab:run", args=[run.pk])).content.decode()


@pytest.mark.django_db
def test_the_lab_page_speaks_the_interface_language(client):
    ko = client.get(reverse("lab:index")).content.decode()
    assert "요청 1건: 출력 토큰/초" in ko and "같은 요청 8건 동시" in ko
    client.post(reverse("set_language"), {"language": "en", "next": reverse("lab:index")})
    en = client.get(reverse("lab:index")).content.decode()
    assert "One request alone: its output tokens per second" in en and "요청 1건" not in en
