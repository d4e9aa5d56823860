// attnkit serve: the playground page. Plain JavaScript, no library, no network beyond this server.
// Every UI string comes from i18n.json (zh and en); the page is Chinese unless ?lang=en.
// Stable hooks for tests: #text, #run, #lang; body[data-ready], [data-attn-count], [data-decode-count].
"use strict";

const S = { lang: "zh", strings: null, info: null, attn: null, sel: { layer: 0, head: 0 }, row: null, decode: null, step: 1 };
const $ = (id) => document.getElementById(id);
const LABEL_MARK = { "dead": "×", "uniform": "≈", "positional-previous": "←", "positional-next": "→", "positional-self": "•", "content": "" };
const KIND_ARGS = { dynamic: {}, static: { max_len: 256 }, sliding: { window: 16 } };
const LABELS_UP_TO = 48; // token labels on the enlarged head up to this many tokens

function t(key, params) {
  const table = S.strings[S.lang];
  let s = Object.prototype.hasOwnProperty.call(table, key) ? table[key] : key;
  for (const [k, v] of Object.entries(params || {})) s = s.split("{" + k + "}").join(String(v));
  return s;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

async function api(path, body) {
  const r = await fetch(path, body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || ("HTTP " + r.status));
  return data;
}

// ---------------------------------------------------------------------------------- language
function applyStrings() {
  document.documentElement.lang = S.lang === "zh" ? "zh-CN" : "en";
  for (const e of document.querySelectorAll("[data-i18n]")) e.textContent = t(e.dataset.i18n);
  for (const e of document.querySelectorAll("[data-i18n-title]")) e.title = t(e.dataset.i18nTitle);
  for (const e of document.querySelectorAll("[data-i18n-placeholder]")) e.placeholder = t(e.dataset.i18nPlaceholder);
  for (const a of document.querySelectorAll("a.lesson")) {
    a.href = "/lessons/" + S.lang + "/" + a.dataset.lesson;
    a.textContent = t("lesson") + " " + a.dataset.lesson.slice(0, 2);
    a.title = t("lesson_hint");
    a.target = "_blank";
    a.rel = "noopener";
  }
  fillKinds();
  renderAttention();
  renderDecode();
}

function switchLang() {
  S.lang = S.lang === "zh" ? "en" : "zh";
  const url = new URL(window.location.href);
  url.searchParams.set("lang", S.lang);
  history.replaceState(null, "", url.pathname + url.search + url.hash);
  applyStrings();
}

// ---------------------------------------------------------------------------------- attention
function maskChoice() { return document.querySelector("input[name=mask]:checked").value; }

async function runAttention() {
  const body = { text: $("text").value, mask: maskChoice(), layer: S.sel.layer, head: S.sel.head };
  if (body.mask === "window") body.window = Number($("window").value);
  const status = $("status");
  status.className = "";
  status.textContent = t("status_loading");
  $("run").disabled = true;
  try {
    S.attn = await api("/api/attention", body);
    S.row = null;
    if (!S.picked && S.attn.weights) pickClearHead();
    renderAttention();
    document.body.dataset.attnCount = String(Number(document.body.dataset.attnCount || 0) + 1);
  } catch (err) {
    status.className = "error";
    status.textContent = t("status_error", { msg: err.message });
    document.body.dataset.attnErrors = String(Number(document.body.dataset.attnErrors || 0) + 1);
  } finally {
    $("run").disabled = false;
  }
}

function pickClearHead() { // open on a head with a visible pattern (previous token) rather than head 0
  S.picked = true;
  for (let l = 0; l < S.attn.layers; l++) for (let h = 0; h < S.attn.heads; h++) {
    if (S.attn.heads_info[l][h].label === "positional-previous") { S.sel = { layer: l, head: h }; return; }
  }
}

function renderAttention() {
  const a = S.attn;
  if (!a) return;
  $("status").className = "";
  $("status").textContent = t("status_done", { n: a.n_tokens, ms: a.elapsed_ms });
  let note = a.removed === 0 ? t("mask_note_none") : t("mask_note_removed", { removed: a.removed, total: a.n_tokens * a.n_tokens });
  if (a.mask === "padding") note += " " + t("mask_note_padding", { pad: S.info.limits.pad_extra });
  $("mask-note").textContent = note;
  $("long-note").textContent = a.weights ? "" : t("long_note", { n: a.n_tokens, max: S.info.limits.full_weights_max, k: a.focus.topk_indices[0].length });
  renderGrid();
  renderFocus();
  renderDiag();
  renderRollout();
}

function heat(v) { // white → deep blue; the square root lifts small weights into view
  const s = Math.sqrt(Math.max(0, Math.min(1, v)));
  return [Math.round(255 - 224 * s), Math.round(255 - 192 * s), Math.round(255 - 102 * s)];
}

function renderGrid() {
  const a = S.attn, grid = $("grid"), T = a.thumbs.size;
  grid.replaceChildren(el("span"));
  for (let h = 0; h < a.heads; h++) grid.appendChild(el("span", "axis", t("head_short") + h));
  for (let l = 0; l < a.layers; l++) {
    grid.appendChild(el("span", "axis", t("layer_short") + l));
    for (let h = 0; h < a.heads; h++) {
      const cell = el("div", "cell");
      const c = el("canvas");
      c.width = T; c.height = T;
      const img = c.getContext("2d").createImageData(T, T);
      const vals = a.thumbs.values[l][h];
      for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {
        const [r, g, b] = heat(vals[i][j]), o = 4 * (i * T + j);
        img.data[o] = r; img.data[o + 1] = g; img.data[o + 2] = b; img.data[o + 3] = 255;
      }
      c.getContext("2d").putImageData(img, 0, 0);
      const info = a.heads_info[l][h];
      c.title = t("focus_title", { layer: l, head: h }) + " · " + t("label_" + info.label);
      c.dataset.layer = l; c.dataset.head = h;
      if (l === S.sel.layer && h === S.sel.head) c.classList.add("sel");
      c.addEventListener("click", () => selectHead(l, h));
      cell.appendChild(c);
      if (LABEL_MARK[info.label]) cell.appendChild(el("span", "tag", LABEL_MARK[info.label]));
      grid.appendChild(cell);
    }
  }
}

function selectHead(layer, head) {
  S.sel = { layer, head };
  S.row = null;
  if (S.attn && S.attn.weights) renderAttention();
  else runAttention(); // long input: the server sends the row summaries of the chosen head
}

function focusLayout(L) {
  const labels = L <= LABELS_UP_TO;
  const margin = labels ? 84 : 4, right = labels ? 48 : 4; // rotated column labels lean right
  const cell = Math.max(1, Math.floor((560 - margin - right) / L));
  return { labels, margin, cell, width: margin + cell * L + right, height: margin + cell * L + 4 };
}

function rowWeights(i) { // {j: w} of query i of the selected head: dense, or the top-k of a long input
  const a = S.attn, out = new Map();
  if (a.weights) {
    a.weights[S.sel.layer][S.sel.head][i].forEach((w, j) => out.set(j, w));
  } else {
    a.focus.topk_indices[i].forEach((j, r) => { if (j >= 0) out.set(j, a.focus.topk_weights[i][r]); });
  }
  return out;
}

function renderFocus() {
  const a = S.attn, L = a.n_tokens, lay = focusLayout(L), c = $("focus"), ctx = c.getContext("2d");
  $("focus-title").textContent = t("focus_title", { layer: S.sel.layer, head: S.sel.head });
  $("focus-hint").textContent = t("focus_hint", { k: S.info.limits.top_k || 5 });
  c.width = lay.width; c.height = lay.height;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, c.width, c.height);
  const m = lay.margin, z = lay.cell;
  for (let i = 0; i < L; i++) {
    const row = rowWeights(i), allowed = a.allowed[i];
    for (let j = 0; j < L; j++) {
      const x = m + j * z, y = m + i * z;
      if (allowed[j] === "0") {
        ctx.fillStyle = "#e3e6ec";
        ctx.fillRect(x, y, z, z);
        if (z >= 6) { ctx.strokeStyle = "#aab1bd"; ctx.beginPath(); ctx.moveTo(x, y + z); ctx.lineTo(x + z, y); ctx.stroke(); }
      } else if (row.has(j)) {
        const [r, g, b] = heat(row.get(j));
        ctx.fillStyle = `rgb(${r},${g},${b})`;
        ctx.fillRect(x, y, z, z);
      }
    }
  }
  if (lay.labels) drawLabels(ctx, a.tokens, m, z);
  if (S.row !== null) {
    ctx.strokeStyle = "#e8870e"; ctx.lineWidth = 2;
    ctx.strokeRect(m, m + S.row * z, z * L, z);
    ctx.lineWidth = 1;
  }
  renderRowDetail();
}

