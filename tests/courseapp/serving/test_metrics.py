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


def snapshot(**values):
    fields = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "prefix_cache_queries_total",
              "prefix_cache_hits_total", "num_preemptions_total", "prompt_tokens_total", "generation_tokens_total")
    return SimpleNamespace(**{f: values.get(f, 0) for f in fields})


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
    assert value[("vllm:request_success_total", "stop")] == 1 and value[("vllm:request_success_total", "length")] == 1


def test_token_buckets_run_one_two_five_up_to_the_context():
    assert _one_two_five(2048) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
