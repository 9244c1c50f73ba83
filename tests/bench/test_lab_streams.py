"""bench/lab_streams.py's arithmetic on a lab report (the servers it starts are not run here)."""
from bench.lab_streams import figures
from tests.courseapp.lab.conftest import measured


def test_the_ratio_is_experiment_2s_mean_per_request_rate_over_experiment_1s():
    report = {"single": measured("1", tokens=200, elapsed=1.0),
              "concurrent": {"requests": [measured(str(i), tokens=200, elapsed=e) for i, e in enumerate((2.0, 2.5))],
                             "server_tokens_per_s": 160.0}}
    f = figures(report)
    assert f["alone"] == 200.0 and f["per_request_8"] == (100.0 + 80.0) / 2 and f["ratio"] == 0.45
    assert f["server_8"] == 160.0
    assert f["engine_ratio"] is None  # a report without the server's own measure


def test_the_servers_own_ratio_is_its_token_interval_alone_over_together():
    report = {"single": measured("1", tokens=200, elapsed=1.0),
              "concurrent": {"requests": [measured("0", tokens=200, elapsed=2.0)], "server_tokens_per_s": 100.0,
                             "server_token_interval": {"alone_ms": 1.5, "together_ms": 2.0, "metric": "m"}}}
    assert figures(report)["engine_ratio"] == 0.75
