"""/metrics holds every series vLLM's Grafana dashboard queries, labelled as vLLM labels them."""
from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from courseapp.serving.metrics import ServingMetrics, _one_two_five

# The series the 13 panels of vLLM's dashboard (examples/online_serving/prometheus_grafana/
# grafana.json, V1 names) read, with `model_name="$model_name"`.
DASHBOARD_SERIES = (
    "vllm:e2e_request_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_sum",
    "vllm:e2e_request_latency_seconds_count", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    "vllm:request_time_per_output_token_seconds_bucket", "vllm:request_time_per_output_token_seconds_sum",
    "vllm:request_time_per_output_token_seconds_count", "vllm:num_requests_running", "vllm:num_requests_waiting",
    "vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count", "vllm:kv_cache_usage_perc", "vllm:request_prompt_tokens_bucket",
    "vllm:request_generation_tokens_bucket", "vllm:request_success_total", "vllm:request_queue_time_seconds_sum",
    "vllm:request_prefill_time_seconds_sum", "vllm:request_decode_time_seconds_sum",
    "vllm:request_max_num_generation_tokens_sum",
)


SNAPSHOT_FIELDS = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "prefix_cache_queries_total",
                   "prefix_cache_hits_total", "num_preemptions_total", "prompt_tokens_total", "generation_tokens_total")


def snapshot(**values):
    return SimpleNamespace(**{f: values.get(f, 0) for f in SNAPSHOT_FIELDS})


def finished(tokens=10, ttft=0.5, e2e=1.4, queue=0.2):
    return SimpleNamespace(finish_reason="stop", token_ids=list(range(tokens)), metrics=SimpleNamespace(
        ttft=ttft, e2e=e2e, queue_time=queue, mean_itl=(e2e - ttft) / (tokens - 1)))


def samples(metrics: ServingMetrics) -> list:
    return [s for family in text_string_to_metric_families(metrics.exposition().decode()) for s in family.samples]


def test_every_series_the_dashboard_reads_is_there_with_vllms_labels():
    metrics = ServingMetrics("munuibot", snapshots=lambda: [("0", snapshot(prompt_tokens_total=30))])
    metrics.observe(finished(), prompt_tokens=30, max_tokens=64)
    found = samples(metrics)
    names = {s.name for s in found if s.labels.get("model_name") == "munuibot"}
    assert not set(DASHBOARD_SERIES) - names
    assert all(s.labels.get("engine") == "0" for s in found), "every series names its engine"
    assert not [s.name for s in found if s.name.endswith("_created")], "vLLM exports no *_created series"


def test_the_per_request_figures_are_vllms():
    metrics = ServingMetrics("munuibot")
    metrics.observe(finished(tokens=10, ttft=0.5, e2e=1.4, queue=0.2), prompt_tokens=30, max_tokens=64)
    value = {(s.name, s.labels.get("le")): s.value for s in samples(metrics)}
    assert value[("vllm:request_prefill_time_seconds_sum", None)] == 0.3  # first token − first scheduled
    assert abs(value[("vllm:request_decode_time_seconds_sum", None)] - 0.9) < 1e-9  # last token − first token
    assert abs(value[("vllm:request_inference_time_seconds_sum", None)] - 1.2) < 1e-9
    assert abs(value[("vllm:request_time_per_output_token_seconds_sum", None)] - 0.1) < 1e-9
    assert value[("vllm:request_prompt_tokens_sum", None)] == 30 and value[("vllm:request_generation_tokens_sum", None)] == 10
    assert value[("vllm:request_max_num_generation_tokens_sum", None)] == 64
    assert value[("vllm:inter_token_latency_seconds_count", None)] == 9
    assert value[("vllm:request_prompt_tokens_bucket", "50.0")] == 1 and value[("vllm:request_prompt_tokens_bucket", "20.0")] == 0


