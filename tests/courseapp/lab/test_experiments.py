"""courseapp/lab/experiments.py against a fake OpenAI-compatible server with known timings: the
lab's numbers are checked without an engine. The fake streams each answer at a set pace and
serves a /metrics page that counts the requests it is streaming right now, with samples of
another model and of a second engine beside them (a scaled server's /metrics).

Each test holds a promise the report relies on; the mutants of issue #34 it kills are named."""
import json
import re
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from courseapp.lab import experiments
from courseapp.lab.experiments import LabSettings
from tests.aio import run_in_fresh_loop
from tests.scopes import module_unless_collecting_stats

TTFT_S = 0.03  # before the first text chunk
TOKEN_S = 0.004  # between chunks: an answer of 40 lasts at least 0.19 s


class Fake:
    def __init__(self, cached=0, preemptions=(3, 5), metrics_status=200, usage=True, post_status=200, stall_s=0.0,
                 merged_tail=False, metrics_stall_s=0.0, itl_from=1, preemptions_from=1):
        # the scrape (1st, 2nd, …) from which the inter-token histogram and the preemption counter
        # appear: a server that starts them late, or (a large number) never has them
        self.itl_from, self.preemptions_from, self.scrapes = itl_from, preemptions_from, 0
        self.metrics_stall_s = metrics_stall_s  # a /metrics that says nothing for this long
        self.metrics_auth: list[str | None] = []  # each scrape's Authorization header
        # True: an answer's last two tokens come in one chunk, as a server sends them when its
        # writer fell behind (vLLM merges what the stream has not taken): chunks are not tokens
        self.merged_tail = merged_tail
        self.metrics_status = metrics_status  # e.g. 404: a server without /metrics
        self.usage = usage  # False: a server that sends no usage chunk
        self.post_status = post_status  # 500: every request fails with an OpenAI-style error
        self.stall_s = stall_s  # a server that says nothing for this long before the first token
        self.auth: list[str | None] = []  # each request's Authorization header
        self.running = 0
        self.peak = 0
        self.lock = threading.Lock()
        self.bodies: list[dict] = []
        self.cached = cached
        self.preemptions = list(preemptions)  # the counter at the first scrape, then at every later one
        self.itl_sum = self.itl_count = 0.0  # the server's own inter-token histogram: alone 10 ms, together 20 ms

    def metrics(self) -> str:
        with self.lock:
            self.scrapes += 1
            scrape = self.scrapes
            running = self.running
            count = self.preemptions[0] if len(self.preemptions) == 1 else self.preemptions.pop(0)
            itl_sum, itl_count = self.itl_sum, self.itl_count
        engines = (("0", 1.0), ("1", 0.0))  # a second engine, idle: sums count it, max would too
        families = {  # name → (type, {engine: value}, another model's value, listed first in each)
            "vllm:num_requests_running": ("gauge", {e: running * share for e, share in engines}, 50.0),
            "vllm:num_requests_waiting": ("gauge", {e: 0.0 for e, _ in engines}, 7.0),
            "vllm:kv_cache_usage_perc": ("gauge", {e: 0.01 * running * share for e, share in engines}, 0.9),
        }
        if scrape >= self.preemptions_from:
            families["vllm:num_preemptions_total"] = ("counter", {"0": count, "1": 1}, 99.0)
        lines = []
        for name, (kind, values, stranger) in families.items():  # a filter that stopped at the stranger loses ours
            lines += [f"# TYPE {name} {kind}", f'{name}{{engine="0",model_name="other"}} {stranger}']
            lines += [f'{name}{{engine="{e}",model_name="munuibot"}} {v}' for e, v in values.items()]
        lines += [] if scrape < self.itl_from else ["# TYPE vllm:inter_token_latency_seconds histogram",
                  f'vllm:inter_token_latency_seconds_sum{{engine="0",model_name="munuibot"}} {itl_sum}',
                  f'vllm:inter_token_latency_seconds_count{{engine="0",model_name="munuibot"}} {itl_count}']
        return "\n".join(lines) + "\n"


