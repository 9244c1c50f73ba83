"""Engine step events → what the browser draws. Pure data, no engine import.

Every frame is a complete picture of each lane (pool, block tables, queues, stats, timeline);
viewers receive it as a delta from the frame before (traces.FrameStream). Frames are coalesced:
at most one per 1/MAX_FPS seconds, the latest state wins.
"""
import time

MAX_FPS = 30
MAX_TIMELINE = 400  # steps kept per request for drawing
LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

# Timeline codes, one character per step (the lesson's §3.2 picture):
# P prompt chunk · D decode · F finished · W waiting · R running, not scheduled (budget)
# X preempted · S swapped out · I idle: finished, but static batching keeps its seat until the
# whole batch ends (figure 3.2's "·") · space = not there
PRIORITY = "FXPDSWR"
LOG_KEPT = 40  # log entries kept (the browser shows them all; a scene makes far fewer)


class LaneState:
    """One engine's picture, updated from its step events."""

    def __init__(self, name: str, label: str, config: dict):
        self.name, self.label, self.config = name, label, config
        self.step = 0
        self.num_blocks = config.get("num_blocks", 0)
        self.block_size = config.get("block_size", 16)
        self.static = config.get("scheduling") == "static"
        self.blocks: list = []
        self.tables: dict[str, list[int]] = {}
        self.queues = {"waiting": [], "running": [], "swapped": []}
        self.requests: dict[str, dict] = {}  # id → label, owner, status, counts, text
        self.timeline: dict[str, str] = {}
        self.stats: dict = {}
        self.log: list[dict] = []  # what happened, as data: the browser words it in the UI's language
        self.engine_s = 0.0  # the engine's own time for every step so far (no pauses, no step delay)
        self.peak_running = 0
        self.peak_kv = (0.0, 0)  # highest KV usage (%, blocks): the end screen keeps it
        self.prompt_computed = 0  # prompt tokens the engine computed (a prefix hit skips them)
        self.idle_slots = 0  # static batching: seats held by finished requests, step by step
        self._batch_done: set[str] = set()  # static: finished, but their batch still runs
        self.block_text: dict[str, list[str]] = {}  # request → the text each of its blocks holds

    def add_request(self, rid: str, owner: str = "", prompt_preview: str = "", prompt_tokens: int = 0, max_tokens: int = 0) -> None:
        label = LABELS[len(self.requests) % 26] + ("" if len(self.requests) < 26 else str(len(self.requests) // 26))
        self.requests[rid] = {
            "id": rid, "label": label, "owner": owner, "status": "waiting", "prompt": prompt_preview,
            "prompt_tokens": prompt_tokens, "max_tokens": max_tokens, "output_tokens": 0, "cached_tokens": 0, "text": "",
            "preemptions": 0, "first_step": None, "last_step": None, "tok_s": 0.0, "finish_reason": "",
            "arrived_s": self.engine_s, "e2e_s": 0.0,
        }
        self.timeline[rid] = " " * self.step
        self.queues["waiting"].append(rid)  # the engine queued it; the next step event confirms

    def _label(self, rid: str) -> str:
        return self.requests[rid]["label"] if rid in self.requests else rid

    def _note(self, kind: str, rid: str, **facts) -> None:
        self.log.append({"step": self.step, "kind": kind, "req": self._label(rid), **facts})

    def apply(self, event: dict, texts: dict[str, str] | None = None) -> None:
        self.step = event["step"]
        self.num_blocks, self.block_size = event["num_blocks"], event["block_size"]
        self.engine_s += event["duration_ms"] / 1000
        self.blocks = [[b["block_id"], b["ref_cnt"], b["filled"], int(b["cached"]), b["owners"]] for b in event["blocks"]]
        self.tables = event["block_tables"]
        self.queues = {k: list(event[k]) for k in ("waiting", "running", "swapped")}
        self.peak_running = max(self.peak_running, len(self.queues["running"]) + len(event["finished"]))
        codes = {}
        for rid in self.queues["running"]:
            codes[rid] = "R"
        for rid in self.queues["waiting"]:
            codes[rid] = "W"
        for rid in self.queues["swapped"]:
            codes[rid] = "S"
        for item in event["scheduled"]:
            codes[item["request_id"]] = "P" if item["prefill_tokens"] else "D"
            self.prompt_computed += item["prefill_tokens"]
        hits = {hit["request_id"]: hit for hit in event["prefix_hits"]}
        freed = {f["request_id"]: len(f["block_ids"]) for f in event["freed"]}
        for rid in event["admitted"]:
            req = self.requests.get(rid)
            if req and req["preemptions"]:  # back after a preemption: its KV is computed again
                self._note("recompute", rid, tokens=req["prompt_tokens"] + req["output_tokens"],
                           cached=hits.get(rid, {}).get("tokens", 0))
        for rid in event["swapped_in"]:
            self._note("swap_in", rid)
        for p in event["preempted"]:
            rid = p["request_id"]
            codes[rid] = "X"
            req = self.requests.get(rid)
            if req:
                req["preemptions"] += 1
            self._note("preempt", rid, mode=p["mode"], blocks=freed.get(rid, 0))
        for rid, hit in hits.items():
            req = self.requests.get(rid)
            if req and not req["preemptions"]:
                req["cached_tokens"] = hit["tokens"]
                sharers = sorted({self._label(o) for b in self.blocks if b[0] in set(hit["block_ids"]) for o in b[4] if o != rid})
                self._note("hit", rid, tokens=hit["tokens"], blocks=len(hit["block_ids"]), sharers=sharers)
        for f in event["finished"]:
            codes[f["request_id"]] = "F"
            req = self.requests.get(f["request_id"])
            if req:
                req["status"], req["finish_reason"] = "finished", f["reason"]
        if self.static:  # figure 3.2: a finished member's seat stays empty until its batch ends
            for rid in self._batch_done:
                codes.setdefault(rid, "I")
            self._batch_done |= {f["request_id"] for f in event["finished"]}
            if not self.queues["running"]:
                self._batch_done = set()
        for rid, req in self.requests.items():
            code = codes.get(rid, " ")
            self.idle_slots += code == "I"
            self.timeline[rid] = (self.timeline.get(rid, "") + code)[-MAX_TIMELINE:]
            if rid in event["new_tokens"]:
                req["output_tokens"] += 1
                req["first_step"] = req["first_step"] or self.step
                req["last_step"] = self.step
            if req["status"] != "finished":
                req["status"] = {"R": "running", "P": "running", "D": "running", "W": "waiting", "S": "swapped", "X": "preempted"}.get(code, req["status"])
            if req["status"] != "finished" or code == "F":  # its speed as its user sees it: arrival to last token
                req["e2e_s"] = self.engine_s - req["arrived_s"]
                req["tok_s"] = round(req["output_tokens"] / req["e2e_s"], 1) if req["e2e_s"] > 0 else 0.0
        for rid, text in (texts or {}).items():
            if rid in self.requests:
                self.requests[rid]["text"] = text
        self.log = self.log[-LOG_KEPT:]
        m = event["metrics"]
        usage = round(100 * m["kv_cache_usage_perc"], 1)
        if usage > self.peak_kv[0]:
            self.peak_kv = (usage, m["kv_blocks_used"])
        tokens = sum(r["output_tokens"] for r in self.requests.values())
        speeds = [r["tok_s"] for r in self.requests.values() if r["output_tokens"]]
        self.stats = {
            "kv_blocks_used": m["kv_blocks_used"],
            "kv_tokens_used": m["kv_tokens_used"],
            "kv_usage": usage,
            "kv_peak": self.peak_kv[0],
            "kv_peak_blocks": self.peak_kv[1],
            "wasted_slots": m["wasted_slots"],
            "hit_rate": round(100 * m["prefix_cache_hit_rate"], 1),
            "preemptions": m["num_preemptions_total"],
            # The run's throughput: every generated token over the engine's time so far (one
            # step's rate jumps with what that step happened to hold).
            "tok_s": round(tokens / self.engine_s, 1) if self.engine_s > 0 else 0.0,
            "req_tok_s": round(sum(speeds) / len(speeds), 1) if speeds else 0.0,  # one request, on average
            "engine_s": round(self.engine_s, 3),
            "steps": self.step,
            "peak_running": self.peak_running,
            "tokens": tokens,
            "prompt_computed": self.prompt_computed,
            "idle_slots": self.idle_slots,
        }

    def summary(self) -> dict:
        """The numbers that make a scene's point, for the end screen's sentences."""
        first_block = {rid: texts[0] for rid, texts in self.block_text.items() if texts}
        return {
            "name": self.name, "label": self.label, **self.stats,
            "requests": [{"label": r["label"], "id": r["id"], "prompt_tokens": r["prompt_tokens"], "cached_tokens": r["cached_tokens"], "tok_s": r["tok_s"],
                          "preemptions": r["preemptions"], "output_tokens": r["output_tokens"], "first_block": first_block.get(r["id"], "")}
                         for r in self.requests.values()],
        }

    def to_dict(self) -> dict:
        return {
            "name": self.name, "label": self.label, "config": self.config, "step": self.step,
            "num_blocks": self.num_blocks, "block_size": self.block_size, "blocks": self.blocks,
            "tables": self.tables, "queues": self.queues, "requests": list(self.requests.values()),
            "timeline": self.timeline, "stats": self.stats, "log": self.log, "block_text": self.block_text,
        }


class FrameBuilder:
    """Holds every lane's state and decides when the next frame may go out."""

    def __init__(self, run_id: str, lanes: list[LaneState], scene: str = ""):
        self.run_id = run_id
        self.scene = scene  # the preset's name ("" for a learner's own engine)
        self.lanes = lanes
        self.status = "running"
        self.paused = False
        self.speed = 1.0
        self.message = ""
        self.reason = ""  # why it ended, once it has (DemoRun.EndReason)
        self._last_sent = 0.0
        self._dirty = False

    def touch(self) -> None:
        self._dirty = True

    def due(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return self._dirty and now - self._last_sent >= 1 / MAX_FPS

    def frame(self) -> dict:
        self._last_sent = time.monotonic()
        self._dirty = False
        ended = self.status != "running"
        return {
            "scene": self.scene, "summary": [lane.summary() for lane in self.lanes] if ended else None,
            "run": self.run_id, "status": self.status, "reason": self.reason,
            "paused": self.paused, "speed": self.speed, "message": self.message, "lanes": [lane.to_dict() for lane in self.lanes],
        }
