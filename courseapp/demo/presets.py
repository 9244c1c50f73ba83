"""The lesson's scenes, replayed on the real engine: each preset is lanes (engine knobs) plus a
script of requests (which step they arrive at). Opened from /demo/?preset=NAME."""
from copy import deepcopy
from datetime import timedelta

from django.utils.translation import gettext as _, gettext_noop

INQUIRIES = [
    "지난주에 주문한 운동화가 아직 안 왔어요. 언제 받을 수 있나요?",
    "환불 신청했는데 카드 취소가 언제 되는지 궁금합니다.",
    "쿠폰을 적용했는데 결제 금액이 그대로예요.",
    "배송지를 회사 주소로 바꾸고 싶어요. 아직 출고 전인가요?",
    "받은 블루투스 스피커가 충전이 안 됩니다. 교환하고 싶어요.",
    "비밀번호를 잊어버려서 로그인이 안 돼요.",
    "회원 등급은 어떻게 올라가나요?",
    "영수증을 다시 받을 수 있을까요?",
]

BASE = dict(block_size=16, num_blocks=128, max_num_seqs=8, max_num_batched_tokens=256,
            enable_prefix_caching=True, preemption_mode="recompute", scheduling="continuous", max_model_len=1024)

# Titles, lane labels and summaries are marked for translation here and translated when a run
# starts or a page shows them (Korean msgids: the scene names and instructions of the Korean
# lesson; English in locale/en).
PRESETS = {
    "reservation": {
        "title": gettext_noop("최대 길이 예약 ↔ 블록 단위"),
        "section": "s1-2",
        # 240 blocks: a 1,024-token reservation is 64 blocks, so 3 fit; six real requests (≈600
        # tokens, 38 blocks each) all fit paged, with no preemption muddying the comparison.
        "summary": gettext_noop("같은 요청 6건, 같은 KV 풀(블록 240개). ‘최대 길이 예약’ 엔진은 요청마다 max-model-len(1,024토큰)만큼 블록을 미리 잡고, ‘블록 단위’ 엔진은 쓴 만큼만 블록을 받습니다. 동시에 몇 건이 들어가는지, 다 끝나는 데 몇 스텝이 걸리는지 보세요."),
        "lanes": [
            {"name": "reserve", "label": gettext_noop("최대 길이 예약"), "config": {**BASE, "num_blocks": 240, "kv_reservation": "max_len", "enable_prefix_caching": False}},
            {"name": "paged", "label": gettext_noop("블록 단위(PagedAttention)"), "config": {**BASE, "num_blocks": 240, "enable_prefix_caching": False}},
        ],
        "requests": [{"at": 0, "user": q, "max_tokens": 48} for q in INQUIRIES[:6]],
    },
    "static-vs-continuous": {
        "title": gettext_noop("정적 배칭 ↔ 연속 배칭"),
        "section": "s3-2",
        # A budget that takes four whole prompts in one step and no prefix caching: both lanes
        # differ only in scheduling, and a batch of 4 starts together as in figure 3.2.
        "summary": gettext_noop("같은 요청 A~G를 한 번에 4건씩(프리픽스 캐싱은 두 쪽 모두 끔). 정적 배칭은 배치가 다 끝나야 다음을 넣고, 연속 배칭은 스텝마다 빈자리를 채웁니다. 스텝 수와 빈 자리(·)를 비교하세요."),
        "lanes": [
            {"name": "static", "label": gettext_noop("정적 배칭"), "config": {**BASE, "num_blocks": 192, "max_num_seqs": 4, "max_num_batched_tokens": 2400, "enable_prefix_caching": False, "scheduling": "static"}},
            {"name": "continuous", "label": gettext_noop("연속 배칭"), "config": {**BASE, "num_blocks": 192, "max_num_seqs": 4, "max_num_batched_tokens": 2400, "enable_prefix_caching": False}},
        ],
        "requests": [
            {"at": 0, "user": INQUIRIES[i], "max_tokens": n, "ignore_eos": True}
            for i, n in enumerate([12, 36, 8, 20, 24, 16, 28])
        ],
    },
    "concurrency": {
        "title": gettext_noop("1건 ↔ 8건 동시"),
        "section": "s3-3",
        "summary": gettext_noop("‘1건’ 엔진에는 요청 1건, ‘8건 동시’ 엔진에는 같은 요청 8건을 동시에 보냅니다. 요청 하나의 속도(tok/s)와 서버 전체의 처리량을 비교하세요."),
        "lanes": [
            {"name": "one", "label": gettext_noop("1건"), "config": {**BASE}},
            {"name": "eight", "label": gettext_noop("8건 동시"), "config": {**BASE}},
        ],
        "lane_requests": {
            "one": [{"at": 0, "user": INQUIRIES[0], "max_tokens": 40, "ignore_eos": True}],
            "eight": [{"at": 0, "user": INQUIRIES[0], "max_tokens": 40, "ignore_eos": True} for _ in range(8)],
        },
    },
    "prefix-caching": {
        "title": gettext_noop("프리픽스 캐싱"),
        "section": "s4-3",
        "summary": gettext_noop("긴 공통 시스템 프롬프트로 2번(A, B), 이어서 맨 앞에 현재 시각을 넣고 2번(C, D). ‘프리픽스 캐싱 켬’ 엔진과 ‘프리픽스 캐싱 끔’ 엔진이 같은 요청을 받습니다. 공유 블록(참조 수 2 이상), 타임라인의 ★, 계산한 프롬프트 토큰 수를 비교하세요."),
        "lanes": [
            {"name": "cache", "label": gettext_noop("프리픽스 캐싱 켬"), "config": {**BASE, "num_blocks": 192}},
            {"name": "nocache", "label": gettext_noop("프리픽스 캐싱 끔"), "config": {**BASE, "num_blocks": 192, "enable_prefix_caching": False}},
        ],
        "requests": "prefix",  # built at start: needs the current time
    },
    "preemption": {
        "title": gettext_noop("KV 캐시가 꽉 차면 — 선점"),
        "section": "s5-1",
        "summary": gettext_noop("풀이 작은데(블록 56개) 긴 답을 6건 동시에. 답이 길어지며 블록이 모자라면 가장 늦게 들어온 요청이 밀려납니다(선점). 타임라인의 ✕와 로그를 보세요."),
        "lanes": [{"name": "small", "label": gettext_noop("작은 풀"), "config": {**BASE, "num_blocks": 56, "max_num_seqs": 6}}],
        "requests": [{"at": 0, "user": q, "max_tokens": 96, "ignore_eos": True} for q in INQUIRIES[:6]],
    },
}