def serve(fake: Fake):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _empty(self, status: int = 404):  # 404 off the two paths, as a real server: the lab must ask the right one
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):
            if self.path != "/metrics":
                return self._empty()
            with fake.lock:
                fake.metrics_auth.append(self.headers.get("Authorization"))
            if fake.metrics_status != 200:
                return self._empty(fake.metrics_status)
            time.sleep(fake.metrics_stall_s)
            body = fake.metrics().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/chat/completions":
                return self._empty()
            with fake.lock:
                fake.bodies.append(request)
                fake.auth.append(self.headers.get("Authorization"))
            if fake.post_status != 200:
                body = json.dumps({"error": {"message": "boom", "type": "InternalServerError", "code": 500}}).encode()
                self.send_response(fake.post_status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            with fake.lock:
                fake.running += 1
                fake.peak = max(fake.peak, fake.running)
                # what the server would observe between this request's tokens: slower with company
                fake.itl_sum += (request["max_tokens"] - 1) * (0.02 if fake.running > 1 else 0.01)
                fake.itl_count += request["max_tokens"] - 1
            n = request["max_tokens"]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                time.sleep(TTFT_S + fake.stall_s)
                # as vLLM begins: the role, with empty content (no text, not a token)
                first = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "munuibot",
                         "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(first)}\n\n".encode())
                for i in range(n):
                    if fake.merged_tail and i == n - 1 > 0:
                        continue  # went out with the token before it
                    text = f"t{i} t{i + 1} " if fake.merged_tail and i == n - 2 else f"t{i} "
                    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "munuibot",
                             "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(TOKEN_S)
                usage = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "munuibot", "choices": [],
                         "usage": {"prompt_tokens": 600, "completion_tokens": n, "total_tokens": 600 + n,
                                   "prompt_tokens_details": {"cached_tokens": fake.cached}}}
                if fake.usage:
                    self.wfile.write(f"data: {json.dumps(usage)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout)
            finally:
                with fake.lock:
                    fake.running -= 1
            self.close_connection = True

    class Server(ThreadingHTTPServer):
        request_queue_size = 64  # the sweep opens 16 streams at once

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@contextmanager
def serving(*fakes):
    """Each fake on a port of its own (its `url` set) for the block, shut down after it."""
    servers = []
    try:
        for fake in fakes:
            server, fake.url = serve(fake)
            servers.append(server)
        yield
    finally:
        for server in servers:
            server.shutdown()


def run(fake, on_progress=None, read_logs=None, **overrides):
    """experiments.run in a thread of its own, as the lab runner calls it (a browser test's
    Playwright session may keep an event loop running in this one)."""
    from concurrent.futures import ThreadPoolExecutor

    settings = LabSettings(**{"base_url": fake.url, "max_tokens": 40, "concurrency": 8, "sample_every_s": 0.05,
                              "timeout_s": 30, **overrides})
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(experiments.run, settings, on_progress=on_progress, read_logs=read_logs).result(timeout=300)


@pytest.fixture(scope=module_unless_collecting_stats)  # tests/scopes.py: mutmut sees every test use it
def lab():
    """One whole lab run against the fake: (the fake, its report)."""
    # before experiments 1 and 2: 3 (+1 on the idle engine), from then on: 5 (+1)
    fake = Fake(preemptions=(3, 3, 5), merged_tail=True)
    fake.steps = []  # the progress the lab page shows: (message, params)
    with serving(fake):
        yield fake, run(fake, base_url=fake.url + "/",  # a base URL as pasted, with its slash
                        on_progress=lambda p: fake.steps.append((p.message, dict(p.params))))


def test_a_short_experiment_2_is_still_sampled_and_shows_the_requests_running_together(lab):
    """Issue #30: experiment 2 lasting half a second still has samples with ≥ 2 running."""
    fake, report = lab
    during = [p for p in report["series"] if p["running"]]
    assert len(report["series"]) >= 3 and max(p["running"] for p in report["series"]) >= 2 and fake.peak == 16  # the sweep: 16
    assert report["series"][-1]["running"] == 0, "a last sample after the queue drained"
    assert all(p["kv"] == pytest.approx(0.01 * p["running"]) for p in during)


def test_ttft_is_the_first_chunk_and_the_span_is_wall_time_not_the_sum(lab):
    """Mutants: TTFT taken at the last chunk; experiment 2's span as the sum of request times.
    (Only what the fake's sleeps guarantee is compared, never a speed.)"""
    _fake, report = lab
    one = report["single"]
    assert one["ttft"] >= TTFT_S and one["elapsed"] - one["ttft"] >= 0.9 * 39 * TOKEN_S, "39 more chunks came after the first"
    assert one["completion_tokens"] == 40 and one["tokens_per_s"] == pytest.approx(40 / one["elapsed"])
    many = report["concurrent"]
    ends = [m["started"] + m["elapsed"] for m in many["requests"]]
    assert many["span_s"] == pytest.approx(max(ends) - min(m["started"] for m in many["requests"]))
    assert many["span_s"] < sum(m["elapsed"] for m in many["requests"])
    assert many["server_tokens_per_s"] == pytest.approx(8 * 40 / many["span_s"])


def test_the_metrics_of_this_model_are_summed_over_engines_and_preemptions_are_the_delta(lab):
    """Mutants: another model's samples counted; max instead of sum over a scaled server's
    engines; preemptions as the total instead of the delta."""
    _fake, report = lab
    assert max(p["running"] for p in report["series"]) <= 8, "the other model's 50 running are not ours"
    assert report["preemptions"] == {"before": 4.0, "after": 6.0, "delta": 2}


def test_experiment_2_reports_the_servers_own_time_between_tokens_alone_and_together(lab):
    """From the server's inter-token histogram, scraped around experiment 1 and around experiment
    2: the engine's side of the comparison, without this client's share."""
    _fake, report = lab
    itl = report["concurrent"]["server_token_interval"]
    assert itl["metric"] == "vllm:inter_token_latency_seconds"
    assert itl["alone_ms"] == pytest.approx(10.0) and itl["together_ms"] == pytest.approx(20.0, rel=0.15)
    assert any("a token every 10.00 ms alone" in line for line in report["script"])


def test_3b_puts_the_time_at_the_very_front_of_the_system_prompt(lab):
    """Mutant: the timestamp at the end of the system prompt (the cache would then hit: §4.3's point gone)."""
    fake, _report = lab
    long = [b["messages"] for b in fake.bodies if len(b["messages"][0]["content"]) > 3000]
    assert len(long) == 4 and all([m["role"] for m in messages] == ["system", "user"] for messages in long), \
        "the long prompt is the system turn (as §6's experiment 3 sends it), the question the user's"
    systems = [messages[0]["content"] for messages in long]
    same, stamped = systems[:2], systems[2:4]
    assert same[0] == same[1] and same[0].startswith("[세션 ")
    assert all(s.startswith("현재 시각: ") for s in stamped) and stamped[0] != stamped[1]
    assert stamped[0].endswith(same[0]), "only the front differs"


def test_experiment_7_sends_the_same_mixed_batch_to_both_engines(lab):
    _fake, plain = lab
    assert plain["batching"] is None, "no static engine named: experiment 7 is left out"
    fake, static = Fake(), Fake()
    with serving(fake, static):
        seen = []  # the progress the lab page shows: (done, total, message)
        report = run(fake, batching_urls={"continuous": fake.url, "static": static.url + "/"},  # a URL as pasted
                     on_progress=lambda p: seen.append((p.done, p.total, p.message)))
    b = report["batching"]
    assert (b["seats"], b["long"], b["short"]) == (experiments.BATCHING_SEATS, 40, 5)
    sent = [body["max_tokens"] for body in static.bodies]
    assert sorted(sent) == sorted([40] * 4 + [5] * 8) and all(body.get("ignore_eos") for body in static.bodies)
    asked = [{"role": "system", "content": experiments.SYSTEM_PROMPT}, {"role": "user", "content": experiments.QUESTION}]
    assert all(body["messages"] == asked for body in static.bodies + fake.bodies[-12:]), "experiment 2's question"
    for mode in ("continuous", "static"):
        m = b[mode]
        assert len(m["requests"]) == 12 and m["total_tokens"] == 4 * 40 + 8 * 5
        # every third, from the first, to max_tokens: the long answers start with the batch
        assert {r["label"]: r["completion_tokens"] for r in m["requests"]} == {
            f"{mode[0]}{i + 1}": 40 if i % 3 == 0 else 5 for i in range(12)}
        shorts = [r["elapsed"] for r in m["requests"] if r["completion_tokens"] == 5]
        assert m["short_mean_latency_s"] == pytest.approx(sum(shorts) / 8)
        assert m["mean_latency_s"] == pytest.approx(sum(r["elapsed"] for r in m["requests"]) / 12)
        assert m["span_s"] == pytest.approx(max(r["started"] + r["elapsed"] for r in m["requests"])
                                            - min(r["started"] for r in m["requests"]))
        assert m["server_tokens_per_s"] == pytest.approx(m["total_tokens"] / m["span_s"])
        assert all(r["tokens_per_s"] == pytest.approx(r["completion_tokens"] / r["elapsed"]) for r in m["requests"])
    total = 2 + 8 + 4 + len(experiments.SWEEP_LEVELS) + 2
    assert [(done, n) for done, n, _ in seen] == [(i, total) for i in range(1, total + 1)], "one step at a time, to the end"
    assert [message for *_, message in seen[-2:]] == ["experiment 7: continuous batching", "experiment 7: static batching"]
    said = [line for line in report["script"] if line.startswith("[7] ")]
    assert [line.split(" s = ")[0].rsplit(" / ", 1)[0] for line in said] == ["[7] continuous: 200 tokens", "[7] static: 200 tokens"]
    assert all(f"short answers {b[mode]['short_mean_latency_s']:.2f} s" in line for mode, line in zip(("continuous", "static"), said))


def test_a_server_without_metrics_stops_the_lab_saying_so():
    """…after the warm-up, whose tokens were counted from the text chunks (this server sends no usage)."""
    fake = Fake(metrics_status=404, usage=False)
    with serving(fake), pytest.raises(experiments.LabError) as raised:
        run(fake)
    assert str(raised.value) == "GET /metrics answered 404"
    assert raised.value.script[-1].startswith("[0] warm-up: 40 tokens"), "what was measured before is kept"


def test_experiment_7s_short_answers_are_an_eighth_of_the_long_ones_and_never_under_4_tokens():
    assert [experiments.short_answer_tokens(n) for n in (40, 200, 39, 32, 31, 24, 1)] == [5, 25, 4, 4, 4, 4, 4]


def test_the_pool_is_sized_for_experiment_3s_request_with_the_lab_s_own_tag_and_clock():
    """services.min_num_blocks counts longest_messages(): the system prompt experiment 3 sends, its
    session tag and clock in the formats the lab writes them (8 digits; to the second), nothing more."""
    import re

    system = experiments.longest_messages()[0]["content"]
    assert re.fullmatch(r"현재 시각: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n\[세션 \d{8}\]\n", system[:-len(experiments.LONG_SYSTEM_PROMPT)])
    assert system.endswith(experiments.LONG_SYSTEM_PROMPT)
    assert experiments.longest_messages()[1:] == experiments.shared_prefix_messages("")[1:]


def test_a_failure_is_explained_in_the_learners_words_quoting_only_an_openai_error():
    import httpx2 as httpx  # what the openai client uses
    from openai import APIConnectionError, APIStatusError

    request = httpx.Request("POST", "http://127.0.0.1:8000/v1/chat/completions")

    def status(code, **body):
        return APIStatusError("x", response=httpx.Response(code, request=request, **body), body=None)

    assert experiments._explain(status(400, json={"error": {"message": "max_tokens is too large"}})) == \
        "the server answered 400: max_tokens is too large"
    long = experiments._explain(status(422, json={"error": {"message": "가" * 400}}))
    assert long == "the server answered 422: " + "가" * 300, "a long message is cut at 300 characters"
    assert experiments._explain(status(502, text="<html>bad gateway</html>")) == \
        "the server answered 502, not with an OpenAI-style error (is the base URL right?)", "a stranger's page is not echoed"
    assert experiments._explain(APIConnectionError(request=request)) == \
        "could not reach the server (is it running, and is the base URL right?)"
    assert experiments._explain(ValueError("no choices in the answer")) == "ValueError: no choices in the answer"


def test_the_servers_token_interval_is_the_histograms_mean_over_the_window_or_none():
    """From two scrapes of vllm:inter_token_latency_seconds: (Δsum ÷ Δcount) in ms; None when a
    scrape lacks the histogram or no token came out between them (nothing to divide)."""
    before, after = {"itl_sum": 1.0, "itl_count": 10.0}, {"itl_sum": 1.5, "itl_count": 110.0}
    assert experiments.token_interval_ms(before, after) == pytest.approx(5.0)
    assert experiments.token_interval_ms(before, {"itl_sum": 1.004, "itl_count": 11.0}) == pytest.approx(4.0), "one token"
    assert experiments.token_interval_ms(before, before) is None
    for missing in ("itl_sum", "itl_count"):
        partial = {k: v for k, v in after.items() if k != missing}
        assert experiments.token_interval_ms(before, partial) is None and experiments.token_interval_ms(partial, after) is None


def test_experiment_4s_samples_carry_the_clock_the_offset_and_this_models_gauges(lab):
    """Row 4's table: each sample's wall-clock time to the hundredth, its offset from experiment
    2's start in ms steps (rising), and running / waiting / KV usage of this model only."""
    import re

    _fake, report = lab
    series = report["series"]
    assert all(set(p) == {"time", "t", "running", "waiting", "kv"} for p in series)
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d\.\d\d", p["time"]) for p in series), series[0]["time"]
    offsets = [p["t"] for p in series]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets) and all(t == round(t, 3) for t in offsets)
    assert 0 <= offsets[0] < 5, "the first sample is taken as experiment 2 starts"
    assert all(p["waiting"] == 0.0 for p in series), "the other model's 7 waiting are not ours"
    assert sorted(int(m["label"]) for m in report["concurrent"]["requests"]) == list(range(1, 9))