function drawLabels(ctx, tokens, m, z) {
  ctx.fillStyle = "#1d2430";
  ctx.font = Math.min(12, z + 1) + "px system-ui, 'Noto Sans CJK SC', sans-serif";
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  tokens.forEach((tok, i) => ctx.fillText(tok.slice(0, 11), m - 4, m + i * z + z / 2));
  ctx.textAlign = "left";
  tokens.forEach((tok, j) => {
    ctx.save();
    ctx.translate(m + j * z + z / 2, m - 4);
    ctx.rotate(-Math.PI / 3);
    ctx.fillText(tok.slice(0, 11), 0, 0);
    ctx.restore();
  });
}

function cellAt(ev) {
  const c = $("focus"), lay = focusLayout(S.attn.n_tokens), r = c.getBoundingClientRect();
  const x = (ev.clientX - r.left) * c.width / r.width, y = (ev.clientY - r.top) * c.height / r.height;
  const i = Math.floor((y - lay.margin) / lay.cell), j = Math.floor((x - lay.margin) / lay.cell);
  const L = S.attn.n_tokens;
  return i >= 0 && j >= 0 && i < L && j < L ? [i, j] : null;
}

function onFocusMove(ev) {
  if (!S.attn) return;
  const at = cellAt(ev), tok = S.attn.tokens;
  if (!at) { $("hover").textContent = ""; return; }
  const [i, j] = at, p = { i, j, qi: tok[i], kj: tok[j] };
  if (S.attn.allowed[i][j] === "0") { $("hover").textContent = t("hover_masked", p); return; }
  const w = rowWeights(i).get(j);
  $("hover").textContent = t("hover_cell", { ...p, w: w === undefined ? t("below_topk") : w.toFixed(4) });
}

