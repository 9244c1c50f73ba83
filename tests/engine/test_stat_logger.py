"""The server log as vLLM writes it: V1's periodic stats line, and V0's preemption warning only
when asked for (V1 logs no preemption; the counter is the signal)."""
import logging

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.engine_loop import EngineLoop
from engine.stat_logger import StatLogger
from tests.engine.test_parity import prompts


def _snapshot(tiny_llama, **config):
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=64, **config))
    return engine


def test_v1_line_reports_the_intervals_throughput_and_the_engines_state(tiny_llama):
    engine = _snapshot(tiny_llama)
    logger = StatLogger(interval_s=10.0)
    logger.log_stats(engine.metrics_snapshot(), now=logger._last_at)  # idle after idle: nothing written
    assert not logger.entries
    ps = prompts(2, seed=61)
    engine.generate(ps, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    start = logger._last_at
    entry = logger.log_stats(engine.metrics_snapshot(), now=start + 2.0)
    prompt_tokens = sum(len(p) for p in ps)
    assert entry.text == (
        f"Engine 000: Avg prompt throughput: {prompt_tokens / 2:.1f} tokens/s, Avg generation throughput: {12 / 2:.1f} tokens/s, "
        "Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%")
    assert entry.line().startswith("INFO ") and "[loggers.py] Engine 000:" in entry.line()
    # The next interval is idle: one line says so (throughput 0), then the log stays quiet.
    quiet = logger.log_stats(engine.metrics_snapshot(), now=start + 4.0)
    assert "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s" in quiet.text
    assert logger.log_stats(engine.metrics_snapshot(), now=start + 6.0) is None
    assert len(logger.since(0)) == 2


def test_v0_warning_only_with_its_option_on_the_1st_and_every_50th(caplog):
    quiet, loud = StatLogger(), StatLogger(v0_preemption_warnings=True)
    with caplog.at_level(logging.WARNING, logger="engine.stats"):
        for i in range(101):
            for logger in (quiet, loud):
                logger.on_preempted([{"request_id": f"r{i}", "mode": "recompute"}])
    assert quiet.entries == type(quiet.entries)()
    lines = [e.text for e in loud.entries]
    assert [line.rsplit("=", 1)[1] for line in lines] == ["1", "51", "101"]
    assert lines[0].startswith("Sequence group r0 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.")
    assert all(e.kind == "v0_preemption" and e.level == "WARNING" for e in loud.entries)
    assert len([r for r in caplog.records if "preempted" in r.getMessage()]) == 3


def test_the_engine_loop_writes_the_line_while_it_works_and_counts_preemptions(tiny_llama):
    # 12 blocks of 4 cannot hold three answers of 24 tokens: the engine preempts.
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=12, max_num_seqs=3, max_num_batched_tokens=64))
    logger = StatLogger(interval_s=0.0, v0_preemption_warnings=True)
    loop = EngineLoop(engine, stat_logger=logger).start()
    try:
        handles = [loop.submit(p, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)) for p in prompts(3, seed=62)]
        for handle in handles:
            handle.result(timeout=60)
    finally:
        loop.stop()
    stats = [e for e in logger.entries if e.kind == "stats"]
    warnings = [e for e in logger.entries if e.kind == "v0_preemption"]
    assert stats and any("Running: " in e.text and "Running: 0 reqs" not in e.text for e in stats)
    assert engine.scheduler.num_preemptions > 0 and warnings, "a preemption, and V0's warning for its first"
    assert warnings[0].text.endswith("total_num_cumulative_preemption=1")