def test_server_log_lines_are_marked_by_whether_they_fell_within_a_second_of_experiment_2():
    """The lines read since the lab began; a log's clock has whole seconds, so a second either
    side of experiment 2 counts; a line without a time is neither."""
    asked = []

    def read_logs(since):
        asked.append(since)
        return [{"time": t, "kind": "stats", "line": str(t)} for t in (98.9, 99.0, 105.0, 111.0, 111.1, None)]

    lab = experiments.Lab(LabSettings(base_url="http://x"), read_logs=read_logs)
    marked = lab._logs(42.0, [100.0, 110.0])
    assert asked == [42.0]
    assert [(e["line"], e["during_2"]) for e in marked] == [
        ("98.9", False), ("99.0", True), ("105.0", True), ("111.0", True), ("111.1", False), ("None", None)]
    assert marked[0]["kind"] == "stats" and marked[0]["time"] == 98.9
    assert experiments.Lab(LabSettings(base_url="http://x"))._logs(42.0, [100.0, 110.0]) is None, "no log to read"


def _scripted(lab, answer):
    """Replaces the lab's request with `answer(label, messages)` → Measured; returns the asks."""
    asked = []

    async def ask(api, label, messages, t0, max_tokens=None, ignore_eos=None):
        asked.append((label, messages))
        return answer(label, messages)

    lab._ask = ask
    return asked


