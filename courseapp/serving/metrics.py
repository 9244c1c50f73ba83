"""`/metrics` in Prometheus' text format, under vLLM V1's names, types and meanings (label
`model_name`), so a learner's scrape or dashboard made for vLLM reads this server unchanged.

Each served engine (the site's, or a lab run's own) has its own registry: the engine's counters
(tokens, prefix-cache queries and hits, preemptions) and gauges (running, waiting, KV usage as a
0–1 ratio) are read from its snapshot at scrape time; the per-request histograms and the
finished-request counter are observed here as API requests end.
"""
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LABEL = ["model_name"]
_LATENCY = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)

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

    def __init__(self, model_name: str, snapshots=lambda: []):
        self.model_name = model_name
        self.snapshots = snapshots
        self.registry = CollectorRegistry(auto_describe=True)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               [*_LABEL, "finished_reason"], registry=self.registry)
        self.ttft = self._histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.")
        self.itl = self._histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.")
        self.e2e = self._histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.")
        self.queue = self._histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.")
        self.registry.register(self)

    def _histogram(self, name: str, help_text: str) -> Histogram:
        return Histogram(name, help_text, _LABEL, buckets=_LATENCY, registry=self.registry)

    def observe(self, output) -> None:
        """A finished API request: its latencies and why it ended."""
        name = self.model_name
        if output.finish_reason in ("stop", "length"):
            self.success.labels(name, output.finish_reason).inc()
        m = output.metrics
        if m.ttft is not None:
            self.ttft.labels(name).observe(m.ttft)
        if m.mean_itl is not None:
            # The engine reports the mean gap, so each gap is observed at the mean: count and sum
            # are vLLM's exactly, only how the gaps spread over the buckets is lost.
            for _ in range(max(0, len(output.token_ids) - 1)):
                self.itl.labels(name).observe(m.mean_itl)
        if m.e2e is not None:
            self.e2e.labels(name).observe(m.e2e)
        if m.queue_time is not None:
            self.queue.labels(name).observe(m.queue_time)

    def describe(self):
        """The families collect() yields, without asking the engine (called at registration)."""
        for family, metric, help_text, _field in _FROM_SNAPSHOT:
            yield family(metric, help_text, labels=[*_LABEL, "engine"])

    def collect(self):
        """The engines' counters and gauges, read when Prometheus scrapes (a registry collector)."""
        snaps = self.snapshots() or [("0", None)]
        for family, metric, help_text, field in _FROM_SNAPSHOT:
            sample = family(metric, help_text, labels=[*_LABEL, "engine"])
            for engine, snap in snaps:
                sample.add_metric([self.model_name, engine], getattr(snap, field) if snap is not None else 0)
            yield sample

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
