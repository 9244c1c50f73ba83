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
    connecting: "Connecting…", live: "Live", paused: "Paused", finished: "Finished", failed: "Failed",
    reconnecting: "Connection lost; reconnecting…", replaying: "Replaying the recorded run",
    kvUsage: "KV usage", blocks: "blocks", tokens: "tokens", wasted: "Wasted slots", hitRate: "Prefix hit rate",
    preemptions: "Preemptions", tokS: "tokens/s", steps: "Steps", waiting: "Waiting", running: "Running", swapped: "Swapped",
    pool: "Physical block pool", tables: "Block tables (logical → physical)", timeline: "Batch timeline (steps × requests)",
    outputs: "Outputs", log: "Engine log", free: "free", cached: "cached (free, kept for prefix hits)",
    peak: "Most running at once", generated: "Tokens generated",
    step: "Step", pause: "Pause", resume: "Resume", block: "block", ref: "refs", filled: "filled", owner: "owner",
    none: "none", summary: (s, l) => `Step ${s.steps}: ${l.queues.running.length} running, ${l.queues.waiting.length} waiting, KV ${s.kv_usage}%`,
    starting: "Starting…", stopped: "Stopped", expired: "Ended",
    queued: (n, all) => `Waiting for an engine worker: number ${n} of ${all} in the queue`,
    building: (host, s) => `Starting on ${host}: building the engine (the model may be loading)… ${s || 0} s`,
    previous: (t) => `Your previous run “${t}” was stopped: one run at a time per learner.`,
    reasons: { replaced: "Stopped: you opened another scene", owner: "Stopped", shutdown: "Stopped: the server restarted",
      no_viewer: "Ended: nobody watched it for a minute", never_picked_up: "Ended: no engine worker picked it up",
      worker_shutdown: "Stopped: its engine worker shut down",
      paused_idle: "Ended: it stayed paused with nothing happening", idle: "Ended: no prompt came for a long time",
      lifetime: "Ended: it ran as long as a run may" },
  } : {
    connecting: "연결 중…", live: "실행 중", paused: "일시 정지", finished: "끝남", failed: "실패",
    reconnecting: "연결이 끊겼습니다. 다시 연결하는 중…", replaying: "기록된 실행을 다시 보는 중",
    kvUsage: "KV 사용률", blocks: "블록", tokens: "토큰", wasted: "빈 자리(낭비)", hitRate: "프리픽스 적중률",
    preemptions: "선점", tokS: "토큰/초", steps: "스텝", waiting: "대기", running: "실행 중", swapped: "스왑됨",
    pool: "물리 블록 풀", tables: "블록 테이블 (논리 → 물리)", timeline: "배치 타임라인 (스텝 × 요청)",
    outputs: "출력", log: "엔진 로그", free: "빈 블록", cached: "캐시됨 (주인 없음, 프리픽스용으로 보관)",
    peak: "최대 동시 실행", generated: "생성한 토큰",
    step: "스텝", pause: "일시 정지", resume: "다시 시작", block: "블록", ref: "참조", filled: "채움", owner: "주인",
    none: "없음", summary: (s, l) => `스텝 ${s.steps}: 실행 ${l.queues.running.length}, 대기 ${l.queues.waiting.length}, KV ${s.kv_usage}%`,
    starting: "시작하는 중…", stopped: "멈춤", expired: "끝남",
    queued: (n, all) => `엔진 워커를 기다리는 중: 대기열 ${all}개 중 ${n}번째`,
    building: (host, s) => `${host}에서 시작하는 중: 엔진을 만드는 중입니다(모델을 불러오는 중일 수 있음)… ${s || 0}초`,
    previous: (t) => `이전 실행 “${t}”은(는) 멈췄습니다: 학습자 한 명당 실행은 하나입니다.`,
    reasons: { replaced: "멈춤: 다른 장면을 열었습니다", owner: "멈춤", shutdown: "멈춤: 서버가 다시 시작되었습니다",
      no_viewer: "끝남: 1분 동안 보는 사람이 없었습니다", never_picked_up: "끝남: 실행을 맡은 엔진 워커가 없었습니다",
      worker_shutdown: "멈춤: 엔진 워커가 종료되었습니다",
      paused_idle: "끝남: 일시 정지된 채 아무 일도 없었습니다", idle: "끝남: 오랫동안 프롬프트가 오지 않았습니다",
      lifetime: "끝남: 실행 시간 한도에 닿았습니다" },
  };
  const CODES = { P: EN ? "prompt chunk" : "프롬프트 조각", D: EN ? "decode" : "디코드", F: EN ? "finished" : "끝",
    W: EN ? "waiting" : "대기", R: EN ? "running, no tokens this step" : "실행 중(이번 스텝 토큰 없음)",
    X: EN ? "preempted" : "선점됨", S: EN ? "swapped out" : "스왑됨", " ": "" };
  const SHOW = { P: "▤", D: "■", F: "✓", W: "·", R: "○", X: "✕", S: "⇣", " ": "" };
  const PALETTE = 10;
  const reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)").matches;

  const $ = (sel) => root.querySelector(sel);
  const statusEl = $("[data-status]"), liveEl = $("[data-live]"), messageEl = $("[data-message]"), lanesEl = $("[data-lanes]");
  const canControl = root.dataset.canControl === "true";
  let pending = null, current = null, lastSeq = -1, tableView = false, lastLive = 0, socket = null, retry = 0;
  let replay = null;

  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  function labels(lane) {
    const map = {};
    lane.requests.forEach((r, i) => { map[r.id] = { label: r.label, color: i % PALETTE, owner: r.owner }; });
    return map;
  }

  // --- drawing --------------------------------------------------------------------------------
  function statCards(lane) {
    const s = lane.stats || {};
    const card = (metric, label, value, sub) =>
      `<div class="stat" data-metric="${metric}" data-value="${esc(value)}"><span class="stat-label">${label}</span><span class="stat-value">${esc(value)}</span>${sub ? `<small>${sub}</small>` : ""}</div>`;
    return `<div class="stat-cards">${[
      card("kv-usage", T.kvUsage, `${s.kv_usage ?? 0}%`, `${s.kv_blocks_used ?? 0}/${lane.num_blocks} ${T.blocks} · ${s.kv_tokens_used ?? 0} ${T.tokens}`),
      card("wasted-slots", T.wasted, s.wasted_slots ?? 0, T.tokens),
      card("hit-rate", T.hitRate, `${s.hit_rate ?? 0}%`),
      card("preemptions", T.preemptions, s.preemptions ?? 0),
      card("tok-s", T.tokS, s.tok_s ?? 0),
      card("steps", T.steps, s.steps ?? lane.step),
      card("peak-running", T.peak, s.peak_running ?? 0),
      card("tokens", T.generated, s.tokens ?? 0),
    ].join("")}</div>`;
  }

  function queues(lane, who) {
    const chips = (ids) => ids.length ? ids.map((id) => `<span class="chip c${who[id]?.color ?? 0}" data-request="${esc(id)}">${esc(who[id]?.label ?? id)}</span>`).join("") : `<span class="muted">${T.none}</span>`;
    return `<div class="queues">
      <div data-queue="waiting"><span class="q-label">${T.waiting}</span>${chips(lane.queues.waiting)}</div>
      <div data-queue="running"><span class="q-label">${T.running}</span>${chips(lane.queues.running)}</div>
      <div data-queue="swapped"><span class="q-label">${T.swapped}</span>${chips(lane.queues.swapped)}</div></div>`;
  }

  function pool(lane, who) {
    const byId = new Map(lane.blocks.map((b) => [b[0], b]));
    const where = {}; // block id → ["A[2]", …] (request label [logical index])
    const text = {}; // block id → the tokens it holds, as text
    for (const [rid, ids] of Object.entries(lane.tables)) ids.forEach((b, i) => {
      (where[b] = where[b] || []).push(`${who[rid]?.label ?? rid}[${i}]`);
      const t = (lane.block_text || {})[rid];
      if (t && t[i] !== undefined && text[b] === undefined) text[b] = t[i];
    });
    let cells = "";
    for (let id = 0; id < lane.num_blocks; id++) {
      const b = byId.get(id);
      if (!b) { cells += `<div class="block free" data-block-id="${id}" data-owner="" data-refcount="0" title="${id}: ${T.free}"></div>`; continue; }
      const [, ref, filled, cached, owners] = b;
      const names = owners.map((o) => who[o]?.label ?? o);
      const color = owners.length ? `c${who[owners[0]]?.color ?? 0}` : "";
      const fill = Math.round((100 * filled) / lane.block_size);
      const tip = `${T.block} ${id} · ${names.join(", ") || T.cached} · ${filled}/${lane.block_size} ${T.filled}` + (ref > 1 ? ` · ${T.ref} ${ref}` : "") + (where[id] ? ` · ${where[id].join(" ")}` : "") + (text[id] ? ` · “${text[id]}”` : "");
      cells += `<div class="block ${owners.length ? "used" : "cached"} ${color}${ref > 1 ? " shared" : ""}" tabindex="-1" data-block-id="${id}" data-owner="${esc(names.join(" "))}" data-refcount="${ref}" data-cached="${cached}" title="${esc(tip)}" aria-label="${esc(tip)}">` +
        `<span class="fill" style="height:${fill}%"></span><span class="b-label">${esc(names.join("") || "♻")}</span>${ref > 1 ? `<span class="badge-ref">${ref}</span>` : ""}</div>`;
    }
    const table = `<table class="pool-table" ${tableView ? "" : "hidden"}><caption>${T.pool}</caption><thead><tr><th scope="col">${T.block}</th><th scope="col">${T.owner}</th><th scope="col">${T.ref}</th><th scope="col">${T.filled}</th><th scope="col">${T.tokens}</th></tr></thead><tbody>` +
      lane.blocks.map(([id, ref, filled, cached, owners]) => `<tr data-block-id="${id}"><td>${id}</td><td>${esc(owners.map((o) => who[o]?.label ?? o).join(", ") || T.cached)}${where[id] ? ` (${esc(where[id].join(" "))})` : ""}</td><td>${ref}</td><td>${filled}/${lane.block_size}</td><td class="tokens">${esc(text[id] ?? "")}</td></tr>`).join("") + "</tbody></table>";
    return `<h3>${T.pool} <small>(${lane.num_blocks} × ${lane.block_size} ${T.tokens})</small></h3>
      <div class="pool" style="--cols:${Math.min(32, Math.ceil(Math.sqrt(lane.num_blocks * 2)))}" ${tableView ? "hidden" : ""} role="img" aria-label="${esc(T.pool)}: ${lane.blocks.length}/${lane.num_blocks}">${cells}</div>${table}`;
  }

  function blockTables(lane, who) {
    const rows = Object.entries(lane.tables).map(([rid, ids]) =>
      `<li data-request="${esc(rid)}"><span class="chip c${who[rid]?.color ?? 0}">${esc(who[rid]?.label ?? rid)}</span> ` +
      ids.map((b, i) => `<span class="map" tabindex="0" data-logical="${i}" data-physical="${b}" title="${esc(((lane.block_text || {})[rid] || [])[i] || "")}">${i}→${b}</span>`).join(" ") + "</li>").join("");
    return `<h3>${T.tables}</h3><ul class="block-tables">${rows || `<li class="muted">${T.none}</li>`}</ul>`;
  }

  function timeline(lane, who) {
    const width = Math.max(1, ...Object.values(lane.timeline).map((s) => s.length));
    const from = Math.max(0, width - 80), offset = lane.step - width;
    let head = `<tr><th scope="col">${T.step} →</th>`;
    for (let i = from; i < width; i++) head += `<th scope="col">${offset + i + 1}</th>`;
    head += "</tr>";
    const body = lane.requests.map((r) => {
      const codes = (lane.timeline[r.id] || "").padStart(width, " ");
      let cells = "";
      for (let i = from; i < width; i++) {
        const c = codes[i];
        cells += `<td class="tl-${c === " " ? "none" : c}" data-step="${offset + i + 1}" data-request="${esc(r.id)}" data-code="${c.trim()}" title="${CODES[c]}">${SHOW[c]}</td>`;
      }
      return `<tr><th scope="row"><span class="chip c${who[r.id].color}">${esc(r.label)}</span></th>${cells}</tr>`;
    }).join("");
    const legend = Object.entries(SHOW).filter(([c]) => c !== " ").map(([c, s]) => `<span class="tl-${c}">${s}</span> ${CODES[c]}`).join(" · ");
    return `<h3>${T.timeline}</h3><div class="tl-scroll" tabindex="0"><table class="timeline"><thead>${head}</thead><tbody>${body}</tbody></table></div><p class="legend">${legend}</p>`;
  }

  function outputs(lane, who) {
    return `<h3>${T.outputs}</h3><ol class="outputs">` + lane.requests.map((r) =>
      `<li data-request="${esc(r.id)}" data-status="${r.status}" data-cached-tokens="${r.cached_tokens}" data-output-tokens="${r.output_tokens}"><span class="chip c${who[r.id].color}">${esc(r.label)}</span>` +
      `${r.owner ? `<span class="owner">${esc(r.owner)}</span>` : ""} <span class="muted">${r.prompt_tokens}+${r.output_tokens} ${T.tokens}${r.cached_tokens ? ` · ♻ ${r.cached_tokens}` : ""}${r.preemptions ? ` · ✕${r.preemptions}` : ""}</span>` +
      `<div class="prompt">${esc(r.prompt)}</div><div class="answer">${esc(r.text)}</div></li>`).join("") + "</ol>";
  }

  function draw(frame) {
    current = frame;
    const html = frame.lanes.map((lane) => {
      const who = labels(lane);
      return `<section class="lane" data-lane="${esc(lane.name)}" aria-label="${esc(lane.label)}"><h2>${esc(lane.label)}</h2>` +
        statCards(lane) + queues(lane, who) + pool(lane, who) + blockTables(lane, who) + timeline(lane, who) + outputs(lane, who) +
        (lane.log.length ? `<h3>${T.log}</h3><pre class="log" data-log>${esc(lane.log.join("\n"))}</pre>` : "") + "</section>";
    }).join("");
    lanesEl.innerHTML = html;
    lanesEl.querySelectorAll(".tl-scroll").forEach((el) => { el.scrollLeft = el.scrollWidth; });
    statusEl.textContent = replay ? T.replaying : stateText(frame);
    setState(replay ? "replay" : frame.status === "running" && frame.paused ? "paused" : frame.status);
    messageEl.textContent = ENDED.has(frame.status) && frame.status !== "failed" ? "" : frame.message || "";
    const pauseBtn = $("[data-action=pause]");
    if (pauseBtn) { pauseBtn.textContent = frame.paused ? T.resume : T.pause; pauseBtn.setAttribute("aria-pressed", String(!!frame.paused)); }
    $("[data-action=replay]").disabled = !ENDED.has(frame.status);
    const now = Date.now();
    if (now - lastLive > 3000 && frame.lanes.length) { // throttled screen-reader summary
      lastLive = now;
      liveEl.textContent = frame.lanes.map((l) => `${l.label}: ${T.summary(l.stats || { steps: l.step, kv_usage: 0 }, l)}`).join(". ");
    }
  }

  const ENDED = new Set(["finished", "failed", "expired", "stopped"]);
  function stateText(run) { // a frame or a status message
    if (run.status === "finished") return T.finished;
    if (run.status === "failed") return run.message ? `${T.failed}: ${run.message}` : T.failed;
    if (run.status === "expired" || run.status === "stopped") return T.reasons[run.reason] || T[run.status];
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
      if (data.type === "frame" || data.type === "snapshot") {
        if (replay) return;
        if (data.type === "frame" && data.seq <= lastSeq && data.seq !== 0) return; // stale
        lastSeq = data.seq;
        schedule(data);
      } else if (data.type === "error") {
        messageEl.textContent = data.message;
        if (data.status === "failed") endWith({ status: "failed", message: data.message });
      } else if (data.type === "status") {
        if (ENDED.has(data.status)) endWith(data);
        else { statusEl.textContent = stateText(data); setState(data.status); }
      }
    };
    socket.onclose = (event) => {
      if (event.code === 4404) { statusEl.textContent = T.failed; return; }
      if (ended || (current && ENDED.has(current.status))) return;
      statusEl.textContent = T.reconnecting;
      setTimeout(connect, Math.min(5000, 300 * 2 ** retry++));
    };
  }
  let ended = false;
  function endWith(run) { // the run ended without a final frame reaching this page
    ended = true;
    statusEl.textContent = stateText(run);
    setState(run.status);
    if (current) current = { ...current, status: run.status, reason: run.reason };
    $("[data-action=replay]").disabled = false;
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
  // The trace is the first picture and one delta per step (courseapp/demo/traces.py):
  // [0, value] replace · [1, {key: delta}, [deleted keys]] · [2, length, {index: delta}] · [3, suffix]
  function patch(value, delta) {
    if (!delta) return value;
    const [kind, a, b] = delta;
    if (kind === 0) return a;
    if (kind === 1) { b.forEach((k) => delete value[k]); for (const [k, d] of Object.entries(a)) value[k] = patch(value[k], d); return value; }
    if (kind === 2) { value.length = a; for (const [i, d] of Object.entries(b)) value[Number(i)] = patch(value[Number(i)], d); return value; }
    if (kind === 3) return value + a;
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
      draw({ ...frame, type: "frame", status: "running", paused: false, speed: 1, message: "" });
      replay.i += 1;
      if (replay.i <= trace.deltas.length) setTimeout(tick, reducedMotion ? 400 : 80);
      else { replay = null; draw({ ...frame, ...end, paused: false }); }
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
