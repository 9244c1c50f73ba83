"""Engine step events → what the browser draws. Pure data, no engine import.

Every frame is a complete picture of each lane (pool, block tables, queues, stats, timeline),
so a socket that missed messages is right again at the next frame. Frames are coalesced:
at most one per 1/MAX_FPS seconds, the latest state wins.
"""
import time

MAX_FPS = 30
MAX_TIMELINE = 400  # steps kept per request for drawing
LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

# Timeline codes, one character per step (the lesson's §3.2 picture):
# P prompt chunk · D decode · F finished · W waiting · R running, not scheduled (budget)
# X preempted · S swapped out · space = not there
PRIORITY = "FXPDSWR"


class LaneState:
    """One engine's picture, updated from its step events."""

    def __init__(self, name: str, label: str, config: dict):
        self.name, self.label, self.config = name, label, config
        self.step = 0
        self.num_blocks = config.get("num_blocks", 0)
        self.block_size = config.get("block_size", 16)
        self.blocks: list = []
        self.tables: dict[str, list[int]] = {}
        self.queues = {"waiting": [], "running": [], "swapped": []}
        self.requests: dict[str, dict] = {}  # id → label, owner, status, counts, text
        self.timeline: dict[str, str] = {}
        self.stats: dict = {}
        self.log: list[str] = []
        self.step_times: list[float] = []
        self.peak_running = 0
        self.block_text: dict[str, list[str]] = {}  # request → the text each of its blocks holds

    def add_request(self, rid: str, owner: str = "", prompt_preview: str = "", prompt_tokens: int = 0) -> None:
        label = LABELS[len(self.requests) % 26] + ("" if len(self.requests) < 26 else str(len(self.requests) // 26))
        self.requests[rid] = {
            "id": rid, "label": label, "owner": owner, "status": "waiting", "prompt": prompt_preview,
            "prompt_tokens": prompt_tokens, "output_tokens": 0, "cached_tokens": 0, "text": "",
            "preemptions": 0, "first_step": None, "last_step": None, "tok_s": 0.0,
        }
        self.timeline[rid] = " " * self.step
        self.queues["waiting"].append(rid)  # the engine queued it; the next step event confirms

    def apply(self, event: dict, texts: dict[str, str] | None = None) -> None:
        self.step = event["step"]
        self.num_blocks, self.block_size = event["num_blocks"], event["block_size"]
        self.step_times.append(event["duration_ms"] / 1000)
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
        for p in event["preempted"]:
            codes[p["request_id"]] = "X"
            self.requests.get(p["request_id"], {})["preemptions"] = self.requests.get(p["request_id"], {}).get("preemptions", 0) + 1
            self.log.append(
                f"WARNING step {self.step}: Sequence group {p['request_id']} is preempted by "
                f"PreemptionMode.{p['mode'].upper()} mode because there is not enough KV cache space."
            )
        for f in event["finished"]:
            codes[f["request_id"]] = "F"
            req = self.requests.get(f["request_id"])
            if req:
                req["status"] = "finished"
        for hit in event["prefix_hits"]:
            req = self.requests.get(hit["request_id"])
            if req:
                req["cached_tokens"] = hit["tokens"]
        for rid, req in self.requests.items():
            self.timeline[rid] = (self.timeline.get(rid, "") + codes.get(rid, " "))[-MAX_TIMELINE:]
            if rid in event["new_tokens"]:
                req["output_tokens"] += 1
                req["first_step"] = req["first_step"] or self.step
                req["last_step"] = self.step
            if req["status"] != "finished":
                req["status"] = {"R": "running", "P": "running", "D": "running", "W": "waiting", "S": "swapped", "X": "preempted"}.get(codes.get(rid, ""), req["status"])
        for rid, text in (texts or {}).items():
            if rid in self.requests:
                self.requests[rid]["text"] = text
        self.log = self.log[-30:]
        m = event["metrics"]
        recent = self.step_times[-20:]
        self.stats = {
            "kv_blocks_used": m["kv_blocks_used"],
            "kv_tokens_used": m["kv_tokens_used"],
            "kv_usage": round(100 * m["kv_cache_usage_perc"], 1),
            "wasted_slots": m["wasted_slots"],
            "hit_rate": round(100 * m["prefix_cache_hit_rate"], 1),
            "preemptions": m["num_preemptions_total"],
            "tok_s": round(len(event["new_tokens"]) / max(sum(recent) / len(recent), 1e-6), 1) if recent else 0.0,
            "steps": self.step,
            "peak_running": self.peak_running,
            "tokens": sum(r["output_tokens"] for r in self.requests.values()),
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

    def __init__(self, run_id: str, lanes: list[LaneState]):
        self.run_id = run_id
        self.lanes = lanes
        self.seq = 0
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

    def frame(self, kind: str = "frame") -> dict:
        self.seq += 1
        self._last_sent = time.monotonic()
        self._dirty = False
        return {
            "type": kind, "seq": self.seq, "run": self.run_id, "sent_at": time.time(), "status": self.status, "reason": self.reason,
            "paused": self.paused, "speed": self.speed, "message": self.message, "lanes": [lane.to_dict() for lane in self.lanes],
        }