def section_path(anchor: str) -> str:
    """The lesson page and anchor a scene illustrates: "s1-2" → /lessons/21/s1/#s1-2."""
    from django.urls import reverse

    return reverse("lessons:section", args=[21, anchor.split("-")[0]]) + f"#{anchor}"


def spec_for(name: str, *, system_prompt: str, now) -> dict:
    """A runnable spec for a preset (KeyError for an unknown name)."""
    preset = deepcopy(PRESETS[name])
    for lane in preset["lanes"]:
        lane["label"] = _(lane["label"])  # in the language of whoever starts it
    spec = {"preset": name, "title": _(preset["title"]), "section": preset["section"], "summary": _(preset["summary"]),
            "lanes": preset["lanes"], "system": system_prompt, "open": False}
    if preset.get("requests") == "prefix":
        # Each request is stamped with the second it is sent, as the lesson's §6 lab does. The
        # clock comes first so the seconds fall inside the first 16-token block (with the label
        # first they could land on token 17, leaving block 0 shared).
        stamps = [f"[{(now + timedelta(seconds=i)):%H:%M:%S}] 현재 시각" for i in (0, 1)]
        first, second = (f"{stamp}\n{system_prompt}" for stamp in stamps)
        spec["requests"] = [
            {"at": 0, "system": system_prompt, "user": INQUIRIES[0], "max_tokens": 24, "key": "same-1"},
            {"at": 6, "system": system_prompt, "user": INQUIRIES[1], "max_tokens": 24, "key": "same-2"},
            {"at": 60, "system": first, "user": INQUIRIES[2], "max_tokens": 24, "key": "time-1", "preview": f"{stamps[0]} … {INQUIRIES[2]}"},
            {"at": 66, "system": second, "user": INQUIRIES[3], "max_tokens": 24, "key": "time-2", "preview": f"{stamps[1]} … {INQUIRIES[3]}"},
        ]
    elif "lane_requests" in preset:
        spec["lane_requests"] = {lane: [{**r, "system": system_prompt} for r in reqs] for lane, reqs in preset["lane_requests"].items()}
        spec["requests"] = []
    else:
        spec["requests"] = [{**r, "system": system_prompt} for r in preset["requests"]]
    return spec