def test_the_sweep_sends_each_level_at_once_and_reports_its_mean_rate_total_and_span():
    lab = experiments.Lab(LabSettings(base_url="http://x"))
    steps = []
    lab.on_progress = lambda p: steps.append((p.message, dict(p.params)))

    def answer(label, _messages):  # request i of a level: starts 0.1 s after the one before, 10 + i tokens in 2 s
        i = int(label.split("-")[1]) - 1
        return experiments.Measured(label, 0.1 * i, 0.01, 2.0, 600, 10 + i, 0, "답")

    asked = _scripted(lab, answer)
    levels = run_in_fresh_loop(lambda: lab._sweep(None, ["question"], 0.0))
    assert [label for label, _ in asked] == [f"x{n}-{i + 1}" for n in experiments.SWEEP_LEVELS for i in range(n)]
    assert all(messages == ["question"] for _, messages in asked)
    for level, n in zip(levels, experiments.SWEEP_LEVELS, strict=True):
        tokens, span = sum(10 + i for i in range(n)), 0.1 * (n - 1) + 2.0
        assert level == pytest.approx({"concurrency": n, "per_request_tokens_per_s": tokens / 2.0 / n,
                                       "server_tokens_per_s": tokens / span, "span_s": span})
    assert lab.script[1] == f"[sweep] 2 at once: 5.2 tok/s per request, {21 / 2.1:.1f} tok/s in all"
    assert steps == [("%(n)d requests at once", {"n": n}) for n in experiments.SWEEP_LEVELS]


