"""Lesson 21 stays right for vLLM V1 (issue #9): the facts a learner acts on, checked in the loaded
sections, the rendered figures and the glossary, so that a later edit cannot quietly bring back
an old claim (a preemption log line as the V1 signal, swap as a V1 mode, equal reservations as
external fragmentation, …)."""
import re

import pytest
from bs4 import BeautifulSoup
from django.urls import reverse

from courseapp.demo.presets import PRESETS

# The V0 warning and its parts: allowed only where the text says it is V0 (history).
V0_LOG_MARKERS = ("PreemptionMode", "is preempted by", "total_num_cumulative_preemption")
V0_WINDOW = 400  # characters before the marker that must name V0

V1_PERIODIC_LOG = re.compile(
    r"Engine 000: Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: [\d.]+ tokens/s, "
    r"Running: \d+ reqs, Waiting: \d+ reqs, GPU KV cache usage: [\d.]+%, Prefix cache hit rate: [\d.]+%"
)
SCENES = ["reservation", "static-vs-continuous", "concurrency", "prefix-caching", "preemption"]


def bodies(lesson):
    return {s.slug: s.body for s in lesson.sections.all()}


def everything(lesson):
    """(where, text) for every section body and every glossary definition."""
    yield from ((f"§{slug}", body) for slug, body in bodies(lesson).items())
    yield from ((f"glossary {t.slug}", t.definition) for t in lesson.glossary.all())


def region(lesson, anchor):
    """The Markdown under an anchor: the whole section for a section slug, else from its
    `{#anchor}` heading to the next heading of the same or a higher level."""
    for section in lesson.sections.all():
        if section.slug == anchor:
            return section.body
        match = re.search(r"^(#+) .*\{#" + re.escape(anchor) + r"\}\s*$", section.body, re.M)
        if match:
            level = len(match.group(1))
            rest = section.body[match.end():]
            end = re.search(r"^#{1,%d} " % level, rest, re.M)
            return rest[: end.start()] if end else rest
    raise AssertionError(f"no anchor {anchor}")


def text_of(tag):
    """A tag's words as a reader sees them: without the glossary popovers' copies of definitions."""
    copy = BeautifulSoup(str(tag), "html.parser")
    for tip in copy.select(".gloss-tip"):
        tip.decompose()
    return copy.get_text(" ", strip=True)


def page(client, slug):
    response = client.get(reverse("lessons:section", args=[21, slug]))
    assert response.status_code == 200
    return BeautifulSoup(response.content, "html.parser")


# --- preemption: V1 logs nothing; the counter is the signal -------------------------------------


@pytest.mark.django_db
def test_the_v0_preemption_warning_appears_only_as_labelled_history(lesson):
    for where, text in everything(lesson):
        for marker in V0_LOG_MARKERS:
            for m in re.finditer(re.escape(marker), text):
                before = text[max(0, m.start() - V0_WINDOW) : m.start()]
                assert "V0" in before, f"{where}: {marker!r} is not marked as V0 history"


@pytest.mark.django_db
def test_no_text_sends_the_learner_to_the_log_for_preemptions(lesson):
    log_as_signal = [
        re.compile(r"preempt\S*\s*(관련\s*)?(경고|줄)"),  # "preempt 관련 줄", "preempt 경고"
        re.compile(r"로그에\s*(preempt|선점)[^.\n]{0,20}찍[힙히]"),  # "로그에 … 경고가 찍힙니다"
        re.compile(r"preempt\S*라는 낱말로 찾는 것이 가장 확실"),
    ]
    for where, text in everything(lesson):
        for pattern in log_as_signal:
            m = pattern.search(text)
            assert m is None, f"{where}: {m.group(0)!r}"


@pytest.mark.django_db
def test_sections_5_and_6_name_the_v1_metrics(lesson):
    texts = bodies(lesson)
    for slug in ("s5", "s6"):
        for name in ("vllm:num_preemptions_total", "kv_cache_usage_perc", "num_requests_waiting"):
            assert name in texts[slug], (slug, name)
    assert V1_PERIODIC_LOG.search(texts["s5"]), "§5.2 shows V1's periodic stats line"
    # kv_cache_usage_perc is a 0–1 ratio: every sample value shown must be one
    values = [float(v) for v in re.findall(r"kv_cache_usage_perc\{[^}]*\}\s+([\d.]+)", texts["s5"])]
    assert values and all(0 <= v <= 1 for v in values)
    assert "gpu_cache_usage_perc" in texts["s5"] or "gpu_cache_usage_perc" in texts["s0"]  # the old alias


