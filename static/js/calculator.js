/*
 * §1.2 calculator: "max-length reservation" vs "paged blocks" on the same KV pool.
 * Vanilla ES2020, no dependencies, no build step, no inline handlers (CSP-friendly:
 * widths are set through the CSSOM, never through style attributes).
 *
 * Markup contract (templates/lessons/diagrams/calculator.html):
 *   [data-calculator]                      one calculator (several may be on a page)
 *     input[data-calc-input=pool|maxlen|avg|block]
 *     button[data-calc-preset=N]           optional quick values for the pool
 *     [data-calc=error]  (role="alert")    Korean error message, empty when valid
 *     [data-calc=reserved-fit|reserved-ratio|reserved-waste|paged-fit|paged-blocks|paged-waste|gain]
 *     [data-calc=results|gain-row|visual]  hidden while the input is invalid
 *     [data-calc=bar-reserved|bar-paged|scale-max|visual-text|reserved-note|announce]
 *
 * Runs on DOMContentLoaded; window.initCalculators(root) re-runs it (e.g. after an
 * htmx swap; it is also hooked to htmx:load). Initialising twice is harmless.
 */
(function () {
  'use strict';

  const FIELDS = ['pool', 'maxlen', 'avg', 'block'];
  const NAMES = {
    pool: 'KV 풀 크기',
    maxlen: 'max-model-len',
    avg: '평균 요청 길이',
    block: '블록 크기',
  };
  const VALUE_KEYS = [
    'reserved-fit', 'reserved-ratio', 'reserved-waste',
    'paged-fit', 'paged-blocks', 'paged-waste', 'gain',
  ];
  const MAX_SEGMENTS = 160;   // above this, a bar draws one aggregated block
  const ANNOUNCE_DELAY_MS = 800;

  const nfInt = new Intl.NumberFormat('ko-KR', { maximumFractionDigits: 0 });
  const nfTok = new Intl.NumberFormat('ko-KR', { maximumFractionDigits: 1 });
  const nfOne = new Intl.NumberFormat('ko-KR', { minimumFractionDigits: 1, maximumFractionDigits: 1 });
  const fmtInt = (n) => nfInt.format(n);
  const fmtTok = (n) => nfTok.format(n);
  const fmtOne = (n) => nfOne.format(n);
  const fmtPct = (share) => nfOne.format(share * 100) + '%';

  /**
   * Pure calculation. raw: {pool, maxlen, avg, block} as strings or numbers
   * (NaN or '' = empty / not a number). Returns {ok: false, field, message}
   * or {ok: true, ...numbers}.
   */
  function calculate(raw) {
    const v = {};
    for (const f of FIELDS) {
      const r = raw[f];
      const s = (r === undefined || r === null) ? '' : String(r).trim();
      if (s === '') {
        return fail(f, `${NAMES[f]} — 값이 비어 있습니다. 숫자를 입력하세요.`);
      }
      const n = Number(s);
      if (!Number.isFinite(n)) {
        return fail(f, `${NAMES[f]} — 숫자가 아닙니다. 숫자를 입력하세요.`);
      }
      if (n <= 0) {
        return fail(f, `${NAMES[f]} — 0보다 큰 값이어야 합니다.`);
      }
      v[f] = n;
    }
    const { pool, maxlen, avg, block } = v;
    if (!Number.isInteger(block)) {
      return fail('block', '블록 크기 — 블록 하나에 담기는 토큰 수라서 정수여야 합니다(예: 16).');
    }
    if (avg > maxlen) {
      return fail('avg',
        `평균 요청 길이(${fmtTok(avg)})가 max-model-len(${fmtTok(maxlen)})보다 깁니다. ` +
        '이런 요청은 최대 길이를 넘으므로 어느 방식으로도 받을 수 없습니다.');
    }
    const blocksPerRequest = Math.ceil(avg / block);
    const tokensPerRequest = blocksPerRequest * block;
    if (pool < tokensPerRequest) {
      return fail('pool',
        `KV 풀(${fmtTok(pool)}토큰)이 요청 하나(블록으로 ${fmtTok(tokensPerRequest)}토큰)보다 작아서 ` +
        '한 건도 들어가지 않습니다. 풀을 늘리거나 요청 길이를 줄여 보세요.');
    }

    const reservedRatio = pool / maxlen;
    const reservedFit = Math.floor(reservedRatio);
    const reservedWaste = (maxlen - avg) / maxlen;

    const poolBlocks = Math.floor(pool / block);
    const pagedFit = Math.floor(poolBlocks / blocksPerRequest);
    const pagedWaste = (tokensPerRequest - avg) / tokensPerRequest;

    const gain = reservedFit > 0 ? pagedFit / reservedFit : null;

    return {
      ok: true, pool, maxlen, avg, block,
      reservedRatio, reservedFit, reservedWaste,
      blocksPerRequest, tokensPerRequest, poolBlocks, pagedFit, pagedWaste,
      gain,
      reservedLeft: pool - reservedFit * maxlen,
      pagedLeft: pool - pagedFit * tokensPerRequest,
    };
  }

  function fail(field, message) {
    return { ok: false, field, message };
  }

  function gainText(r) {
    if (r.gain === null) return '비교 불가 (최대 길이 예약으로는 0개)';
    return `약 ${fmtTok(r.gain)}배`;
  }

  function visualText(r) {
    let t;
    if (r.reservedFit === 0) {
      t = `최대 길이 예약: 풀 ${fmtTok(r.pool)}토큰이 max-model-len ${fmtTok(r.maxlen)}보다 작아 ` +
        '한 건도 자리를 잡을 수 없습니다.';
    } else {
      t = `최대 길이 예약: 풀 ${fmtTok(r.pool)}토큰에 요청 ${fmtInt(r.reservedFit)}개가 각 ` +
        `${fmtTok(r.maxlen)}칸을 잡고, 그중 ${fmtTok(r.avg)}칸만 쓰며 ${fmtTok(r.maxlen - r.avg)}칸은 비어 있습니다. ` +
        (r.reservedLeft > 0
          ? `남는 ${fmtTok(r.reservedLeft)}토큰에는 요청이 더 못 들어갑니다.`
          : '남는 칸은 없습니다.');
    }
    t += ` 블록 단위: 요청 ${fmtInt(r.pagedFit)}개가 각 ${fmtInt(r.blocksPerRequest)}블록` +
      `(${fmtTok(r.tokensPerRequest)}토큰)을 받고, ` +
      (r.pagedLeft > 0
        ? `남는 ${fmtTok(r.pagedLeft)}토큰에는 요청이 더 못 들어갑니다.`
        : '남는 칸은 없습니다.');
    return t;
  }

  // ---------- DOM ----------

  function el(tag, className) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    return e;
  }

  function pctWidth(e, share) {
    e.style.width = Math.max(0, Math.min(100, share * 100)) + '%';
  }

  function drawReserved(bar, r) {
    bar.replaceChildren();
    if (r.reservedFit > 0) {
      const usedShare = r.avg / r.maxlen;
      const segments = r.reservedFit <= MAX_SEGMENTS ? r.reservedFit : 1;
      const segTokens = r.reservedFit <= MAX_SEGMENTS ? r.maxlen : r.maxlen * r.reservedFit;
      for (let i = 0; i < segments; i++) {
        const seg = el('div', 'calc-seg');
        pctWidth(seg, segTokens / r.pool);
        const used = el('div', 'calc-seg-used');
        pctWidth(used, usedShare);
        seg.append(used, el('div', 'calc-seg-held'));
        bar.append(seg);
      }
    }
    bar.append(el('div', 'calc-seg-left'));
  }

  function drawPaged(bar, r) {
    bar.replaceChildren();
    if (r.pagedFit <= MAX_SEGMENTS) {
      for (let i = 0; i < r.pagedFit; i++) {
        const seg = el('div', 'calc-seg calc-seg-paged');
        pctWidth(seg, r.tokensPerRequest / r.pool);
        bar.append(seg);
      }
    } else {
      const many = el('div', 'calc-seg-many');
      pctWidth(many, (r.tokensPerRequest * r.pagedFit) / r.pool);
      bar.append(many);
    }
    bar.append(el('div', 'calc-seg-left'));
  }

  /** Give this calculator's ids unique values when the partial appears more than once. */
  function dedupeIds(container) {
    const renamed = new Map();
    container.querySelectorAll('[id]').forEach((node) => {
      const id = node.id;
      const same = document.querySelectorAll(`[id="${CSS.escape(id)}"]`);
      if (same.length > 1 && same[0] !== node) {
        let n = 2;
        while (document.getElementById(`${id}-${n}`)) n++;
        node.id = `${id}-${n}`;
        renamed.set(id, node.id);
      }
    });
    if (!renamed.size) return;
    const attrs = ['for', 'aria-labelledby', 'aria-describedby', 'aria-controls'];
    container.querySelectorAll('*').forEach((node) => {
      for (const a of attrs) {
        const val = node.getAttribute(a);
        if (!val) continue;
        const next = val.split(/\s+/).map((t) => renamed.get(t) || t).join(' ');
        if (next !== val) node.setAttribute(a, next);
      }
    });
    if (renamed.size && container.getAttribute('aria-labelledby')) {
      const val = container.getAttribute('aria-labelledby');
      container.setAttribute('aria-labelledby',
        val.split(/\s+/).map((t) => renamed.get(t) || t).join(' '));
    }
  }

  function init(container) {
    if (container.dataset.calcReady === 'true') return;
    container.dataset.calcReady = 'true';
    dedupeIds(container);

    const q = (sel) => container.querySelector(sel);
    const inputs = {};
    for (const f of FIELDS) {
      inputs[f] = q(`[data-calc-input="${f}"]`);
      if (!inputs[f]) return; // incomplete markup: leave the static content alone
    }
    const out = {};
    for (const k of VALUE_KEYS) out[k] = q(`[data-calc="${k}"]`);
    const error = q('[data-calc="error"]');
    const results = q('[data-calc="results"]');
    const gainRow = q('[data-calc="gain-row"]');
    const visual = q('[data-calc="visual"]');
    const barR = q('[data-calc="bar-reserved"]');
    const barP = q('[data-calc="bar-paged"]');
    const scaleMax = q('[data-calc="scale-max"]');
    const vText = q('[data-calc="visual-text"]');
    const rNote = q('[data-calc="reserved-note"]');
    const announce = q('[data-calc="announce"]');
    const rNoteDefault = rNote ? rNote.textContent : '';
    const describedBy = {};
    for (const f of FIELDS) describedBy[f] = inputs[f].getAttribute('aria-describedby') || '';

    let timer = 0;
    let lastAnnounce = '';

    const setText = (node, text) => {
      if (node && node.textContent !== text) node.textContent = text;
    };
    const setHidden = (node, hidden) => {
      if (node) node.hidden = hidden;
    };

    function markInvalid(field) {
      for (const f of FIELDS) {
        const bad = f === field;
        const input = inputs[f];
        if (bad) {
          input.setAttribute('aria-invalid', 'true');
          if (error && error.id) {
            input.setAttribute('aria-describedby', `${describedBy[f]} ${error.id}`.trim());
          }
        } else {
          input.removeAttribute('aria-invalid');
          if (describedBy[f]) input.setAttribute('aria-describedby', describedBy[f]);
          else input.removeAttribute('aria-describedby');
        }
      }
    }

    function update(opts) {
      const raw = {};
      for (const f of FIELDS) {
        // a type=number box holding non-numeric text reports value "" + badInput
        raw[f] = inputs[f].validity && inputs[f].validity.badInput ? 'NaN' : inputs[f].value;
      }
      const r = calculate(raw);
      clearTimeout(timer);

      if (!r.ok) {
        setText(error, r.message);
        markInvalid(r.field);
        for (const k of VALUE_KEYS) setText(out[k], '');
        setText(vText, '');
        if (barR) barR.replaceChildren();
        if (barP) barP.replaceChildren();
        setHidden(results, true);
        setHidden(gainRow, true);
        setHidden(visual, true);
        lastAnnounce = '';
        return;
      }

      setText(error, '');
      markInvalid(null);
      setHidden(results, false);
      setHidden(gainRow, false);
      setHidden(visual, false);

      setText(out['reserved-fit'], fmtInt(r.reservedFit));
      setText(out['reserved-ratio'], fmtOne(r.reservedRatio));
      setText(out['reserved-waste'], fmtPct(r.reservedWaste));
      setText(out['paged-blocks'], fmtInt(r.blocksPerRequest));
      setText(out['paged-fit'], fmtInt(r.pagedFit));
      setText(out['paged-waste'], fmtPct(r.pagedWaste));
      setText(out.gain, gainText(r));
      setText(rNote, r.reservedFit === 0
        ? '풀이 max-model-len보다 작아서 최대 길이 예약으로는 한 건도 들어가지 않습니다.'
        : rNoteDefault);

      if (barR) drawReserved(barR, r);
      if (barP) drawPaged(barP, r);
      setText(scaleMax, `${fmtTok(r.pool)}토큰`);
      setText(vText, visualText(r));

      if (announce && !(opts && opts.silent)) {
        const msg = `최대 길이 예약 ${fmtInt(r.reservedFit)}개, 블록 단위 ${fmtInt(r.pagedFit)}개, ${gainText(r)}.`;
        timer = setTimeout(() => {
          if (msg !== lastAnnounce) {
            announce.textContent = msg;
            lastAnnounce = msg;
          }
        }, ANNOUNCE_DELAY_MS);
      }
    }

    container.addEventListener('input', (e) => {
      if (e.target && e.target.matches && e.target.matches('[data-calc-input]')) update();
    });
    container.addEventListener('click', (e) => {
      const btn = e.target && e.target.closest ? e.target.closest('[data-calc-preset]') : null;
      if (!btn || !container.contains(btn)) return;
      inputs.pool.value = btn.getAttribute('data-calc-preset');
      update();
    });

    update({ silent: true });
  }

  function initCalculators(root) {
    const scope = root && typeof root.querySelectorAll === 'function' ? root : document;
    const found = [];
    if (typeof scope.matches === 'function' && scope.matches('[data-calculator]')) found.push(scope);
    scope.querySelectorAll('[data-calculator]').forEach((c) => found.push(c));
    found.forEach(init);
    return found.length;
  }

  initCalculators.calculate = calculate; // exposed for tests
  window.initCalculators = initCalculators;

  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', () => initCalculators(document));
  } else {
    initCalculators(document);
  }
  // htmx (if present) fires htmx:load for every piece of swapped-in content
  document.addEventListener('htmx:load', (e) => {
    initCalculators((e.detail && e.detail.elt) || e.target);
  });
})();