def test_experiment_3_tags_its_run_and_stamps_each_stamped_request_with_a_second_of_its_own(monkeypatch):
    """The tag: this run's 8 digits, so a server that ran the lab before meets a cold cache. The
    stamp: the time to the second, a new second for the second request (the prompts must differ)."""
    monkeypatch.setattr(experiments.time, "time_ns", lambda: 1_234_567_891_234_567_890)
    lab = experiments.Lab(LabSettings(base_url="http://x"))
    steps = []
    lab.on_progress = lambda p: steps.append((p.message, dict(p.params)))
    # the last answer's first text never came (ttft None)
    asked = _scripted(lab, lambda label, _m: experiments.Measured(label, 0.0, None if label == "time-2" else 1.5, 2.0, 1545, 5, 0, "답"))
    pairs = run_in_fresh_loop(lambda: lab._shared_prefix(None, 0.0))
    assert [label for label, _ in asked] == ["same-1", "same-2", "time-1", "time-2"]
    systems = [messages[0]["content"] for _, messages in asked]
    assert systems[0] == systems[1] == "[세션 34567890]\n" + experiments.LONG_SYSTEM_PROMPT
    stamps = [system.removesuffix(systems[0]) for system in systems[2:]]
    assert all(re.fullmatch(r"현재 시각: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n", stamp) for stamp in stamps) and stamps[0] != stamps[1]
    assert [m["label"] for m in pairs["same"] + pairs["time"]] == ["same-1", "same-2", "time-1", "time-2"]
    assert steps == [("experiment 3: the same system prompt, %(i)d/2", {"i": 1}), ("experiment 3: the same system prompt, %(i)d/2", {"i": 2}),
                     ("experiment 3: the current time at the front, %(i)d/2", {"i": 1}),
                     ("experiment 3: the current time at the front, %(i)d/2", {"i": 2})]
    assert lab.script == [f"[3] {label}: prompt 1545 tokens, cached 0, ttft 1500 ms" for label in ("same-1", "same-2", "time-1")] + [
        "[3] time-2: prompt 1545 tokens, cached 0, ttft -"]