@pytest.mark.django_db
def test_the_practice_prompt_asks_for_the_preemption_counter_not_a_log_search(lesson):
    s6 = bodies(lesson)["s6"]
    prompt = re.search(r"```prompt\n(.*?)```", s6, re.S).group(1)
    assert "vllm:num_preemptions_total" in prompt
    assert not re.search(r"로그에 preempt", prompt)
    checklist = region(lesson, "s6-3")
    assert "num_preemptions_total" in checklist and "0 ~ 1" in checklist


@pytest.mark.django_db
def test_a_preempted_request_goes_back_to_the_front_of_the_queue(lesson):
    for where, text in everything(lesson):
        assert "대기 줄 뒤로" not in text, where
    s5_1 = region(lesson, "s5-1")
    assert "대기 줄 맨 앞" in s5_1
    assert "새 요청을 들이지 않습니다" in s5_1  # a step with a preemption admits nothing new
    preemption = lesson.glossary.get(slug="preemption").definition
    assert "맨 앞" in preemption and "재계산" in preemption


@pytest.mark.django_db
def test_v1_preempts_by_recompute_only_and_swap_is_v0(client, lesson):
    table = page(client, "s2").find(id="s2-2").find_next(lambda tag: tag.name == "table" and tag.find_parent("figure") is None)
    last = text_of(table.select("tbody tr")[-1])
    assert "스왑" in last and "선점" in last and "V0" in last and "재계산" in last
    s5_1 = region(lesson, "s5-1")
    assert "재계산(recompute)** 한 가지" in s5_1
    assert re.search(r"V0[^\n]*CPU 스왑", s5_1)
    assert "자기 블록에 적중" in s5_1  # prefix caching can spare part of the recompute


@pytest.mark.django_db
def test_os_swap_and_vllm_cpu_swap_are_separate_glossary_entries(client, lesson):
    swap = lesson.glossary.get(slug="swap")
    cpu_swap = lesson.glossary.get(slug="cpu-swap")
    assert "디스크" in swap.differentia and "CPU" not in swap.differentia
    assert "V0" in cpu_swap.definition and "CPU 메모리" in cpu_swap.differentia
    assert "스왑" not in cpu_swap.aliases  # the bare word stays with the OS meaning
    # where the lesson says "CPU 스왑", the popover is the vLLM one
    s5 = page(client, "s5")
    links = [a for a in s5.select(".gloss-term") if "CPU 스왑" in a.get_text()]
    assert links and all(a["data-term"] == "cpu-swap" for a in links)


# --- memory: fragmentation, allocation, sharing --------------------------------------------------


@pytest.mark.django_db
def test_external_fragmentation_is_drawn_with_reservations_of_different_sizes(client):
    figure = page(client, "s1").find("figure", id="fig-1-2b")
    assert figure is not None and figure.find("figcaption") is not None
    table = figure.find("table", attrs={"data-xf-need": True})
    need = int(table["data-xf-need"])
    sizes = {kind: [int(r["data-xf-size"]) for r in table.find_all("tr", attrs={"data-xf-kind": kind})] for kind in ("reservation", "hole")}
    assert len(set(sizes["reservation"])) > 1, "equal reservations cannot leave holes of different sizes"
    assert len(sizes["hole"]) >= 2
    # the point of the picture: enough free room in total, no single hole big enough
    assert sum(sizes["hole"]) >= need > max(sizes["hole"])