function onFocusClick(ev) {
  if (!S.attn) return;
  const at = cellAt(ev);
  if (!at) return;
  S.row = at[0];
  renderFocus();
}

function renderRowDetail() {
  const box = $("row-detail"), a = S.attn;
  if (S.row === null) { box.replaceChildren(el("p", "hint", t("row_pick"))); return; }
  const i = S.row, row = [...rowWeights(i).entries()].filter(([, w]) => w > 0);
  if (row.length === 0) { box.replaceChildren(el("p", "hint", t("row_none"))); return; }
  row.sort((x, y) => y[1] - x[1]);
  const k = 5, top = row.slice(0, k);
  const ent = a.weights ? row.reduce((s, [, w]) => s - w * Math.log(w), 0) : a.focus.entropy[i];
  const table = el("table");
  for (const [j, w] of top) {
    const tr = el("tr");
    tr.appendChild(el("td", "", j + " " + a.tokens[j]));
    tr.appendChild(el("td", "", w.toFixed(4)));
    const td = el("td"), bar = el("span", "bar");
    bar.style.width = Math.round(120 * w) + "px";
    td.appendChild(bar); tr.appendChild(td);
    table.appendChild(tr);
  }
  box.replaceChildren(el("h3", "", t("row_title", { k, i, q: a.tokens[i], ent: ent.toFixed(3) })), table);
}