def test_experiment_2_counts_each_request_done_out_of_all(lab):
    fake, _report = lab
    steps = [params for message, params in fake.steps if message == "experiment 2: %(i)d of %(n)d at once done"]
    assert sorted(step["i"] for step in steps) == list(range(1, 9)) and all(step["n"] == 8 for step in steps)


def test_each_request_asks_this_model_greedily_with_usage_in_its_stream_and_the_text_is_kept_whole(lab):
    fake, report = lab
    experiment_2 = fake.bodies[2:10]
    assert all(body["model"] == "munuibot" and body["temperature"] == 0.0 and body["stream"] is True
               and body["stream_options"] == {"include_usage": True} and "ignore_eos" not in body for body in experiment_2)
    assert set(fake.auth) == {"Bearer EMPTY"}, "no key set: vLLM's placeholder"
    assert report["single"]["text"] == "".join(f"t{i} " for i in range(40))
    assert report["single"]["completion_tokens"] == 40 and report["single"]["prompt_tokens"] == 600, \
        "tokens from the usage: the fake sends the last two in one chunk"
    assert report["single"]["cached_tokens"] == 0, "the usage's prompt_tokens_details, read (not None)"
    assert 0 < report["single"]["elapsed"] < 60, "seconds from sending to the last chunk"
    warm, one = report["warmup"], report["single"]
    assert 0 <= warm["started"] < warm["started"] + warm["elapsed"] <= one["started"] < 60, \
        "each request's start in seconds since the lab began, the warm-up's before experiment 1's"


