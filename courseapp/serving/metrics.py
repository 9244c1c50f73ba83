"""`/metrics` in Prometheus' text format, under vLLM V1's names, types, buckets and labels
(`model_name`, `engine`), so a learner's scrape or vLLM's own Grafana dashboard
(examples/online_serving/prometheus_grafana/grafana.json) reads this server unchanged.

Each served engine (the site's, or a lab run's own) has its own registry: the engine's counters
(tokens, prefix-cache queries and hits, preemptions) and gauges (running, waiting, KV usage as a
0–1 ratio) are read from its snapshot at scrape time; the per-request histograms and the
finished-request counter are observed here as API requests end.
"""
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# vLLM exports no `*_created` series (prometheus_client adds one per counter and histogram).
disable_created_metrics()

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LABEL = ["model_name", "engine"]
# vLLM V1's buckets (vllm/v1/metrics/loggers.py)
_LATENCY = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_REQUEST = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
            960.0, 1920.0, 7680.0)


def _one_two_five(limit: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, … up to `limit` (vLLM's build_1_2_5_buckets over max_model_len)."""
    out, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > limit:
                return tuple(out)
            out.append(m * scale)
        scale *= 10

# (family, name, help, snapshot field): read from the engine at scrape time.
_FROM_SNAPSHOT = (
    (GaugeMetricFamily, "vllm:num_requests_running", "Number of requests in model execution batches.", "num_requests_running"),
    (GaugeMetricFamily, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", "num_requests_waiting"),
    (GaugeMetricFamily, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "kv_cache_usage_perc"),
    (CounterMetricFamily, "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
     "prefix_cache_queries_total"),
    (CounterMetricFamily, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", "prefix_cache_hits_total"),
    (CounterMetricFamily, "vllm:num_preemptions", "Cumulative number of preemption from the engine.", "num_preemptions_total"),
    (CounterMetricFamily, "vllm:prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens_total"),
    (CounterMetricFamily, "vllm:generation_tokens", "Number of generation tokens processed.", "generation_tokens_total"),
)


class ServingMetrics:
    """One served engine's /metrics. `snapshots` gives [(engine label, snapshot)] at scrape time:
    one per engine serving it (none before the first request built it: zeros then)."""

    def __init__(self, model_name: str, snapshots=lambda: [], max_model_len: int = 32768):  # pragma: no mutate (the token buckets end at 20000 for any length from 20000 to 49999)
        self.model_name = model_name
        self.snapshots = snapshots
        self.registry = CollectorRegistry()
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               [*_LABEL, "finished_reason"], registry=self.registry)
        h = self._histogram
        self.ttft = h("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", _LATENCY)
        self.itl = h("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", _TPOT)
        self.tpot = h("vllm:request_time_per_output_token_seconds",
                      "Histogram of time_per_output_token_seconds per request.", _TPOT)
        self.e2e = h("vllm:e2e_request_latency_seconds", "Histogram of e2e_request_latency_seconds.", _REQUEST)
        self.queue = h("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", _REQUEST)
        self.inference = h("vllm:request_inference_time_seconds",
                           "Histogram of time spent in RUNNING phase for request.", _REQUEST)
        self.prefill = h("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", _REQUEST)
        self.decode = h("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", _REQUEST)
        tokens = _one_two_five(max_model_len)
        self.prompt_len = h("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens)
        self.generation_len = h("vllm:request_generation_tokens", "Number of generation tokens processed.", tokens)
        self.max_generation = h("vllm:request_max_num_generation_tokens",
                                "Histogram of maximum number of requested generation tokens.", tokens)
        self.registry.register(self)

    def _histogram(self, name: str, help_text: str, buckets) -> Histogram:
        return Histogram(name, help_text, _LABEL, buckets=buckets, registry=self.registry)

    def observe(self, output, *, prompt_tokens: int | None = None, max_tokens: int | None = None,
                engine: str = "0") -> None:
        """A finished API request: its latencies, lengths and why it ended (vLLM V1's per-request
        figures: prefill = first token − first scheduled, decode = last token − first token)."""
        labels = (self.model_name, engine)
        if output.finish_reason in ("stop", "length"):
            self.success.labels(*labels, output.finish_reason).inc()
        m = output.metrics
        generated = len(output.token_ids)
        if prompt_tokens is not None:
            self.prompt_len.labels(*labels).observe(prompt_tokens)
        self.generation_len.labels(*labels).observe(generated)
        if max_tokens is not None:
            self.max_generation.labels(*labels).observe(max_tokens)
        if m.ttft is not None:
            self.ttft.labels(*labels).observe(m.ttft)
        if m.mean_itl is not None:
            # The engine reports the mean gap, so each gap is observed at the mean: count and sum
            # are vLLM's exactly, only how the gaps spread over the buckets is lost.
            for _ in range(generated - 1):
                self.itl.labels(*labels).observe(m.mean_itl)
            self.tpot.labels(*labels).observe(m.mean_itl)
        if m.e2e is not None:
            self.e2e.labels(*labels).observe(m.e2e)
        if m.queue_time is not None:
            self.queue.labels(*labels).observe(m.queue_time)
            if m.e2e is not None:
                self.inference.labels(*labels).observe(max(0.0, m.e2e - m.queue_time))
            if m.ttft is not None:
                self.prefill.labels(*labels).observe(max(0.0, m.ttft - m.queue_time))
        if m.ttft is not None and m.e2e is not None:
            self.decode.labels(*labels).observe(max(0.0, m.e2e - m.ttft))

    def describe(self):
        """The families collect() yields, without asking the engine (called at registration, which
        reads only their names)."""
        for family, metric, help_text, _field in _FROM_SNAPSHOT:
            yield family(metric, help_text, labels=_LABEL)  # pragma: no mutate (only the name is read)

    def collect(self):
        """The engines' counters and gauges, read when Prometheus scrapes (a registry collector)."""
        snaps = self.snapshots() or [("0", None)]
        for family, metric, help_text, field in _FROM_SNAPSHOT:
            sample = family(metric, help_text, labels=_LABEL)
            for engine, snap in snaps:
                sample.add_metric([self.model_name, engine], getattr(snap, field) if snap is not None else 0)
            yield sample

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