function renderDiag() {
  const a = S.attn, info = a.heads_info[S.sel.layer][S.sel.head];
  const rows = [["diag_label", t("label_" + info.label)], ["diag_entropy", info.entropy], ["diag_max", info.max_weight],
    ["diag_prev", info.previous_mass], ["diag_fixed", info.fixed_mass], ["diag_distance", info.distance]];
  const table = $("diag");
  table.replaceChildren();
  for (const [key, v] of rows) {
    const tr = el("tr");
    tr.appendChild(el("th", "", t(key)));
    tr.appendChild(el("td", "", v === null ? "—" : String(v)));
    table.appendChild(tr);
  }
  const counts = {};
  a.heads_info.flat().forEach((h) => { counts[h.label] = (counts[h.label] || 0) + 1; });
  const parts = Object.entries(counts).sort((x, y) => y[1] - x[1]).map(([l, n]) => t("label_" + l) + " " + n);
  $("diag-counts").textContent = t("diag_counts", { total: a.layers * a.heads, counts: parts.join(" · ") });
}

function renderRollout() {
  const a = S.attn, box = $("rollout"), peak = Math.max(...a.rollout, 1e-9);
  box.replaceChildren();
  a.tokens.forEach((tok, i) => {
    const chip = el("span", "chip", tok), s = a.rollout[i] / peak;
    chip.style.background = `rgba(47, 95, 208, ${(0.85 * s).toFixed(3)})`;
    chip.style.color = s > 0.55 ? "#fff" : "#1d2430";
    chip.title = a.rollout[i].toFixed(4);
    box.appendChild(chip);
  });
}

// ---------------------------------------------------------------------------------- decode
function fillKinds() {
  const sel = $("cache-kind"), kinds = S.info ? S.info.decode.kinds : [];
  const keep = sel.value;
  sel.replaceChildren();
  for (const k of kinds) {
    const o = el("option", "", S.strings[S.lang]["kind_" + k] ? t("kind_" + k) : k);
    o.value = k;
    sel.appendChild(o);
  }
  if (keep) sel.value = keep;
}

function onKind() {
  $("cache-args").value = JSON.stringify(KIND_ARGS[$("cache-kind").value] || {});
}

async function runDecode() {
  const status = $("decode-status");
  let args;
  try {
    args = JSON.parse($("cache-args").value || "{}");
    if (args === null || typeof args !== "object" || Array.isArray(args)) throw new Error("not an object");
  } catch (err) {
    status.className = "error";
    status.textContent = t("bad_args");
    return;
  }
  status.className = "";
  status.textContent = t("decode_loading");
  $("decode").disabled = true;
  try {
    S.decode = await api("/api/decode", { prompt: $("prompt").value, steps: Number($("steps").value),
      cache: { ...args, kind: $("cache-kind").value } });
    S.step = 1;
    $("step").max = String(Math.max(1, S.decode.steps.length));
    renderDecode();
    document.body.dataset.decodeCount = String(Number(document.body.dataset.decodeCount || 0) + 1);
  } catch (err) {
    status.className = "error";
    status.textContent = t("status_error", { msg: err.message });
  } finally {
    $("decode").disabled = false;
  }
}

function fmtBytes(n) { return n >= 1024 ? (n / 1024).toFixed(1) + " KiB" : n + " B"; }