@pytest.mark.django_db
def test_the_reservation_theatre_has_scattered_free_seats_but_no_run_for_the_next_group(client):
    theatre = page(client, "s2").find("figure", id="fig-2-3")
    left = theatre.find_all("svg")[0]
    free = {}
    for seat in left.find_all("rect", class_="dg-seat-free"):
        row = round((float(seat["y"]) - 39) / 34)
        free.setdefault(row, set()).add(round((float(seat["x"]) - 41) / 31))
    group_size = int(re.search(r"D\(최대 (\d+)명\)", left.find("desc").get_text()).group(1))

    def longest_run(cols):
        best = run = 0
        for c in range(8):
            run = run + 1 if c in cols else 0
            best = max(best, run)
        return best

    assert sum(len(c) for c in free.values()) >= group_size, "labelled external: free seats must exist"
    assert max(longest_run(c) for c in free.values()) < group_size


@pytest.mark.django_db
def test_reservation_counts_agree_between_text_figure_and_calculator(client, lesson):
    s1 = page(client, "s1")
    figure = s1.find("figure", id="fig-1-2")
    pool = int(re.search(r"([\d,]+)칸", figure.select_one(".dg-heading").get_text()).group(1).replace(",", ""))
    reserved_rows = [r for r in figure.select(".dg-res-reserved") if r.get_text(strip=True) == "8,192칸 예약"]
    assert len(reserved_rows) == pool // 8192
    default = int(s1.select_one("#calc-pool")["value"])
    text = bodies(lesson)["s1"]
    assert f"{default:,}칸을 기본값" in text and f"{default // 8192}개로 나옵니다" in text
    assert "2.7" in text and "3.4" in text and "3개 남짓" in text


@pytest.mark.django_db
def test_prompt_blocks_are_allocated_on_admission_and_generated_ones_one_at_a_time(lesson):
    s2_1 = region(lesson, "s2-1")
    assert "한꺼번에" in s2_1 and "대기 줄" in s2_1 and "하나씩" in s2_1
    assert "한꺼번에" in lesson.glossary.get(slug="paged-attention").differentia


@pytest.mark.django_db
def test_shared_prefix_blocks_stay_cached_and_copy_on_write_is_not_prefix_sharing(client):
    table = page(client, "s2").find(id="s2-2").find_next(lambda tag: tag.name == "table" and tag.find_parent("figure") is None)
    row = next(text_of(r) for r in table.select("tbody tr") if "프리픽스" in text_of(r))
    assert "돌려받" not in row and "copy-on-write" not in row
    assert "캐시로 남" in row


@pytest.mark.django_db
def test_continuous_batching_credits_orca_and_does_not_require_paging(lesson):
    s3_2 = region(lesson, "s3-2")
    assert "Orca" in s3_2 and "꼭 있어야" in s3_2
    assert lesson.glossary.filter(slug="orca").exists()


@pytest.mark.django_db
def test_the_v1_defaults_box(client):
    # In §6, where every term in it has been taught (§0 keeps one sentence pointing there).
    boxes = [text_of(q) for q in page(client, "s6").select(".lesson-body blockquote.callout") if "vLLM V1 기준" in text_of(q)]
    assert len(boxes) == 1
    text = boxes[0]
    intro = [text_of(q) for q in page(client, "s0").select(".lesson-body blockquote.callout") if "vLLM V1 기준" in text_of(q)]
    assert len(intro) == 1 and "chunked prefill" not in intro[0] and "6절" in intro[0]
    for fact in ("16토큰", "--no-enable-prefix-caching", "chunked prefill", "기본으로 켜져", "gpu_cache_usage_perc", "kv_cache_usage_perc"):
        assert fact in text, fact


@pytest.mark.django_db
def test_chunked_prefill_is_on_by_default_not_always_and_splits_only_what_does_not_fit(lesson):
    """V1 honours enable_chunked_prefill=False, and a prefill that fits the step's token budget
    is not split (scheduler.py's waiting loop)."""
    for where, text in everything(lesson):
        assert not re.search(r"(항상|늘) 켜져", text), where
    s3 = bodies(lesson)["s3"]
    assert "기본으로 켜져" in s3 and "토큰 예산" in s3


