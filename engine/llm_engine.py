"""LLMEngine: add requests, step, read outputs. One step = schedule → run → postprocess → event."""
import itertools
import logging
import time

import torch

from engine.block_pool import BlockPool
from engine.config import ConfigError, EngineConfig
from engine.detokenizer import IncrementalDetokenizer
from engine.events import BlockState, ScheduledItem, StepEvent
from engine.kv_cache import KVCache
from engine.logits_processors import logprobs_of, process
from engine.metrics import EngineMetrics, MetricsSnapshot
from engine.model_runner import LoadedModel, ModelRunner, compiled, decode_kernel, load_model
from engine.outputs import RequestOutput
from engine.request import Request, Status
from engine.sampling import SamplingParams, sample
from engine.scheduler import CpuBlocks, Scheduler, SchedulerOutput

logger = logging.getLogger("engine")


class RequestError(ValueError):
    """A request the engine refuses before doing any work; the message names the limit, `param`
    the parameter at fault when one is."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class EngineStalled(RuntimeError):
    """A step that could neither schedule nor preempt anything while requests wait: the engine
    would spin forever (a scheduler bug). Raised instead, so the runs on it end with a reason."""


class LLMEngine:
    def __init__(self, config: EngineConfig | None = None, loaded: LoadedModel | None = None):
        self.config = config or EngineConfig()
        self.loaded = loaded or load_model(self.config.model, self.config.device, self.config.dtype)
        if self.config.compile:
            self.loaded = compiled(self.loaded)
        self.tokenizer = self.loaded.tokenizer
        cfg = self.config
        num_blocks = cfg.num_blocks or cfg.kv_cache_memory_bytes // self.loaded.shape.bytes_per_block(cfg.block_size, self.loaded.dtype)
        if num_blocks < cfg.max_num_seqs:
            raise ConfigError(
                f"the KV pool has {num_blocks} blocks, fewer than max_num_seqs={cfg.max_num_seqs}: "
                "every running request needs at least one block"
            )
        self.num_blocks = num_blocks
        self.max_model_len = min(cfg.max_model_len or self.loaded.max_model_len, self.loaded.max_model_len)
        num_cpu_blocks = (cfg.num_cpu_blocks or num_blocks) if cfg.preemption_mode == "swap" else 0
        self.kv = KVCache(self.loaded.shape, num_blocks, cfg.block_size, self.loaded.dtype, self.loaded.device, num_cpu_blocks)
        self.pool = BlockPool(num_blocks, cfg.enable_prefix_caching)
        self.scheduler = Scheduler(
            cfg, self.pool, self.kv, CpuBlocks(num_cpu_blocks) if num_cpu_blocks else None,
            max_tokens_per_request=min(self.max_model_len, num_blocks * cfg.block_size),
        )
        self.runner = ModelRunner(self.loaded, self.kv, decode_kernel(cfg.attention_backend, self.loaded, cfg.block_size),
                                  warm_up=(cfg.max_num_batched_tokens, cfg.max_num_seqs))
        self.metrics = EngineMetrics()
        self.requests: dict[str, Request] = {}
        self.step_count = 0
        self.started = time.monotonic()
        self._ids = itertools.count()

    # --- requests ------------------------------------------------------------------------------
    def add_request(self, prompt, params: SamplingParams | dict | None = None, request_id: str | None = None) -> str:
        """Queue a prompt (text or token ids). Bad input raises RequestError before any work."""
        if isinstance(params, dict):
            params = SamplingParams.from_dict(params)
        params = params or SamplingParams()
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise RequestError("this model has no tokenizer: pass token ids")
            token_ids, text = self.tokenizer.encode(prompt), prompt
        else:
            token_ids, text = [int(t) for t in prompt], None
        if not token_ids:
            raise RequestError("the prompt is empty")
        limit = self.scheduler.max_tokens_per_request
        if len(token_ids) >= self.max_model_len:
            raise RequestError(
                f"the prompt has {len(token_ids)} tokens; the model's context (max_model_len) is {self.max_model_len}"
            )
        if len(token_ids) >= limit:
            raise RequestError(
                f"the prompt has {len(token_ids)} tokens; the whole KV pool holds {self.num_blocks} blocks × "
                f"{self.config.block_size} = {self.num_blocks * self.config.block_size} tokens"
            )
        outside = [t for t in (params.logit_bias or {}) if not 0 <= t < self.vocab_size]
        if outside:
            raise RequestError(f"logit_bias names token ids outside the vocabulary (0 to {self.vocab_size - 1}): {outside[:5]}", "logit_bias")
        request_id = request_id or f"req-{next(self._ids)}"
        if request_id in self.requests and not self.requests[request_id].status.finished:
            raise RequestError(f"request id {request_id!r} is already in use")
        req = Request(request_id, token_ids, params, prompt=text)
        if params.prompt_logprobs is not None:
            req.prompt_logprobs.append(None)  # nothing comes before the first token to score it
        if params.seed is not None:
            req.generator = torch.Generator(device=self.loaded.device).manual_seed(params.seed)
        self.requests[request_id] = req
        self.scheduler.add(req)
        return request_id

    @property
    def vocab_size(self) -> int:
        """Token ids run from 0 to this − 1 (the LM head's rows)."""
        return self.loaded.model.get_output_embeddings().weight.shape[0]

    def encode_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
        """Token ids for a chat, through the model's own chat template, ready for the answer."""
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise RequestError("this model has no chat template: send a plain prompt")
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def abort_request(self, request_id: str) -> bool:
        req = self.requests.get(request_id)
        if req is None or req.status.finished:
            return False
        req.finish_time = time.monotonic()
        self.scheduler.finish(req, Status.FINISHED_ABORTED)
        self.metrics.on_finish(req)
        return True

    def release(self, request_id: str) -> None:
        """Forget a finished request once its caller holds the last output: a server's engine
        would otherwise keep every request it ever served (prompt, tokens, logprobs)."""
        req = self.requests.get(request_id)
        if req is not None and req.status.finished:
            del self.requests[request_id]

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    def output(self, request_id: str) -> RequestOutput:
        """The request so far. Its text only ever grows, so a stream can send the difference: an
        unfinished request's text leaves out what may still turn out to be a stop string."""
        req = self.requests[request_id]
        self._detokenize(req)
        text = req.text
        if req.params.stop and not req.status.finished:
            text = text[: len(text) - _stop_prefix_len(text, req.params.stop)]
        return RequestOutput.of(req, text)

    def _detokenize(self, req: Request) -> None:
        """Text is decoded when someone reads it (or a stop string needs it), not every step:
        only the new tokens while the answer grows, the whole answer once when it has ended
        (engine/detokenizer.py)."""
        if self.tokenizer is None or isinstance(req.stop_reason, str):
            return  # no tokenizer, or a stop string already cut the text
        if req.status.finished:
            req.text = self._detokenizer(req).finish(req.output_token_ids)
        else:
            req.text = self._detokenizer(req).update(req.output_token_ids)

    def _detokenizer(self, req: Request) -> IncrementalDetokenizer:
        if req.detokenizer is None:
            req.detokenizer = IncrementalDetokenizer(self.tokenizer)
        return req.detokenizer

    # --- the step ------------------------------------------------------------------------------
    def step(self, picture: bool = True) -> StepEvent:
        """One step: schedule → run → postprocess → its event. `picture=False` leaves the pool's
        picture out of the event (blocks, block tables, gauges): a serving loop nobody watches
        skips that walk over every block, which costs as much as a tenth of a decode step."""
        began = time.monotonic()
        sched = self.scheduler.schedule()
        batch = sched.scheduled
        if not batch and not sched.preempted and self.scheduler.has_unfinished():
            s = self.scheduler
            raise EngineStalled(f"step {self.step_count + 1} scheduled nothing: {len(s.running)} running, "
                                f"{len(s.waiting)} waiting, {len(s.swapped)} swapped, {self.pool.num_free_blocks} free blocks")
        sampled: dict[str, int] = {}
        if batch:
            reqs, logits, prompt_spans = self.runner.execute(batch)
            if prompt_spans:
                self._score_prompts(prompt_spans, logits[len(reqs):])
                logits = logits[: len(reqs)]
            processed = process(logits, reqs, self.loaded.eos_token_ids)
            tokens = sample(processed, [r.params for r in reqs], [r.generator for r in reqs])
            sampled = {r.request_id: t for r, t in zip(reqs, tokens)}
            self._record_logprobs(reqs, logits, tokens)
        finished = self._postprocess(batch, sampled)
        self.step_count += 1
        return self._event(sched, batch, sampled, finished, began, picture)

    def _record_logprobs(self, reqs: list[Request], raw: torch.Tensor, tokens: list[int]) -> None:
        """Each asking request's sampled token under the raw model (vLLM V1's default
        `logprobs_mode`: before penalties, temperature and top-k/top-p)."""
        rows = [i for i, r in enumerate(reqs) if r.params.logprobs is not None]
        for k in {reqs[i].params.logprobs for i in rows}:
            same = [i for i in rows if reqs[i].params.logprobs == k]
            for i, entry in zip(same, logprobs_of(raw[same], [tokens[i] for i in same], k)):
                reqs[i].logprobs.append(entry)

    def _score_prompts(self, spans: list, logits: torch.Tensor) -> None:
        """Prompt logprobs: the logits at position p score prompt token p + 1."""
        at = 0
        for req, first, count in spans:
            scored = req.prompt_token_ids[first + 1: first + 1 + count]
            req.prompt_logprobs += logprobs_of(logits[at: at + count], scored, req.params.prompt_logprobs)
            at += count

    def _postprocess(self, batch, sampled) -> list[tuple[Request, list[int]]]:
        now = time.monotonic()
        finished = []
        prompt_tokens = 0
        for req, n in batch:
            self.scheduler.on_computed(req, n)
            token = sampled.get(req.request_id)
            if token is None:
                continue
            req.output_token_ids.append(token)
            req.token_times.append(now)
            if req.first_token_time is None:
                req.first_token_time = now
                # The whole prompt counts once, at its first token, cached tokens included: vLLM
                # V1's vllm:prompt_tokens_total and its log line's prompt throughput.
                prompt_tokens += req.num_prompt_tokens
            status = self._check_stop(req, token)
            if status is not None:
                req.finish_time = now
                freed = self.scheduler.finish(req, status)
                self.metrics.on_finish(req)
                finished.append((req, freed))
        self.metrics.on_step(prompt_tokens, len(sampled), now)
        return finished

    def _check_stop(self, req: Request, token: int) -> Status | None:
        p = req.params
        if not p.ignore_eos and token in self.loaded.eos_token_ids:
            return Status.FINISHED_STOPPED
        if token in p.stop_token_ids:
            req.stop_reason = token
            return Status.FINISHED_STOPPED
        if len(req.output_token_ids) <= p.min_tokens:
            stops = ()  # as vLLM: no stop string ends an answer shorter than min_tokens
        else:
            stops = p.stop
        if stops and self.tokenizer is not None:
            req.text = self._detokenizer(req).update(req.output_token_ids)
        for stop in stops:
            at = req.text.find(stop)
            if at >= 0:
                req.text = req.text[:at]
                req.stop_reason = stop
                return Status.FINISHED_STOPPED
        if len(req.output_token_ids) >= p.max_tokens or req.num_tokens >= self.scheduler.max_tokens_per_request:
            return Status.FINISHED_LENGTH
        return None

    # --- reading the state ---------------------------------------------------------------------
    def metrics_snapshot(self) -> MetricsSnapshot:
        s = self.scheduler
        used = filled = 0
        for b in self.pool.blocks:
            if b.ref_cnt > 0:
                used += 1
                filled += b.num_tokens
        allocated = used * self.config.block_size
        prompt_tp, gen_tp = self.metrics.throughput()
        return MetricsSnapshot(
            num_requests_running=len(s.running),
            num_requests_waiting=len(s.waiting),
            num_requests_swapped=len(s.swapped),
            kv_blocks_total=self.num_blocks,
            kv_blocks_used=used,
            kv_blocks_cached=self.pool.num_cached_free_blocks,
            kv_tokens_allocated=allocated,
            kv_tokens_used=filled,
            kv_cache_usage_perc=used / self.num_blocks,
            wasted_slots=allocated - filled,
            prefix_cache_queries_total=s.prefix_queries,
            prefix_cache_hits_total=s.prefix_hits,
            num_preemptions_total=s.num_preemptions,
            prompt_tokens_total=self.metrics.prompt_tokens_total,
            generation_tokens_total=self.metrics.generation_tokens_total,
            requests_finished_total=self.metrics.requests_finished_total,
            prompt_throughput=prompt_tp,
            generation_throughput=gen_tp,
        )

    def block_tables(self) -> dict[str, list[int]]:
        s = self.scheduler
        return {r.request_id: list(r.block_ids) for r in [*s.running, *s.waiting, *s.swapped] if r.block_ids}

    def _event(self, sched: SchedulerOutput, batch, sampled, finished, began, picture: bool) -> StepEvent:
        s = self.scheduler
        event = StepEvent(
            step=self.step_count,
            time=began - self.started,
            duration_ms=(time.monotonic() - began) * 1000,
            num_blocks=self.num_blocks,
            block_size=self.config.block_size,
            scheduled=[
                ScheduledItem(
                    request_id=r.request_id,
                    prefill_tokens=n if n > 1 or r.num_computed_tokens <= r.num_prompt_tokens else 0,
                    decode_tokens=1 if n == 1 and r.num_computed_tokens > r.num_prompt_tokens else 0,
                    num_computed_tokens=r.num_computed_tokens,
                    num_tokens=r.num_tokens,
                )
                for r, n in batch
            ],
            admitted=[r.request_id for r in sched.admitted],
            finished=[{"request_id": r.request_id, "reason": r.status.value} for r, _ in finished],
            preempted=[{"request_id": r.request_id, "mode": mode} for r, mode in sched.preempted],
            swapped_in=[r.request_id for r in sched.swapped_in],
            allocated=[{"request_id": rid, "block_ids": ids} for rid, ids in sched.allocated],
            freed=[{"request_id": rid, "block_ids": ids} for rid, ids in sched.freed]
            + [{"request_id": r.request_id, "block_ids": ids} for r, ids in finished],
            prefix_hits=[{"request_id": rid, "block_ids": ids, "tokens": t} for rid, ids, t in sched.prefix_hits],
            new_tokens=sampled,
            waiting=[r.request_id for r in s.waiting],
            running=[r.request_id for r in s.running],
            swapped=[r.request_id for r in s.swapped],
        )
        if picture:
            snapshot = self.metrics_snapshot()
            event.blocks = [
                BlockState(b.block_id, b.ref_cnt, b.num_tokens, b.block_hash is not None, sorted(b.owners))
                for b in self.pool.blocks
                if b.ref_cnt > 0 or b.block_hash is not None
            ]
            event.block_tables = self.block_tables()
            event.metrics = {
                "kv_cache_usage_perc": snapshot.kv_cache_usage_perc,
                "kv_blocks_used": snapshot.kv_blocks_used,
                "kv_tokens_used": snapshot.kv_tokens_used,
                "wasted_slots": snapshot.wasted_slots,
                "prefix_cache_hit_rate": snapshot.prefix_cache_hit_rate,
                "num_preemptions_total": snapshot.num_preemptions_total,
                "generation_throughput": snapshot.generation_throughput,
            }
        return event

    # --- convenience ---------------------------------------------------------------------------
    def generate(self, prompts, params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        """Run prompts to completion together (continuous batching) and return outputs in order."""
        if isinstance(prompts, (str,)) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        plist = params if isinstance(params, list) else [params] * len(prompts)
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, plist)]
        while any(not self.requests[i].status.finished for i in ids):
            self.step(picture=False)  # nobody draws these steps: no walk over the pool
        return [self.output(i) for i in ids]


def _stop_prefix_len(text: str, stops: list[str]) -> int:
    """How many of the text's last characters could begin a stop string (held back from a stream)."""
    held = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), held, -1):
            if text.endswith(stop[:k]):
                held = k
                break
    return held