def test_each_latency_goes_to_its_own_histogram_and_every_finish_reason_is_counted():
    """Mutants (issue #34): the TTFT histogram fed the E2E time; request_success counted for
    `stop` only."""
    metrics = ServingMetrics("munuibot")
    metrics.observe(finished(tokens=10, ttft=0.5, e2e=1.4, queue=0.2), prompt_tokens=30, max_tokens=64)
    cut = finished(tokens=4, ttft=0.25, e2e=0.7, queue=0.1)
    cut.finish_reason = "length"
    metrics.observe(cut, prompt_tokens=30, max_tokens=4)
    value = {(s.name, s.labels.get("finished_reason")): s.value for s in samples(metrics) if s.labels.get("le") is None}
    assert value[("vllm:time_to_first_token_seconds_sum", None)] == 0.75
    assert abs(value[("vllm:e2e_request_latency_seconds_sum", None)] - 2.1) < 1e-9
    assert value[("vllm:time_to_first_token_seconds_count", None)] == 2
    assert value[("vllm:inter_token_latency_seconds_count", None)] == 9 + 3
    # a request of under a second keeps its own inference, prefill and decode times
    assert abs(value[("vllm:request_inference_time_seconds_sum", None)] - (1.2 + 0.6)) < 1e-9
    assert abs(value[("vllm:request_prefill_time_seconds_sum", None)] - (0.3 + 0.15)) < 1e-9
    assert abs(value[("vllm:request_decode_time_seconds_sum", None)] - (0.9 + 0.45)) < 1e-9
    assert value[("vllm:request_success_total", "stop")] == 1 and value[("vllm:request_success_total", "length")] == 1


def test_token_buckets_run_one_two_five_up_to_the_context():
    assert _one_two_five(2048) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)


def test_a_token_bucket_at_the_context_length_is_kept():
    assert _one_two_five(2000) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
    assert _one_two_five(1) == (1,) and _one_two_five(4) == (1, 2)


def test_a_request_aborted_before_its_first_token_counts_its_time_but_no_token_figures():
    """An aborted request (the client went away in the queue) has a queue and an end-to-end time,
    no first token and no decode; it is not a success."""
    metrics = ServingMetrics("munuibot")
    gone = SimpleNamespace(finish_reason="abort", token_ids=[], metrics=SimpleNamespace(
        ttft=None, e2e=0.3, queue_time=0.3, mean_itl=None))
    metrics.observe(gone, prompt_tokens=30, max_tokens=64)
    value = {s.name: s.value for s in samples(metrics) if s.labels.get("le") is None}
    assert value["vllm:e2e_request_latency_seconds_count"] == 1 and value["vllm:request_queue_time_seconds_sum"] == 0.3
    assert value["vllm:request_inference_time_seconds_sum"] == 0.0
    for name in ("time_to_first_token_seconds", "request_prefill_time_seconds", "request_decode_time_seconds",
                 "inter_token_latency_seconds", "request_time_per_output_token_seconds"):
        assert value.get(f"vllm:{name}_count", 0) == 0, name
    assert value["vllm:request_generation_tokens_count"] == 1 and value["vllm:request_generation_tokens_sum"] == 0
    assert "vllm:request_success_total" not in value


def test_before_the_engine_is_built_its_gauges_and_counters_read_zero_on_engine_0():
    found = samples(ServingMetrics("munuibot"))
    engine = {s.name: (s.labels, s.value) for s in found if s.name in (
        "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total", "vllm:prompt_tokens_total")}
    assert len(engine) == 4
    assert all(labels == {"model_name": "munuibot", "engine": "0"} and value == 0 for labels, value in engine.values())


# vLLM V1's help texts (vllm/v1/metrics/loggers.py): a scrape reads as vLLM's, word for word
VLLM_HELP = {
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:request_success": "Count of successfully processed requests.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:request_time_per_output_token_seconds": "Histogram of time_per_output_token_seconds per request.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e_request_latency_seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    "vllm:request_max_num_generation_tokens": "Histogram of maximum number of requested generation tokens.",
}


def test_every_family_says_what_vllm_says_it_is():
    metrics = ServingMetrics("munuibot", snapshots=lambda: [("0", snapshot())])
    families = {f.name: f.documentation for f in text_string_to_metric_families(metrics.exposition().decode())}
    assert families == VLLM_HELP


def test_each_engines_figures_are_read_from_its_snapshot_at_scrape_time():
    """Every gauge and counter comes from the engine's snapshot, per engine (a scaled server's
    two engines side by side), read when /metrics is scraped."""
    first = snapshot(**{f: i + 1 for i, f in enumerate(SNAPSHOT_FIELDS)})
    second = snapshot(**{f: 10 * (i + 1) for i, f in enumerate(SNAPSHOT_FIELDS)})
    metrics = ServingMetrics("munuibot", snapshots=lambda: [("0", first), ("1", second)])
    found = {(s.name, s.labels["engine"]): s.value for s in samples(metrics) if s.labels.get("model_name") == "munuibot"}
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
             "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
             "vllm:prompt_tokens_total", "vllm:generation_tokens_total")
    assert [found[(name, "0")] for name in names] == [float(i + 1) for i in range(8)]
    assert [found[(name, "1")] for name in names] == [float(10 * (i + 1)) for i in range(8)]