@pytest.mark.django_db
def test_max_tokens_is_not_offered_as_a_cure_for_preemption(lesson):
    """V1 reserves nothing for max_tokens (§2.1): lowering it changes no KV use for answers that end anyway."""
    s5 = bodies(lesson)["s5"]
    assert "max_tokens`를 짧게" not in s5 and "미리 잡히는 자리가 아닙니다" in s5
    assert "--max-num-batched-tokens" in s5  # the official remedies: max_num_seqs or max_num_batched_tokens


@pytest.mark.django_db
def test_the_metrics_example_and_the_log_advice_match_todays_v1(lesson):
    s5 = bodies(lesson)["s5"]
    lines = re.findall(r"^vllm:\w+\{[^}]*\}", s5, re.M)
    assert lines and all('engine="0"' in line for line in lines), "real V1 lines carry the engine label"
    assert "Preemptions: " in s5, "recent V1 may append the count to its stats line: the lesson says so"
    assert "Optimization and Tuning" in s5, "the official page still shows the V0 warning: the lesson warns"


@pytest.mark.django_db
def test_the_cache_hit_footnote_and_the_timestamp_trap_say_almost(client, lesson):
    s4 = page(client, "s4")
    ref = s4.find("a", href="#note-gemm")
    note = s4.find(id="note-gemm")
    assert ref is not None and note is not None and "GEMM" in text_of(note)
    assert "적중이 거의 0" in region(lesson, "s4-3")


# --- scenes, course references, glossary --------------------------------------------------------


@pytest.mark.django_db
def test_each_scene_is_linked_from_the_section_its_demo_points_back_to(lesson):
    for name in SCENES:
        anchor = PRESETS[name]["section"]
        assert re.search(r"^\[\[scene " + re.escape(name) + r"\]\]$", region(lesson, anchor), re.M), (name, anchor)


@pytest.mark.django_db
def test_the_lesson_ends_pointing_to_the_demo_and_the_questions(lesson):
    end = bodies(lesson)["s6"].rsplit("## ", 1)[-1]
    assert "(/demo/)" in end and "appendix-a" in end


@pytest.mark.django_db
def test_course_axes_are_explained_where_they_are_named(lesson):
    for slug, body in bodies(lesson).items():
        assert "README 축" not in body, slug
        seen = set()
        for m in re.finditer(r"축 ([②⑤⑥⑦])", body):
            if m.group(1) in seen:
                continue
            seen.add(m.group(1))
            assert "↔" in body[m.start() : m.start() + 90], f"§{slug}: axis {m.group(1)} named without its two ends"


@pytest.mark.django_db
def test_glossary_defines_the_terms_the_lesson_uses(lesson):
    terms = {t.slug: t for t in lesson.glossary.all()}
    for slug in ("chunked-prefill", "scheduler", "reference-count", "waiting-queue", "ttft", "itl", "e2e-latency", "cpu-swap", "recompute"):
        assert slug in terms, slug
        assert terms[slug].genus and terms[slug].differentia and terms[slug].contrast
    everything_said = "\n".join(bodies(lesson).values())
    for slug in ("chunked-prefill", "scheduler", "reference-count", "waiting-queue", "itl", "e2e-latency"):
        assert any(alias in everything_said for alias in terms[slug].aliases), f"{slug}: not used in the lesson"


@pytest.mark.django_db
def test_the_section_6_3_checklist_is_real_checkboxes_each_with_its_label(client):
    checklist = page(client, "s6").find(id="s6-3").find_next("ul")
    boxes = checklist.select("li input[type=checkbox]")
    assert len(boxes) == 9 and all(box.find_parent("label") for box in boxes)
    assert all(text_of(box.find_parent("label")).strip() for box in boxes), "each box is named by its sentence"


@pytest.mark.django_db
def test_a_cached_block_waits_in_the_one_free_queue_not_for_the_pool_to_run_short(lesson):
    """V1's block pool keeps every free block, cached or not, in one queue in eviction order and
    allocates from its head (block_pool.get_new_blocks): a cached block goes when its turn comes."""
    for where, text in everything(lesson):
        assert "빈 블록이 모자라 풀이" not in text and "빈 블록이 모자랄 때 가장 오래" not in text, where
    s4_1 = region(lesson, "s4-1")
    assert "줄 맨 앞" in s4_1 and "kv_cache_usage_perc" in s4_1