def test_a_failed_request_is_sent_once_with_the_key_and_a_silent_server_times_out():
    """No retries (a refusal is the lab's to report, and a retry would send the request twice);
    the learner's key and ignore_eos go with it; the lab's timeout bounds a server that stalls."""
    failing, stalling = Fake(post_status=500), Fake(stall_s=3.0)
    with serving(failing, stalling):
        with pytest.raises(experiments.LabError) as raised:
            run(failing, api_key="sekrit", ignore_eos=True)
        assert str(raised.value) == "the server answered 500: boom"
        assert raised.value.script == [f"server {failing.url}  model munuibot  temperature 0  max_tokens 40  ignore_eos"], \
            "the script so far goes with the failure (the run page shows it)"
        assert len(failing.bodies) == 1 and failing.auth == ["Bearer sekrit"] and failing.bodies[0]["ignore_eos"] is True
        with pytest.raises(experiments.LabError) as raised:
            run(stalling, timeout_s=0.5)
        assert str(raised.value) == "could not reach the server (is it running, and is the base URL right?)"


def test_one_request_of_one_token_is_a_lab_and_none_is_refused_before_anything_is_sent():
    """The smallest settings run (one request at once, one token each), its progress bar counting
    to its own end; zero of either is refused with the reason, and the server hears nothing."""
    fake = Fake()
    with serving(fake):
        seen = []
        report = run(fake, concurrency=1, max_tokens=1, on_progress=lambda p: seen.append((p.done, p.total)))
        assert len(report["concurrent"]["requests"]) == 1 and report["single"]["completion_tokens"] == 1
        total = 2 + 1 + 4 + len(experiments.SWEEP_LEVELS)  # no experiment 7 without a static engine
        assert seen == [(i, total) for i in range(1, total + 1)], "the bar ends full, not short of two steps"
        sent = len(fake.bodies)
        for knobs in ({"concurrency": 0}, {"max_tokens": 0}):
            with pytest.raises(experiments.LabError) as raised:
                run(fake, **knobs)
            assert str(raised.value) == "concurrency and max_tokens must be at least 1"
        assert len(fake.bodies) == sent


def test_the_report_keeps_its_settings_but_the_key_and_every_request_carries_the_key(lab):
    """The report (kept, downloadable) names the settings it ran with but never the learner's key;
    the key goes with every request, the scrapes of /metrics too (a server behind a proxy that
    checks it); the script's first line states the conditions as §6 asks (ignore_eos only when
    set); the warm-up and experiment 1 are labelled as the report shows them; the lab's timeout
    bounds a /metrics that stalls as it bounds an answer."""
    _fake, plain = lab
    assert plain["script"][0] == f"server {_fake.url}  model munuibot  temperature 0  max_tokens 40"
    assert (plain["warmup"]["label"], plain["single"]["label"]) == ("warm-up", "1")
    assert _fake.steps[:2] == [("warm-up, 1 request (discarded)", {}), ("experiment 1: one request", {})]
    fake, stalling = Fake(), Fake(metrics_stall_s=3.0)
    with serving(fake, stalling):
        report = run(fake, api_key="sekrit", ignore_eos=True, concurrency=2, max_tokens=3)
        with pytest.raises(experiments.LabError) as raised:
            run(stalling, timeout_s=0.5)
        assert str(raised.value) == "could not reach the server (is it running, and is the base URL right?)"
    settings = report["settings"]
    assert "api_key" not in settings and "sekrit" not in json.dumps(report)
    assert settings == {"base_url": fake.url, "model": "munuibot", "concurrency": 2, "max_tokens": 3, "temperature": 0.0,
                        "sample_every_s": 0.05, "ignore_eos": True, "launch_command": "", "timeout_s": 30,
                        "batching_urls": None}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", report["started_at"]), "to the second, with its zone"
    assert set(fake.auth) == set(fake.metrics_auth) == {"Bearer sekrit"} and fake.metrics_auth
    assert report["script"][0] == f"server {fake.url}  model munuibot  temperature 0  max_tokens 3  ignore_eos"