function renderDecode() {
  const d = S.decode;
  if (!d) return;
  const n = d.steps.length, P = d.prompt_tokens;
  S.step = Math.max(1, Math.min(S.step, n));
  $("step").value = String(S.step);
  const m = d.model;
  let msg = t("decode_done", { n, ms: d.elapsed_ms, steps: m.steps, loss: m.final_loss, source: m.source });
  if (d.stopped) msg += " " + t("decode_stopped", { msg: d.stopped });
  if (d.unknown_chars.length) msg += " " + t("decode_unknown", { chars: d.unknown_chars.join(" ") });
  $("decode-status").className = d.stopped ? "error" : "";
  $("decode-status").textContent = msg;
  if (n === 0) return;
  const cur = d.steps[S.step - 1], kept = new Set(cur.kept_positions);
  $("step-label").textContent = t("step_label", { i: S.step, n });
  const box = $("decoded");
  box.replaceChildren();
  const chars = [...d.prompt].concat(d.steps.map((s) => s.token));
  chars.forEach((ch, p) => {
    const g = p - P; // index of the step that produced it, or negative for the prompt
    let cls = p < P ? "p" : g < S.step - 1 ? "g" : g === S.step - 1 ? "cur" : "future";
    if (p < P + S.step - 1 && !kept.has(p)) cls += " evicted";
    box.appendChild(el("span", cls, ch));
  });
  $("cache-now").textContent = t("cache_now", { i: S.step, kept: cur.kept_positions.length, seen: P + S.step - 1, bytes: fmtBytes(cur.nbytes) });
  $("cache-map-hint").textContent = t("cache_map_hint", { peak: fmtBytes(Math.max(...d.steps.map((s) => s.nbytes))) });
  drawCacheMap(d, P, n);
}

const BYTES_BAR = 64; // px to the right of the positions: each step's cache bytes as a bar

function drawCacheMap(d, P, n) {
  const c = $("cache-map"), cols = P + n - 1;
  const avail = Math.max(200, $("cache-scroll").clientWidth - 4 - BYTES_BAR - 6);
  const w = Math.max(2, Math.min(12, Math.floor(avail / cols))), h = Math.max(2, Math.min(8, Math.floor(320 / n)));
  const x0 = cols * w + 6, peak = Math.max(...d.steps.map((s) => s.nbytes), 1);
  c.width = x0 + BYTES_BAR; c.height = n * h;
  const ctx = c.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, c.width, c.height);
  d.steps.forEach((s, r) => {
    const kept = new Set(s.kept_positions);
    for (let p = 0; p < P + r; p++) {
      ctx.fillStyle = kept.has(p) ? "#2f5fd0" : "#dfe4ee";
      ctx.fillRect(p * w, r * h, Math.max(1, w - 1), Math.max(1, h - 1));
    }
    ctx.fillStyle = "#7a8aa8";
    ctx.fillRect(x0, r * h, Math.max(1, Math.round(BYTES_BAR * s.nbytes / peak)), Math.max(1, h - 1));
  });
  ctx.strokeStyle = "#e8870e"; ctx.lineWidth = 2;
  ctx.strokeRect(1, (S.step - 1) * h + 1, c.width - 2, Math.max(2, h - 1));
}

function goStep(delta) {
  if (!S.decode) return;
  S.step += delta;
  renderDecode();
}

// ---------------------------------------------------------------------------------- start
async function init() {
  const q = new URLSearchParams(window.location.search).get("lang");
  S.lang = q === "en" ? "en" : "zh";
  [S.strings, S.info] = await Promise.all([api("/assets/i18n.json"), api("/api/info")]);
  $("text").value = t("default_text");
  $("prompt").value = t("default_prompt");
  applyStrings();
  onKind();
  $("lang").addEventListener("click", switchLang);
  $("run").addEventListener("click", runAttention);
  for (const r of document.querySelectorAll("input[name=mask]")) r.addEventListener("change", runAttention);
  $("window").addEventListener("change", () => { // a half-typed width (empty, 0) waits for the next edit
    const w = Number($("window").value);
    if (maskChoice() === "window" && Number.isInteger(w) && w >= 1) runAttention();
  });
  $("focus").addEventListener("mousemove", onFocusMove);
  $("focus").addEventListener("click", onFocusClick);
  $("cache-kind").addEventListener("change", onKind);
  $("decode").addEventListener("click", runDecode);
  $("step").addEventListener("input", () => { S.step = Number($("step").value); renderDecode(); });
  $("step-prev").addEventListener("click", () => goStep(-1));
  $("step-next").addEventListener("click", () => goStep(1));
  await runAttention();
  document.body.dataset.ready = "1";
}

document.addEventListener("DOMContentLoaded", () => { init().catch((err) => { $("status").className = "error"; $("status").textContent = String(err); }); });