KNOBS = {  # name: (type, min, max) for a learner's custom run
    "num_blocks": (int, 16, 512),
    "block_size": (int, 4, 64),
    "max_num_seqs": (int, 1, 32),
    "max_num_batched_tokens": (int, 16, 2048),
}
SHORT_QUESTION = "배송은 언제 오나요?"  # the shortest inquiry a learner's run must have room for
MIN_ANSWER_TOKENS = 16  # and a few tokens of answer


def _knob(name: str, raw, lo: int, hi: int) -> int:
    """A knob from a form or a message, or a sentence that names the limit."""
    try:
        value = int(str(raw).strip())
    except ValueError:  # "abc", "3.5", or a 5,000-digit number
        raise ValueError(_("%(name)s must be a whole number between %(lo)d and %(hi)d") % {"name": name, "lo": lo, "hi": hi}) from None
    if not lo <= value <= hi:
        raise ValueError(_("%(name)s must be between %(lo)d and %(hi)d") % {"name": name, "lo": lo, "hi": hi})
    return value


def _choice(name: str, raw, options: tuple) -> str:
    """One of `options` (the first when none is given), or a sentence that lists them."""
    if raw in (None, ""):
        return options[0]
    if raw not in options:
        raise ValueError(_("%(name)s must be one of: %(options)s") % {"name": name, "options": ", ".join(options)})
    return raw


def custom_spec(knobs: dict, *, system_prompt: str, min_prompt_tokens: int = 0) -> dict:
    """A learner's own run: one lane with the knobs they chose, open for prompts.

    `min_prompt_tokens` is the length of the smallest prompt (the system prompt and a short
    question): a pool that cannot hold it would refuse every prompt, so it is refused here."""
    config = dict(BASE)
    for name, (_kind, lo, hi) in KNOBS.items():
        if name in knobs and knobs[name] not in (None, ""):
            config[name] = _knob(name, knobs[name], lo, hi)
    config["enable_prefix_caching"] = bool(knobs.get("enable_prefix_caching", True))
    config["scheduling"] = _choice("scheduling", knobs.get("scheduling"), ("continuous", "static"))
    config["preemption_mode"] = _choice("preemption_mode", knobs.get("preemption_mode"), ("recompute", "swap"))
    if config["num_blocks"] < config["max_num_seqs"]:
        raise ValueError(_("num_blocks (%(blocks)d) must be at least max_num_seqs (%(seqs)d)") % {"blocks": config["num_blocks"], "seqs": config["max_num_seqs"]})
    pool, needed = config["num_blocks"] * config["block_size"], min_prompt_tokens + MIN_ANSWER_TOKENS
    if min_prompt_tokens and pool < needed:
        raise ValueError(_(
            "The KV pool is too small for any prompt: num_blocks × block_size = %(pool)d tokens, but the smallest "
            "prompt (the system prompt and a short question) and a short answer need %(needed)d. With block_size "
            "%(size)d, choose num_blocks of at least %(blocks)d."
        ) % {"pool": pool, "needed": needed, "size": config["block_size"], "blocks": -(-needed // config["block_size"])})
    return {"preset": "", "title": _("My run"), "section": "s3-3", "summary": "", "lanes": [{"name": "mine", "label": _("My engine"), "config": config}],
            "system": system_prompt, "requests": [], "open": True}