def test_the_report_holds_every_experiment_and_the_script_quotes_its_measurements(lab):
    """What the report page, the CSV and the text report read: every experiment's result under its
    key, the metric names found, the end time; the script's lines quote the measured numbers."""
    fake, report = lab
    assert [m["label"] for m in report["prefix"]["same"]] == ["same-1", "same-2"]
    assert [m["label"] for m in report["prefix"]["time"]] == ["time-1", "time-2"]
    assert [level["concurrency"] for level in report["sweep"]] == list(experiments.SWEEP_LEVELS)
    assert report["metric_names"] == {
        "running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting", "kv": "vllm:kv_cache_usage_perc",
        "preemptions": "vllm:num_preemptions_total", "itl_sum": "vllm:inter_token_latency_seconds_sum",
        "itl_count": "vllm:inter_token_latency_seconds_count"}
    assert report["started_at"] <= report["finished_at"] and len(report["finished_at"]) == len(report["started_at"])
    one, many = report["single"], report["concurrent"]
    assert f"[1] alone: ttft {one['ttft'] * 1000:.0f} ms, 40 tokens in {one['elapsed']:.2f} s" in report["script"][2]
    lines = [line for line in report["script"] if line.startswith("[2] #")]
    assert len(lines) == 8 and all(f"ttft {m['ttft'] * 1000:.0f} ms, 40 tokens" in line
                                   for line, m in zip(lines, many["requests"]))
    assert many["total_tokens"] == 320
    assert f"[2] server: 320 tokens / {many['span_s']:.2f} s = {many['server_tokens_per_s']:.1f} tok/s" in report["script"]


def test_series_a_server_starts_late_or_never_has_are_reported_as_unknown():
    """A server whose inter-token histogram appears only after experiment 1 (alone unknown), and
    whose preemption counter appears only during experiment 2 (no delta: it cannot be told from a
    restart); and one with neither: no metric named, no line about them."""
    late, never = Fake(itl_from=2, preemptions_from=3), Fake(itl_from=99, preemptions_from=99)
    with serving(late, never):
        reports = [run(fake) for fake in (late, never)]
    itl = reports[0]["concurrent"]["server_token_interval"]
    assert itl["alone_ms"] is None and itl["together_ms"] > 0 and itl["metric"] == "vllm:inter_token_latency_seconds"
    assert reports[0]["preemptions"]["before"] is None and reports[0]["preemptions"]["delta"] is None
    assert reports[1]["concurrent"]["server_token_interval"] == {"alone_ms": None, "together_ms": None, "metric": None}
    assert reports[1]["preemptions"] == {"before": None, "after": None, "delta": None}
    assert not any("a token every" in line or line.startswith("[5]") for r in reports for line in r["script"])


def test_the_servers_log_is_read_from_the_labs_start_and_marked_by_experiment_2s_window():
    """`read_logs` is asked for the lines since the lab began; a line written during experiment 2
    is marked so, one from long before is not (the report's [5] row reads these marks)."""
    fake = Fake()
    asked = []

    def read_logs(since):
        asked.append(since)
        return [{"time": since - 100, "kind": "stats", "line": "old"}, {"time": during[0], "kind": "stats", "line": "now"},
                {"time": None, "kind": "other", "line": "no clock"}]

    during = []
    with serving(fake):
        before = time.time()
        report = run(fake, on_progress=lambda p: during.append(time.time()) if p.message.startswith("experiment 2") else None,
                     read_logs=read_logs)
    assert len(asked) == 1 and before <= asked[0] <= during[0]
    assert [(e["line"], e["during_2"]) for e in report["logs"]] == [("old", False), ("now", True), ("no clock", None)]
