// The live demo's drawing: frames from the server (over a websocket) → block pool, block
// tables, timeline, queues, stat cards and outputs. The latest frame wins; drawing happens on
// requestAnimationFrame. Every frame is a full picture, so a dropped message never leaves the
// page wrong for long.
(function () {
  "use strict";
  const EN = document.documentElement.lang === "en";
  const csrfToken = () => (document.querySelector("[name=csrfmiddlewaretoken]") || {}).value || "";

  // Waiting for a place: count down, then try again (the busy page says how long at most).
  function waitAndRetry(seconds, show, retry) {
    let left = Math.max(1, Math.min(seconds || 10, 10));
    const tick = () => {
      show(EN ? `Trying again in ${left} s…` : `${left}초 뒤에 다시 시도합니다…`);
      if (left-- <= 0) retry(); else setTimeout(tick, 1000);
    };
    tick();
  }
  const busyForm = document.querySelector("[data-demo-busy]");
  if (busyForm) {
    const countdown = busyForm.querySelector("[data-countdown]");
    waitAndRetry(Number(busyForm.dataset.retryIn) || 10, (text) => { countdown.textContent = text; }, () => busyForm.requestSubmit());
  }

  const root = document.getElementById("demo");
  if (!root) return;

  const T = EN ? {
    connecting: "Connecting…", live: "Running", paused: "Paused", finished: "Finished", failed: "Failed",
    reconnecting: "Connection lost; reconnecting…", replaying: "Replaying the recorded run",
    linkDown: "The live connection to the engine is down; retrying…",
    kvUsage: "KV usage", kvPeak: "Peak KV usage", blocks: "blocks", tokens: "tokens", wasted: "Wasted slots", hitRate: "Prefix hit rate",
    preemptions: "Preemptions", tokS: "Run throughput (tok/s)", reqTokS: "One request (tok/s)", steps: "Steps",
    waiting: "Waiting", running: "Running", swapped: "Swapped",
    pool: "Physical block pool", tables: "Block tables (logical → physical)", timeline: "Batch timeline (steps × requests)",
    outputs: "Outputs", logTitle: "Engine log (in words)", free: "free", cached: "cached (free, kept for prefix hits)",
    peak: "Most running at once", generated: "Tokens generated",
    step: "Step", pause: "Pause", resume: "Resume", block: "block", ref: "refs", filled: "filled", owner: "owner",
    none: "none", summary: (s, l) => `Step ${s.steps ?? 0}: ${l.queues.running.length} running, ${l.queues.waiting.length} waiting, KV ${s.kv_usage ?? 0}%`,
    starting: "Starting…", stopped: "Stopped", expired: "Ended",
    queued: (n, all) => `Waiting for an engine worker: number ${n} of ${all} in the queue`,
    noWorker: (s) => `No engine worker is running right now. The run starts as soon as one comes up, or ends in ${s} s.`,
    building: (host, s) => `Starting on ${host}: building the engine (the model may be loading)… ${s || 0} s`,
    previous: (t) => `Your previous run “${t}” was stopped: one run at a time per learner.`,
    reasons: { replaced: "Stopped: you opened another scene", owner: "Stopped", shutdown: "Stopped: the server restarted",
      no_viewer: "Ended: nobody watched it for a minute", never_picked_up: "Ended: no engine worker picked it up",
      worker_shutdown: "Stopped: its engine worker shut down",
      paused_idle: "Ended: it stayed paused with nothing happening", idle: "Ended: no prompt came for a long time",
      lifetime: "Ended: it ran as long as a run may" },
    legendTitle: "How to read the block pool", laneTabs: "Which engine to show",
    legend: [["lg-color", "A", "colour and letter = the request that owns the block"], ["lg-fill", "", "fill = how many of the block's token slots are used"],
      ["lg-cached", "♻", "♻ = cached: no owner now, kept for a later prefix hit"], ["lg-ref", "2", "corner number = reference count (requests using the block)"],
      ["lg-shared", "", "thick outline = shared by more than one request"], ["lg-free", "", "dashed = free"]],
    poolKeys: "Arrow keys move between blocks; each block reads out what hovering shows.",
    guideTitle: "What the cards mean",
    guide: { "kv-usage": "share of the KV block pool in use now; after the run, the highest it reached",
      "wasted-slots": "token slots reserved in blocks but not (yet) holding a token", "hit-rate": "share of prompt tokens found in the prefix cache instead of computed",
      preemptions: "times a running request was pushed out because blocks ran out", "tok-s": "every generated token ÷ the engine's time for the whole run",
      "req-tok-s": "one request's tokens ÷ its time from arrival to last token (average over requests)", steps: "engine steps so far: one forward pass each",
      "peak-running": "the most requests in one batch", tokens: "answer tokens generated, all requests together" },
    codes: { P: "prompt chunk", D: "decode", F: "finished", W: "waiting", R: "running, no tokens this step", X: "preempted", S: "swapped out",
      I: "idle slot: finished, but its seat stays empty until the batch ends", " ": "" },
    mark: "a prefix hit: cached blocks reused", firstBlock: "first block", cut: (n, scene) => scene && scene !== "served" ? `stopped at max_tokens (${n}): this scene keeps answers short so the blocks stay readable` : `stopped at max_tokens (${n})`, reqSpeed: "tok/s",
    endTitle: "What this scene showed",
    laneLine: (l) => `${l.label}: ${l.steps} steps · at most ${l.peak_running} at once · ${l.tokens} tokens in ${l.engine_s} s of engine time = ${l.tok_s} tok/s for the run · one request ${l.req_tok_s} tok/s · peak KV ${l.kv_peak}% · ${l.preemptions} preemptions`,
    log: {
      preempt: (e) => `Step ${e.step}: ${e.req} preempted. The pool ran out of blocks, so ${e.req} gave back its ${e.blocks} blocks and went to the front of the waiting queue` +
        (e.mode === "swap" ? " (swap: its KV was copied to CPU memory)." : " (recompute: its KV is dropped and computed again when it returns)."),
      recompute: (e) => `Step ${e.step}: ${e.req} back in. Its prompt and the tokens it had made (${e.tokens}) are computed again` + (e.cached ? `; ${e.cached} of them came from blocks still in the prefix cache.` : "."),
      swap_in: (e) => `Step ${e.step}: ${e.req} swapped back in from CPU memory.`,
      hit: (e) => `Step ${e.step}: ${e.req} found ${e.tokens} prompt tokens (${e.blocks} blocks) in the prefix cache${e.sharers.length ? ` (shared with ${e.sharers.join(", ")})` : ""} and skipped computing them.`,
    },
    points: {
      reservation: (L) => L.reserve && L.paged ? [
        `Reserving the maximum length (1,024 tokens = 64 blocks each) fit ${L.reserve.peak_running} requests at once; blocks on demand ran ${L.paged.peak_running} at once in the same pool.`,
        `All six finished in ${L.paged.steps} steps instead of ${L.reserve.steps}: ${L.paged.tok_s} vs ${L.reserve.tok_s} tokens/s over the whole run.`,
        L.paged.tok_s < L.reserve.tok_s ? "Here the paged lane made fewer tokens per second: on this server's CPU a step with six requests takes longer than one with three; on a GPU that cost barely grows." : "",
        L.paged.preemptions ? `The paged lane preempted ${L.paged.preemptions} times: its answers grew past the free blocks.` : "No request was preempted: every answer fit in the blocks it was given."] : [],
      "static-vs-continuous": (L) => L.static && L.continuous ? [
        `The same 7 requests, 4 at a time: static batching took ${L.static.steps} steps, continuous batching ${L.continuous.steps}.`,
        `In static batching, finished requests left ${L.static.idle_slots} idle slots (·) waiting for their batch to end; continuous batching gave each freed seat to the next request at once (0 idle slots).`,
        L.static.tok_s >= L.continuous.tok_s ? "Tokens per second are close here: on this server's CPU a step's time grows with the requests in it. Count steps: that is what a GPU pays for." : ""] : [],
      concurrency: (L) => L.one && L.eight ? [
        `One request alone: ${L.one.req_tok_s} tokens/s. Each of the eight together: ${L.eight.req_tok_s} tokens/s — no faster.`,
        `The server as a whole made ${L.one.tok_s} → ${L.eight.tok_s} tokens/s (×${(L.eight.tok_s / Math.max(L.one.tok_s, 0.1)).toFixed(1)}): ${L.eight.tokens} tokens in ${L.eight.steps} steps instead of ${L.one.tokens} in ${L.one.steps}. Throughput rose, not the speed of one request.`] : [],
      "prefix-caching": (L) => {
        if (!L.cache) return [];
        const r = Object.fromEntries(L.cache.requests.map((q) => [q.label, q]));
        return [
          r.B ? `With caching on, B reused ${r.B.cached_tokens} of its ${r.B.prompt_tokens} prompt tokens from A's blocks (★ on the timeline); they were not computed again.` : "",
          r.C && r.D ? `C and D start with the time (“${r.C.first_block.trim().slice(0, 40)}…”): their first block already differs, so every later block's hash differs too — ${r.C.cached_tokens + r.D.cached_tokens} tokens reused.` : "",
          L.nocache ? `Prompt tokens computed: ${L.cache.prompt_computed} with caching, ${L.nocache.prompt_computed} without.` : ""];
      },
      preemption: (L) => L.small ? [
        `Six long answers in a 56-block pool: blocks ran out ${L.small.preemptions} times, and each time the newest running request was preempted (✕).`,
        "A preempted request gives back all its blocks, waits at the front of the queue and, once there is room, has its prompt and its tokens so far computed again (recompute). Blocks still in the prefix cache are reused.",
        "vLLM V1 writes nothing to its log when it preempts: watch the metric vllm:num_preemptions_total (and waiting requests rising) instead."] : [],
    },
  } : {
    connecting: "연결 중…", live: "실행 중", paused: "일시 정지", finished: "끝남", failed: "실패",
    reconnecting: "연결이 끊겼습니다. 다시 연결하는 중…", replaying: "기록된 실행을 다시 보는 중",
    linkDown: "엔진과의 실시간 연결이 끊겼습니다. 다시 잇는 중…",
    kvUsage: "KV 사용률", kvPeak: "최대 KV 사용률", blocks: "블록", tokens: "토큰", wasted: "빈 자리(낭비)", hitRate: "프리픽스 적중률",
    preemptions: "선점", tokS: "실행 처리량(토큰/초)", reqTokS: "요청 하나(토큰/초)", steps: "스텝",
    waiting: "대기", running: "실행 중", swapped: "스왑됨",
    pool: "물리 블록 풀", tables: "블록 테이블 (논리 → 물리)", timeline: "배치 타임라인 (스텝 × 요청)",
    outputs: "출력", logTitle: "엔진 로그 (말로 풀어 씀)", free: "빈 블록", cached: "캐시됨 (주인 없음, 프리픽스용으로 보관)",
    peak: "최대 동시 실행", generated: "생성한 토큰",
    step: "스텝", pause: "일시 정지", resume: "다시 시작", block: "블록", ref: "참조", filled: "채움", owner: "주인",
    none: "없음", summary: (s, l) => `스텝 ${s.steps ?? 0}: 실행 ${l.queues.running.length}, 대기 ${l.queues.waiting.length}, KV ${s.kv_usage ?? 0}%`,
    starting: "시작하는 중…", stopped: "멈춤", expired: "끝남",
    queued: (n, all) => `엔진 워커를 기다리는 중: 대기열 ${all}개 중 ${n}번째`,
    noWorker: (s) => `지금 실행 중인 엔진 워커가 없습니다. 워커가 뜨는 대로 시작하고, 그렇지 않으면 ${s}초 뒤에 끝납니다.`,
    building: (host, s) => `${host}에서 시작하는 중: 엔진을 만드는 중입니다(모델을 불러오는 중일 수 있음)… ${s || 0}초`,
    previous: (t) => `이전 실행 “${t}”은(는) 멈췄습니다: 학습자 한 명당 실행은 하나입니다.`,
    reasons: { replaced: "멈춤: 다른 장면을 열었습니다", owner: "멈춤", shutdown: "멈춤: 서버가 다시 시작되었습니다",
      no_viewer: "끝남: 1분 동안 보는 사람이 없었습니다", never_picked_up: "끝남: 실행을 맡은 엔진 워커가 없었습니다",
      worker_shutdown: "멈춤: 엔진 워커가 종료되었습니다",
      paused_idle: "끝남: 일시 정지된 채 아무 일도 없었습니다", idle: "끝남: 오랫동안 프롬프트가 오지 않았습니다",
      lifetime: "끝남: 실행 시간 한도에 닿았습니다" },
    legendTitle: "블록 풀 읽는 법", laneTabs: "보여 줄 엔진",
    legend: [["lg-color", "A", "색과 글자 = 그 블록을 가진 요청"], ["lg-fill", "", "채워진 높이 = 블록의 토큰 칸 중 쓴 만큼"],
      ["lg-cached", "♻", "♻ = 캐시됨: 지금 주인은 없지만 나중의 프리픽스 적중을 위해 보관"], ["lg-ref", "2", "모서리 숫자 = 참조 수(그 블록을 쓰는 요청 수)"],
      ["lg-shared", "", "굵은 테두리 = 두 요청 이상이 공유"], ["lg-free", "", "점선 = 빈 블록"]],
    poolKeys: "화살표 키로 블록 사이를 옮겨 다닙니다. 블록마다 마우스를 올렸을 때와 같은 내용을 읽어 줍니다.",
    guideTitle: "카드 읽는 법",
    guide: { "kv-usage": "지금 쓰고 있는 KV 블록 풀의 비율. 실행이 끝나면 가장 높았던 값",
      "wasted-slots": "블록에 잡혀 있지만 아직 토큰이 없는 칸 수", "hit-rate": "프롬프트 토큰 중 계산하지 않고 프리픽스 캐시에서 찾은 비율",
      preemptions: "블록이 모자라 실행 중인 요청을 밀어낸 횟수", "tok-s": "생성한 토큰 전부 ÷ 실행 전체의 엔진 시간",
      "req-tok-s": "요청 하나의 토큰 ÷ 그 요청이 들어와서 마지막 토큰까지 걸린 시간(요청들의 평균)", steps: "지금까지의 엔진 스텝 수(스텝마다 순전파 한 번)",
      "peak-running": "한 배치에 가장 많이 함께 든 요청 수", tokens: "모든 요청이 만든 답 토큰의 합" },
    codes: { P: "프롬프트 조각", D: "디코드", F: "끝", W: "대기", R: "실행 중(이번 스텝 토큰 없음)", X: "선점됨", S: "스왑됨",
      I: "빈 자리: 끝났는데 배치가 끝날 때까지 자리가 비어 있음", " ": "" },
    mark: "프리픽스 적중: 캐시된 블록 재사용", firstBlock: "첫 블록", cut: (n, scene) => scene && scene !== "served" ? `max_tokens(${n})에서 멈춤: 블록이 잘 보이도록 이 장면은 답을 짧게 정해 둡니다` : `max_tokens(${n})에서 멈춤`, reqSpeed: "토큰/초",
    endTitle: "이 장면이 보여 준 것",
    laneLine: (l) => `${l.label}: ${l.steps} 스텝 · 동시 최대 ${l.peak_running}건 · 엔진 시간 ${l.engine_s}초 동안 ${l.tokens} 토큰 = 실행 처리량 ${l.tok_s} 토큰/초 · 요청 하나 ${l.req_tok_s} 토큰/초 · 최대 KV ${l.kv_peak}% · 선점 ${l.preemptions}번`,
    log: {
      preempt: (e) => `스텝 ${e.step}: ${e.req} 선점. 풀에 블록이 모자라 ${e.req}의 블록 ${e.blocks}개를 돌려받고 ${e.req}를 대기 줄 맨 앞으로 보냄` +
        (e.mode === "swap" ? " (스왑: KV를 CPU 메모리로 복사해 둠)." : " (재계산: KV는 버리고, 다시 들어올 때 처음부터 계산)."),
      recompute: (e) => `스텝 ${e.step}: ${e.req} 다시 들어옴. 프롬프트와 이미 만든 토큰(${e.tokens}개)을 다시 계산` + (e.cached ? ` — 그중 ${e.cached}개는 프리픽스 캐시에 남은 블록에서 재사용.` : "."),
      swap_in: (e) => `스텝 ${e.step}: ${e.req} 스왑 인 — CPU 메모리의 KV를 풀로 되돌림.`,
      hit: (e) => `스텝 ${e.step}: ${e.req}가 프롬프트 토큰 ${e.tokens}개(블록 ${e.blocks}개)를 프리픽스 캐시에서 찾아${e.sharers.length ? ` ${e.sharers.join(", ")}와 공유하고` : ""} 계산을 건너뜀.`,
    },
    points: {
      reservation: (L) => L.reserve && L.paged ? [
        `최대 길이(1,024토큰 = 블록 64개)를 미리 잡으니 동시에 ${L.reserve.peak_running}건만 들어갔고, 쓴 만큼만 블록을 주니 같은 풀에서 ${L.paged.peak_running}건이 한꺼번에 돌았습니다.`,
        `6건을 모두 끝내는 데 ${L.reserve.steps} 스텝 대신 ${L.paged.steps} 스텝, 실행 전체 처리량은 ${L.reserve.tok_s} 대 ${L.paged.tok_s} 토큰/초였습니다.`,
        L.paged.tok_s < L.reserve.tok_s ? "이번에는 블록 단위 쪽의 초당 토큰이 더 적었습니다: 이 서버의 CPU에서는 6건이 든 스텝이 3건이 든 스텝보다 오래 걸리기 때문입니다. GPU에서는 그 비용이 거의 늘지 않습니다." : "",
        L.paged.preemptions ? `블록 단위 쪽에서 선점이 ${L.paged.preemptions}번 있었습니다: 답이 자라며 빈 블록이 모자랐습니다.` : "선점은 없었습니다: 모든 답이 받은 블록 안에 들어갔습니다."] : [],
      "static-vs-continuous": (L) => L.static && L.continuous ? [
        `같은 요청 7건을 4건씩: 정적 배칭은 ${L.static.steps} 스텝, 연속 배칭은 ${L.continuous.steps} 스텝이 걸렸습니다.`,
        `정적 배칭에서는 먼저 끝난 요청의 자리가 배치가 끝날 때까지 ${L.static.idle_slots}칸 비어 있었습니다(·). 연속 배칭은 빈자리를 다음 스텝에 바로 다음 요청에 주었습니다(빈 자리 0칸).`,
        L.static.tok_s >= L.continuous.tok_s ? "초당 토큰은 여기서 비슷합니다: 이 서버의 CPU에서는 스텝에 든 요청이 많을수록 스텝이 길어집니다. GPU가 값을 치르는 단위인 스텝 수를 비교하세요." : ""] : [],
      concurrency: (L) => L.one && L.eight ? [
        `요청 1건만 있을 때 그 요청은 초당 ${L.one.req_tok_s} 토큰, 8건이 함께일 때 요청 하나는 초당 ${L.eight.req_tok_s} 토큰 — 한 건이 더 빨라지지는 않았습니다.`,
        `서버 전체로는 초당 ${L.one.tok_s} → ${L.eight.tok_s} 토큰(×${(L.eight.tok_s / Math.max(L.one.tok_s, 0.1)).toFixed(1)}): ${L.one.steps} 스텝에 ${L.one.tokens} 토큰 대신 ${L.eight.steps} 스텝에 ${L.eight.tokens} 토큰. 늘어난 것은 처리량이지 한 건의 속도가 아닙니다.`] : [],
      "prefix-caching": (L) => {
        if (!L.cache) return [];
        const r = Object.fromEntries(L.cache.requests.map((q) => [q.label, q]));
        return [
          r.B ? `캐싱을 켠 엔진에서 B는 프롬프트 ${r.B.prompt_tokens} 토큰 중 ${r.B.cached_tokens} 토큰을 A의 블록에서 재사용했습니다(타임라인의 ★). 그만큼은 다시 계산하지 않았습니다.` : "",
          r.C && r.D ? `C와 D는 맨 앞에 시각이 있습니다(“${r.C.first_block.trim().slice(0, 40)}…”). 첫 블록부터 내용이 달라 뒤의 모든 블록 해시도 달라지므로, 재사용한 토큰은 ${r.C.cached_tokens + r.D.cached_tokens}개입니다.` : "",
          L.nocache ? `계산한 프롬프트 토큰: 캐싱 켬 ${L.cache.prompt_computed}개, 끔 ${L.nocache.prompt_computed}개.` : ""];
      },
      preemption: (L) => L.small ? [
        `블록 56개짜리 풀에 긴 답 6건: 블록이 ${L.small.preemptions}번 모자랐고, 그때마다 가장 늦게 들어온 실행 중 요청이 선점되었습니다(✕).`,
        "선점된 요청은 블록을 모두 내놓고 대기 줄 맨 앞에서 기다리다가, 자리가 나면 프롬프트와 그때까지 만든 토큰을 처음부터 다시 계산합니다(재계산). 프리픽스 캐시에 남은 블록은 다시 씁니다.",
        "vLLM V1은 선점할 때 로그를 남기지 않습니다: 지표 vllm:num_preemptions_total(과 늘어나는 대기 요청 수)을 보세요."] : [],
    },
  };
  const CODES = T.codes;
  const SHOW = { P: "▤", D: "■", F: "✓", W: "…", R: "○", X: "✕", S: "⇣", I: "·", " ": "" };
  const PALETTE = 10;
  const reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)").matches;

  const $ = (sel) => root.querySelector(sel);
  const statusEl = $("[data-status]"), liveEl = $("[data-live]"), messageEl = $("[data-message]"), lanesEl = $("[data-lanes]");
  const canControl = root.dataset.canControl === "true";
  let live = null; // the run's picture as the deltas built it (drawn as `current`)
  let pending = null, current = null, lastSeq = -1, tableView = false, lastLive = 0, socket = null, retry = 0;
  let replay = null, endSummary = null;

  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const setText = (el, v) => { v = String(v); if (el.textContent !== v) el.textContent = v; };
  const setAttr = (el, name, v) => { v = String(v); if (el.getAttribute(name) !== v) el.setAttribute(name, v); };
  const setHTML = (el, html) => { if (el._html !== html) { el._html = html; el.innerHTML = html; } };
  const make = (html) => { const t = document.createElement("template"); t.innerHTML = html.trim(); return t.content.firstElementChild; };
  function labels(lane) {
    const map = {};
    lane.requests.forEach((r, i) => { map[r.id] = { label: r.label, color: i % PALETTE, owner: r.owner }; });
    return map;
  }

  // --- drawing --------------------------------------------------------------------------------
  // Each lane's elements are built once; a frame changes only what differs (text, attributes,
  // new timeline cells), so a focused block, scroll positions and open details survive frames.
  const CARDS = [["kv-usage", T.kvUsage], ["wasted-slots", T.wasted], ["hit-rate", T.hitRate], ["preemptions", T.preemptions],
    ["tok-s", T.tokS], ["req-tok-s", T.reqTokS], ["steps", T.steps], ["peak-running", T.peak], ["tokens", T.generated]];
  const views = new Map(); // lane name → its elements and what they show

  // Shown once above the lanes, folded (one line): how to read the pool and the cards. Open, it
  // pushed the engine itself below the first screen (issue #33).
  const guide = make(`<details class="demo-guide"><summary>${T.legendTitle}</summary>
    <div class="pool-legend"><ul>${T.legend.map(([cls, sym, text]) =>
      `<li><span class="lg-key ${cls}" aria-hidden="true">${sym}</span>${text}</li>`).join("")}</ul></div>
    <h2 class="stat-guide-h">${T.guideTitle}</h2><dl class="stat-guide">${CARDS.map(([m, label]) =>
      `<div><dt>${label}</dt><dd>${T.guide[m]}</dd></div>`).join("")}</dl></details>`);
  const endEl = make(`<section class="scene-summary" data-scene-summary hidden aria-labelledby="scene-summary-h"><h2 id="scene-summary-h" tabindex="-1">${T.endTitle}</h2><div data-points></div><ul data-lines></ul></section>`);
  lanesEl.before(endEl, guide);

  // A phone has room for one lane: tabs pick which (side by side needs a wider screen).
  const narrow = window.matchMedia("(max-width: 700px)");
  let tabsEl = null, shownLane = null;
  function syncTabs() {
    const names = [...views.keys()];
    const tabbed = narrow.matches && names.length > 1;
    if (!tabbed) {
      if (tabsEl) tabsEl.hidden = true;
      views.forEach((v) => { v.el.hidden = false; v.el.removeAttribute("role"); });
      return;
    }
    if (!tabsEl) {
      tabsEl = make(`<div class="lane-tabs" role="tablist" aria-label="${T.laneTabs}"></div>`);
      lanesEl.before(tabsEl);
      tabsEl.addEventListener("click", (event) => {
        const tab = event.target.closest("[role=tab]");
        if (tab) { shownLane = tab.dataset.laneTab; syncTabs(); }
      });
      tabsEl.addEventListener("keydown", (event) => { // arrow keys move between tabs (WAI-ARIA tabs)
        const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
        if (!step) return;
        const all = [...views.keys()], at = all.indexOf(shownLane);
        shownLane = all[(at + step + all.length) % all.length];
        syncTabs();
        tabsEl.querySelector(`[data-lane-tab="${CSS.escape(shownLane)}"]`).focus();
        event.preventDefault();
      });
    }
    if (!shownLane || !views.has(shownLane)) shownLane = names[0];
    if (tabsEl.dataset.names !== names.join("\n")) {
      tabsEl.dataset.names = names.join("\n");
      tabsEl.replaceChildren(...names.map((name) => {
        const v = views.get(name);
        return make(`<button type="button" role="tab" data-lane-tab="${esc(name)}" aria-controls="${v.el.id}">${esc(v.label)}</button>`);
      }));
    }
    tabsEl.hidden = false;
    tabsEl.querySelectorAll("[role=tab]").forEach((tab) => {
      const on = tab.dataset.laneTab === shownLane;
      tab.setAttribute("aria-selected", String(on));
      tab.tabIndex = on ? 0 : -1;
    });
    views.forEach((v, name) => { v.el.setAttribute("role", "tabpanel"); v.el.hidden = name !== shownLane; });
  }
  narrow.addEventListener("change", syncTabs);

  function laneView(lane) {
    let v = views.get(lane.name);
    if (v && v.numBlocks === lane.num_blocks) return v;
    const id = `lane-${lane.name.replace(/[^\w-]/g, "")}`;
    const el = make(`<section class="lane" id="${id}" data-lane="${esc(lane.name)}" aria-labelledby="${id}-h">
      <h2 id="${id}-h">${esc(lane.label)}</h2>
      <div class="queues">${["waiting", "running", "swapped"].map((q) => `<div data-queue="${q}"><span class="q-label">${T[q]}</span><span class="q-chips"></span></div>`).join("")}</div>
      <h3 id="${id}-pool">${T.pool} <small>(${lane.num_blocks} × ${lane.block_size} ${T.tokens})</small></h3>
      <div class="pool" role="group" aria-labelledby="${id}-pool" aria-describedby="${id}-keys" style="--cols:${Math.min(32, Math.ceil(Math.sqrt(lane.num_blocks * 2)))}"></div>
      <p class="block-detail muted" aria-hidden="true"></p>
      <p class="muted pool-keys" id="${id}-keys">${T.poolKeys}</p>
      <div class="stat-cards">${CARDS.map(([m, label]) => `<div class="stat" data-metric="${m}" data-value="0" title="${esc(T.guide[m])}"><span class="stat-label">${label}</span><span class="stat-value">0</span><small></small></div>`).join("")}</div>
      <div class="pool-table-wrap" hidden><table class="pool-table"><caption>${T.pool}</caption><thead><tr><th scope="col">${T.block}</th><th scope="col">${T.owner}</th><th scope="col">${T.ref}</th><th scope="col">${T.filled}</th><th scope="col">${T.tokens}</th></tr></thead><tbody></tbody></table></div>
      <h3 id="${id}-maps">${T.tables}</h3><ul class="block-tables" tabindex="0" aria-labelledby="${id}-h ${id}-maps"></ul>
      <h3 id="${id}-tl">${T.timeline}</h3>
      <div class="tl-scroll" role="region" tabindex="0" aria-labelledby="${id}-h ${id}-tl"><table class="timeline"><thead><tr><th scope="col">${T.step} →</th></tr></thead><tbody></tbody></table></div>
      <p class="legend">${Object.entries(SHOW).filter(([c]) => c !== " ").map(([c, s]) => `<span class="tl-${c}">${s}</span> ${CODES[c]}`).join(" · ")} · <span class="tl-mark">★</span> ${T.mark}</p>
      <h3>${T.outputs}</h3><ol class="outputs"></ol>
      <div class="log-wrap" hidden><h3 id="${id}-log">${T.logTitle}</h3><div class="log" role="log" tabindex="0" aria-labelledby="${id}-h ${id}-log" data-log><ol></ol></div></div>
    </section>`);
    const poolEl = el.querySelector(".pool");
    const blocks = [];
    for (let i = 0; i < lane.num_blocks; i++) {
      // role=img, not a button: a block is something to read, and the pool's one tab stop with
      // arrow keys inside keeps 200 blocks out of the Tab order.
      const b = document.createElement("div");
      b.setAttribute("role", "img");
      b.className = "block free";
      b.tabIndex = i === 0 ? 0 : -1;
      b.dataset.blockId = String(i);
      b.innerHTML = `<span class="fill"></span><span class="b-label"></span><span class="badge-ref"></span>`;
      blocks.push(b);
      poolEl.appendChild(b);
    }
    v = { el, label: lane.label, numBlocks: lane.num_blocks, blocks, sig: [], rows: new Map(), width: 0, offset: null, tlAtEnd: true, logAtEnd: true, marks: "",
      cards: Object.fromEntries(CARDS.map(([m]) => [m, el.querySelector(`[data-metric="${m}"]`)])),
      chips: Object.fromEntries(["waiting", "running", "swapped"].map((q) => [q, el.querySelector(`[data-queue=${q}] .q-chips`)])),
      pool: poolEl, detail: el.querySelector(".block-detail"), tableWrap: el.querySelector(".pool-table-wrap"), tbody: el.querySelector(".pool-table tbody"),
      maps: el.querySelector(".block-tables"), scroll: el.querySelector(".tl-scroll"), head: el.querySelector(".timeline thead tr"),
      body: el.querySelector(".timeline tbody"), outputs: el.querySelector(".outputs"), outs: new Map(),
      logWrap: el.querySelector(".log-wrap"), log: el.querySelector("[data-log]"), logList: el.querySelector("[data-log] ol") };
    const old = views.get(lane.name);
    if (old) old.el.replaceWith(el); else lanesEl.appendChild(el);
    views.set(lane.name, v);
    syncTabs();
    return v;
  }

  function drawCards(v, lane, ended) {
    const s = lane.stats || {};
    const set = (m, value, sub) => {
      const card = v.cards[m];
      setAttr(card, "data-value", value);
      setText(card.children[1], value);
      setText(card.children[2], sub || "");
    };
    // The end screen keeps the run's figures: KV at its peak, not the empty pool after the last request.
    const kvLabel = v.cards["kv-usage"].children[0];
    if (ended && s.kv_peak !== undefined) {
      setText(kvLabel, T.kvPeak);
      set("kv-usage", `${s.kv_peak}%`, `${s.kv_peak_blocks}/${lane.num_blocks} ${T.blocks}`);
    } else {
      setText(kvLabel, T.kvUsage);
      set("kv-usage", `${s.kv_usage ?? 0}%`, `${s.kv_blocks_used ?? 0}/${lane.num_blocks} ${T.blocks} · ${s.kv_tokens_used ?? 0} ${T.tokens}`);
    }
    set("wasted-slots", s.wasted_slots ?? 0, T.tokens);
    set("hit-rate", `${s.hit_rate ?? 0}%`);
    set("preemptions", s.preemptions ?? 0);
    set("tok-s", s.tok_s ?? 0, s.engine_s !== undefined ? `${s.tokens ?? 0} ${T.tokens} / ${s.engine_s} s` : "");
    set("req-tok-s", s.req_tok_s ?? 0);
    set("steps", s.steps ?? lane.step);
    set("peak-running", s.peak_running ?? 0);
    set("tokens", s.tokens ?? 0);
  }

  function drawQueues(v, lane, who) {
    for (const q of ["waiting", "running", "swapped"]) {
      const ids = lane.queues[q] || [];
      setHTML(v.chips[q], ids.length ? ids.map((id) => `<span class="chip c${who[id]?.color ?? 0}" data-request="${esc(id)}">${esc(who[id]?.label ?? id)}</span>`).join("") : `<span class="muted">${T.none}</span>`);
    }
  }

  function drawPool(v, lane, who) {
    const byId = new Map(lane.blocks.map((b) => [b[0], b]));
    const where = {}; // block id → ["A[2]", …] (request label [logical index])
    const text = {}; // block id → the tokens it holds, as text
    for (const [rid, ids] of Object.entries(lane.tables)) ids.forEach((b, i) => {
      (where[b] = where[b] || []).push(`${who[rid]?.label ?? rid}[${i}]`);
      const t = (lane.block_text || {})[rid];
      if (t && t[i] !== undefined && text[b] === undefined) text[b] = t[i];
    });
    const tips = [];
    for (let id = 0; id < v.numBlocks; id++) {
      const b = byId.get(id), el = v.blocks[id];
      let cls, label = "", fill = 0, ref = 0, tip, owner = "";
      if (!b) { cls = "block free"; tip = `${T.block} ${id}: ${T.free}`; }
      else {
        const [, r, filled, , owners] = b;
        ref = r;
        const names = owners.map((o) => who[o]?.label ?? o);
        owner = names.join(" ");
        cls = `block ${owners.length ? "used" : "cached"} ${owners.length ? `c${who[owners[0]]?.color ?? 0}` : ""}${ref > 1 ? " shared" : ""}`;
        fill = Math.round((100 * filled) / lane.block_size);
        label = names.join("") || "♻";
        tip = `${T.block} ${id} · ${names.join(", ") || T.cached} · ${filled}/${lane.block_size} ${T.filled}` + (ref > 1 ? ` · ${T.ref} ${ref}` : "") + (where[id] ? ` · ${where[id].join(" ")}` : "") + (text[id] ? ` · “${text[id]}”` : "");
      }
      tips.push([id, b, tip, owner]);
      const sig = `${cls}|${fill}|${label}|${ref}|${tip}`;
      if (v.sig[id] === sig) continue;
      v.sig[id] = sig;
      el.className = cls;
      el.dataset.owner = owner;
      el.dataset.refcount = String(ref);
      el.dataset.cached = b ? String(b[3]) : "0";
      el.title = tip;
      el.setAttribute("aria-label", tip);
      el.children[0].style.height = `${fill}%`;
      el.children[1].textContent = label;
      el.children[2].textContent = ref > 1 ? String(ref) : "";
      if (el === document.activeElement || el === v.hovered) v.detail.textContent = tip;
    }
    v.pool.hidden = tableView;
    v.tableWrap.hidden = !tableView;
    if (tableView) setHTML(v.tbody, tips.filter(([, b]) => b).map(([id, b, , owner]) =>
      `<tr data-block-id="${id}"><td>${id}</td><td>${esc(owner.replace(/ /g, ", ") || T.cached)}${where[id] ? ` (${esc(where[id].join(" "))})` : ""}</td><td>${b[1]}</td><td>${b[2]}/${lane.block_size}</td><td class="tokens">${esc(text[id] ?? "")}</td></tr>`).join(""));
  }

  function drawMaps(v, lane, who) {
    const rows = Object.entries(lane.tables).map(([rid, ids]) =>
      `<li data-request="${esc(rid)}"><span class="chip c${who[rid]?.color ?? 0}">${esc(who[rid]?.label ?? rid)}</span> ` +
      ids.map((b, i) => `<span class="map" data-logical="${i}" data-physical="${b}">${i}→${b}</span>`).join(" ") + "</li>").join("");
    setHTML(v.maps, rows || `<li class="muted">${T.none}</li>`);
  }

  const cell = (c, step, rid) => `<td class="tl-${c === " " ? "none" : c}" data-step="${step}" data-request="${esc(rid)}" data-code="${c.trim()}" title="${CODES[c]}">${SHOW[c]}</td>`;
  function drawTimeline(v, lane, who, ended) {
    const width = Math.max(0, ...Object.values(lane.timeline).map((s) => s.length));
    const offset = lane.step - width; // > 0 once the oldest steps were dropped (MAX_TIMELINE)
    const marks = new Map(lane.log.filter((e) => e.kind === "hit").map((e) => [e.step, e]));
    const markKey = [...marks.keys()].join(",");
    const sc = v.scroll, atEnd = v.tlAtEnd;
    if (offset !== v.offset || markKey !== v.marks) { // the columns shifted (or a marker came): draw the header again
      v.offset = offset; v.marks = markKey; v.width = 0;
      v.head.innerHTML = `<th scope="col">${T.step} →</th>`;
      v.rows.forEach((row) => { row.tr.remove(); });
      v.rows.clear();
    }
    let head = "";
    for (let i = v.width; i < width; i++) {
      const step = offset + i + 1, m = marks.get(step);
      head += m ? `<th scope="col" class="tl-mark" title="${esc(T.log.hit(m))}">★${step}</th>` : `<th scope="col">${step}</th>`;
    }
    if (head) v.head.insertAdjacentHTML("beforeend", head);
    v.width = width;
    lane.requests.forEach((r) => {
      const codes = (lane.timeline[r.id] || "").padStart(width, " ");
      let row = v.rows.get(r.id);
      if (!row) {
        const tr = document.createElement("tr");
        tr.innerHTML = `<th scope="row"><span class="chip c${who[r.id].color}">${esc(r.label)}</span></th>`;
        v.body.appendChild(tr);
        row = { tr, codes: "" };
        v.rows.set(r.id, row);
      }
      if (!codes.startsWith(row.codes)) { // only a replay going back rewrites a row
        while (row.tr.children.length > 1) row.tr.lastChild.remove();
        row.codes = "";
      }
      let add = "";
      for (let i = row.codes.length; i < codes.length; i++) add += cell(codes[i], offset + i + 1, r.id);
      if (add) row.tr.insertAdjacentHTML("beforeend", add);
      row.codes = codes;
    });
    // Follow the newest step while the run goes on, unless the reader scrolled back; the end
    // screen starts at step 1 so the whole run reads from its start.
    if (ended && !v.rewound) { scrolls.push([sc, "scrollLeft", 0]); v.rewound = true; }
    else if (!ended && atEnd) { scrolls.push([sc, "scrollLeft", 1e9]); v.rewound = false; } // clamped to the end
  }

  function drawOutputs(v, lane, who, scene) {
    lane.requests.forEach((r) => {
      let o = v.outs.get(r.id);
      if (!o) {
        const li = make(`<li data-request="${esc(r.id)}"><span class="chip c${who[r.id].color}">${esc(r.label)}</span>${r.owner ? `<span class="owner">${esc(r.owner)}</span>` : ""} <span class="muted meta"></span><div class="prompt">${esc(r.prompt)}</div><div class="first-block muted" hidden></div><div class="answer"></div><div class="cut" hidden>${esc(T.cut(r.max_tokens, scene))}</div></li>`);
        v.outputs.appendChild(li);
        o = { li, meta: li.querySelector(".meta"), first: li.querySelector(".first-block"), answer: li.querySelector(".answer"), cut: li.querySelector(".cut") };
        v.outs.set(r.id, o);
      }
      setAttr(o.li, "data-status", r.status);
      setAttr(o.li, "data-cached-tokens", r.cached_tokens);
      setAttr(o.li, "data-output-tokens", r.output_tokens);
      setText(o.meta, `${r.prompt_tokens}+${r.output_tokens} ${T.tokens}${r.cached_tokens ? ` · ♻ ${r.cached_tokens}` : ""}${r.preemptions ? ` · ✕${r.preemptions}` : ""}${r.output_tokens ? ` · ${r.tok_s} ${T.reqSpeed}` : ""}`);
      setText(o.answer, r.text);
      const cut = r.finish_reason === "finished_length";
      if (o.cut.hidden === cut) o.cut.hidden = !cut;
      const first = ((lane.block_text || {})[r.id] || [])[0];
      if (scene === "prefix-caching" && first) { o.first.hidden = false; setText(o.first, `${T.firstBlock}: “${first}”`); }
    });
  }

  function drawLog(v, lane) {
    v.logWrap.hidden = !lane.log.length;
    const html = lane.log.map((e) => `<li data-kind="${esc(e.kind)}" data-req="${esc(e.req)}">${esc((T.log[e.kind] || ((x) => JSON.stringify(x)))(e))}</li>`).join("");
    if (html === v.logList._html) return;
    setHTML(v.logList, html);
    if (v.logAtEnd) scrolls.push([v.log, "scrollTop", 1e9]);
  }

  function drawSummary(frame) {
    if (frame.summary) endSummary = frame;
    const ended = ENDED.has(frame.status) && !replay;
    endEl.hidden = !(ended && endSummary);
    if (endEl.hidden || endEl.dataset.seq === String(endSummary.seq)) return;
    endEl.dataset.seq = String(endSummary.seq);
    const L = Object.fromEntries(endSummary.summary.map((l) => [l.name, l]));
    const point = T.points[endSummary.scene];
    endEl.querySelector("[data-points]").innerHTML = (point ? point(L) : []).filter(Boolean).map((p) => `<p>${esc(p)}</p>`).join("");
    endEl.querySelector("[data-lines]").innerHTML = endSummary.summary.map((l) => `<li data-lane="${esc(l.name)}">${esc(T.laneLine(l))}</li>`).join("");
  }

  // Scroll positions are set at the next animation frame, once this one is laid out: setting
  // them now would force a layout of the whole page in the middle of drawing.
  let scrolls = [];
  function applyScrolls() {
    const todo = scrolls;
    scrolls = [];
    todo.forEach(([el, prop, value]) => { el[prop] = value; });
  }

  function draw(frame) {
    const t0 = performance.now();
    current = frame;
    const ended = ENDED.has(frame.status);
    // Every layout read first (the last frame's layout is still valid), then only writes: reading
    // a scroll position between writes would force a layout per lane.
    views.forEach((v) => {
      const sc = v.scroll, log = v.log;
      v.tlAtEnd = sc.scrollLeft + sc.clientWidth >= sc.scrollWidth - 4;
      v.logAtEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    });
    for (const lane of frame.lanes) {
      const v = laneView(lane), who = labels(lane);
      drawCards(v, lane, ended && !replay);
      drawQueues(v, lane, who);
      drawPool(v, lane, who);
      drawMaps(v, lane, who);
      drawTimeline(v, lane, who, ended && !replay);
      drawOutputs(v, lane, who, frame.scene);
      drawLog(v, lane);
    }
    drawSummary(frame);
    statusEl.textContent = replay ? T.replaying : stateText(frame);
    setState(replay ? "replay" : frame.status === "running" && frame.paused ? "paused" : frame.status);
    messageEl.textContent = ENDED.has(frame.status) && frame.status !== "failed" ? "" : frame.message || "";
    const pauseBtn = $("[data-action=pause]");
    if (pauseBtn) { pauseBtn.textContent = frame.paused ? T.resume : T.pause; pauseBtn.setAttribute("aria-pressed", String(!!frame.paused)); }
    disableControls(ended || !!replay);
    const replayBtn = $("[data-action=replay]"); // a served engine's live view has nothing recorded to replay
    if (replayBtn) replayBtn.disabled = !ended || !!replay;
    const now = Date.now();
    if (now - lastLive > 3000 && frame.lanes.length) { // throttled screen-reader summary
      lastLive = now;
      liveEl.textContent = frame.lanes.map((l) => `${l.label}: ${T.summary(l.stats || { steps: l.step, kv_usage: 0 }, l)}`).join(". ");
    }
    if (scrolls.length) requestAnimationFrame(applyScrolls);
    performance.measure("demo-draw", { start: t0, end: performance.now() });
  }

  // A finished run takes no more commands: its controls say so instead of doing nothing.
  function disableControls(off) {
    const els = [...root.querySelectorAll("[data-action=pause], [data-action=step], select[data-action=speed], [data-submit] textarea, [data-submit] input, [data-submit] button")];
    const lost = off && els.includes(document.activeElement); // a disabled control drops focus to <body>
    els.forEach((el) => { if (el.disabled !== off) el.disabled = off; });
    if (lost) requestAnimationFrame(() => { // to what the run's end offers next: its summary, else the replay
      const replayBtn = $("[data-action=replay]");
      const target = !endEl.hidden ? endEl.querySelector("h2") : replayBtn && !replayBtn.disabled ? replayBtn : statusEl;
      if (target === statusEl && !statusEl.hasAttribute("tabindex")) statusEl.tabIndex = -1;
      target.focus();
    });
  }

  // Blocks: one tab stop for the pool, arrow keys between blocks; focus or hover shows the details.
  lanesEl.addEventListener("keydown", (event) => {
    const b = event.target.closest(".block");
    if (!b) return;
    const pool = b.parentElement, all = [...pool.children], i = all.indexOf(b);
    const cols = Number(getComputedStyle(pool).getPropertyValue("--cols")) || 16;
    const step = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: cols, ArrowUp: -cols, Home: -i, End: all.length - 1 - i }[event.key];
    if (step === undefined) return;
    event.preventDefault();
    const next = all[Math.max(0, Math.min(all.length - 1, i + step))];
    b.tabIndex = -1; next.tabIndex = 0; next.focus();
  });
  const showDetail = (event) => {
    const b = event.target.closest && event.target.closest(".block");
    if (!b) return;
    const v = views.get(b.closest("[data-lane]").dataset.lane);
    if (!v) return;
    if (event.type === "mouseover") v.hovered = b;
    if (event.type === "focusin") { v.blocks.forEach((x) => { if (x !== b && x.tabIndex === 0) x.tabIndex = -1; }); b.tabIndex = 0; }
    v.detail.textContent = b.title;
  };
  lanesEl.addEventListener("mouseover", showDetail);
  lanesEl.addEventListener("focusin", showDetail);

  const ENDED = new Set(["finished", "failed", "expired", "stopped"]);
  function stateText(run) { // a frame or a status message
    if (run.status === "finished") return T.finished;
    if (run.status === "failed") return run.message ? `${T.failed}: ${run.message}` : T.failed;
    if (run.status === "expired" || run.status === "stopped") return T.reasons[run.reason] || T[run.status];
    if (run.status === "queued" && run.workers === 0) return T.noWorker(run.fails_in);
    if (run.status === "queued") return run.place ? T.queued(run.place, run.waiting) : T.connecting;
    if (run.status === "starting") return T.building(run.host || "", run.starting_for);
    return run.paused ? T.paused : T.live;
  }
  function setState(state) { statusEl.dataset.state = state; root.dataset.state = state; }

  function schedule(frame) {
    pending = frame;
    if (reducedMotion && current && Date.now() - (schedule.last || 0) < 500 && frame.status === "running") return;
    schedule.last = Date.now();
    requestAnimationFrame(() => { if (pending) { const f = pending; pending = null; draw(f); } });
  }
  // --- the socket -----------------------------------------------------------------------------
  function connect() {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${proto}://${location.host}${root.dataset.wsPath}`);
    socket.onopen = () => { retry = 0; while (outbox.length) socket.send(JSON.stringify(outbox.shift())); };
    socket.onmessage = (msg) => {
      const data = JSON.parse(msg.data);
      if (data.type === "snapshot") { // the whole picture: on connect, and after a gap
        live = data;
        linkDown = false;
        lastSeq = data.seq;
        if (!replay) schedule(live);
      } else if (data.type === "delta") { // only what changed since frame seq − 1
        if (!live || data.seq !== lastSeq + 1) {
          if (!live || data.seq > lastSeq) askSnapshot(); // a frame went missing: the picture would drift
          return;
        }
        live = patch(live, data.d);
        live.seq = lastSeq = data.seq;
        if (!replay) schedule(live);
      } else if (data.type === "error") {
        messageEl.textContent = data.message;
        if (data.status === "failed") endWith({ status: "failed", message: data.message });
      } else if (data.type === "status") {
        if (ENDED.has(data.status)) endWith(data);
        else { statusEl.textContent = stateText(data); setState(data.status); }
      } else if (data.type === "link") { // the server's own connection to the engine (Redis) broke or healed
        linkDown = data.state === "down";
        if (linkDown) { statusEl.textContent = T.linkDown; setState("link-down"); }
        else if (current && !ENDED.has(current.status)) { statusEl.textContent = stateText(current); setState(current.status); }
      }
    };
    socket.onclose = (event) => {
      if (event.code === 4404) { statusEl.textContent = T.failed; return; }
      if (ended || (current && ENDED.has(current.status))) return;
      statusEl.textContent = linkDown || event.code === 4503 ? T.linkDown : T.reconnecting;
      setTimeout(connect, Math.min(5000, 300 * 2 ** retry++));
    };
  }
  let ended = false;
  let linkDown = false; // the server said its live connection is down: keep saying that while retrying
  function endWith(run) { // the run ended without a final frame reaching this page
    ended = true;
    statusEl.textContent = stateText(run);
    setState(run.status);
    if (current) current = { ...current, status: run.status, reason: run.reason };
    disableControls(true);
    const replayBtn = $("[data-action=replay]");
    if (replayBtn) replayBtn.disabled = false;
  }
  function askSnapshot() { // at most once a second; the server answers with the latest picture
    if (Date.now() - (askSnapshot.at || 0) < 1000) return;
    askSnapshot.at = Date.now();
    send({ type: "snapshot" });
  }
  const outbox = []; // what the learner sent before the socket was open goes out once it is
  const send = (obj) => {
    if (socket && socket.readyState === 1) socket.send(JSON.stringify(obj));
    else outbox.push(obj);
  };

  // --- controls -------------------------------------------------------------------------------
  root.addEventListener("click", (event) => {
    const btn = event.target.closest("[data-action]");
    if (!btn || btn.tagName === "SELECT") return;
    const action = btn.dataset.action;
    if (action === "pause") send({ type: current && current.paused ? "resume" : "pause" });
    else if (action === "step") send({ type: "step" });
    else if (action === "table") { tableView = !tableView; btn.setAttribute("aria-pressed", String(tableView)); if (current) draw(current); }
    else if (action === "replay") startReplay();
  });
  const speed = $("select[data-action=speed]");
  if (speed) speed.addEventListener("change", () => send({ type: "speed", value: Number(speed.value) }));
  const form = $("[data-submit]");
  if (form) form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    send({ type: "submit", prompt: String(data.get("prompt") || ""), max_tokens: Number(data.get("max_tokens") || 64) });
  });
  document.addEventListener("keydown", (event) => { // space pauses, "." steps (outside text fields)
    if (!canControl || event.target.closest("input, textarea, select, button")) return;
    if (event.key === " ") { event.preventDefault(); send({ type: current && current.paused ? "resume" : "pause" }); }
    if (event.key === ".") send({ type: "step" });
  });

  // --- replay of a finished run from its recorded trace ---------------------------------------
  // Live frames after the first and a stored trace's steps are deltas (courseapp/demo/traces.py):
  // [0, value] replace · [1, {key: delta}, [deleted keys]] · [2, length, {index: delta}] · [3, suffix]
  function patch(value, delta) {
    if (!delta) return value;
    const [kind, a, b] = delta;
    if (kind === 0) return a;
    if (kind === 1) { b.forEach((k) => delete value[k]); for (const [k, d] of Object.entries(a)) value[k] = patch(value[k], d); return value; }
    if (kind === 2) { value.length = a; for (const [i, d] of Object.entries(b)) value[Number(i)] = patch(value[Number(i)], d); return value; }
    if (kind === 3) return value + a;
    if (kind === 4) return value.slice(a) + b;
    return value;
  }

  async function startReplay() {
    const response = await fetch(root.dataset.traceUrl);
    if (!response.ok) { messageEl.textContent = await response.text(); return; }
    const trace = await response.json();
    if (!trace.base) return;
    const end = current ? { status: current.status, reason: current.reason, message: current.message } : { status: "finished" };
    let frame = trace.base;
    replay = { i: 0 };
    const tick = () => {
      if (!replay) return;
      if (replay.i > 0) frame = patch(frame, trace.deltas[replay.i - 1]);
      draw({ ...frame, type: "frame", status: "running", paused: false, speed: 1, message: "", summary: null });
      replay.i += 1;
      if (replay.i <= trace.deltas.length) setTimeout(tick, reducedMotion ? 400 : 80);
      else { replay = null; draw({ ...frame, ...end, paused: false, summary: null }); }
    };
    tick();
  }

  // --- a scene page: start the run (a POST; reading the page started nothing), then watch it ---
  function showRun(run) {
    root.dataset.run = run.run;
    root.dataset.wsPath = run.ws_path;
    root.dataset.traceUrl = run.trace_url;
    history.replaceState(null, "", run.url); // a reload shows this run instead of starting another
    const notice = $("[data-notice]");
    if (notice && run.replaced.length) notice.textContent = run.replaced.map(T.previous).join(" ");
    const summary = $("[data-summary]");
    if (summary && window.htmx) window.htmx.ajax("GET", run.summary_url, { target: summary, swap: "outerHTML" });
    statusEl.textContent = T.connecting;
    setState("connecting");
    connect();
  }

  async function start(form) {
    let response;
    try {
      response = await fetch(form.action, {
        method: "POST", body: new FormData(form), credentials: "same-origin",
        headers: { Accept: "application/json", "X-CSRFToken": csrfToken() },
      });
    } catch (error) {
      messageEl.textContent = String(error);
      waitAndRetry(5, (text) => { statusEl.textContent = text; }, () => start(form));
      return;
    }
    const body = await response.json().catch(() => ({ error: response.statusText }));
    if (response.ok) { form.hidden = true; showRun(body); return; }
    messageEl.textContent = [body.error, body.wait].filter(Boolean).join(" ");
    setState(response.status === 503 || response.status === 429 ? "waiting" : "refused");
    if (response.status === 503 || response.status === 429) {
      waitAndRetry(body.retry_in, (text) => { statusEl.textContent = text; }, () => start(form));
    } else statusEl.textContent = T.failed;
  }

  const startForm = $("[data-start]");
  if (startForm) {
    startForm.addEventListener("submit", (event) => { event.preventDefault(); start(startForm); });
    statusEl.textContent = T.starting;
    start(startForm);
  } else {
    statusEl.textContent = T.connecting;
    connect();
  }
})();
