/* attnkit attention viewer: inlined into the page by attnkit.inspect.viewer.render_html.
 *
 * Reads its data from the JSON element #ak-data (type application/json) and draws:
 * a head view (queries left, keys right, one line per weight), a matrix view (canvas),
 * optionally a patch-grid view, a time-series view and a diagnostics table.
 * User text (tokens, titles, table cells) is only ever set with textContent or drawn
 * with canvas fillText: never parsed as HTML.
 */
(function () {
  "use strict";

  var data = JSON.parse(document.getElementById("ak-data").textContent);
  // the page's words, in its language (attnkit/inspect/viewer_text.py): this script has none of its own
  var UI = JSON.parse(document.getElementById("ak-ui").textContent);
  var SCALE = Math.pow(10, data.decimals);
  var SVGNS = "http://www.w3.org/2000/svg";
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939",
                "#8c6d31", "#843c39", "#7b4173", "#3182bd"];
  var MIN_LINE = 0.001;   // lines below this weight are invisible anyway: skip them
  var MAX_LINES = 30000;  // keep the SVG responsive on long sequences
  var ROW = 22;           // px per token row; must match .ak-tok height in the CSS
  var LINES_W = 240;      // px between the two token columns

  var L = data.queries.length;
  var S = data.keys.length;
  var state = { layer: 0, head: 0, query: 0, step: L - 1, focus: null };

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  /* UI.script[key] with each {name} replaced by values[name] (viewer_text.fill's rule). */
  function say(key, values) {
    return UI.script[key].replace(/\{(\w+)\}/g, function (m, name) {
      return values && Object.prototype.hasOwnProperty.call(values, name) ? String(values[name]) : m;
    });
  }
  /* A diagnostics reason ("fixed_mass 0.61 < 0.8, ...") with its English phrases replaced (UI.phrases, longest first). */
  function rephrase(text) {
    Object.keys(UI.phrases).sort(function (a, b) { return b.length - a.length; }).forEach(function (p) {
      text = text.split(p).join(UI.phrases[p]);
    });
    return text;
  }
  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }
  function color(h) { return COLORS[h % COLORS.length]; }
  function rgba(hex, a) {
    var n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + a + ")";
  }
  function numHeads(layer) { return data.layers[layer].length; }
  // real layer index of entry l (capture(..., layers=[0, 5]) records entries 0, 1 = layers 0, 5)
  function layerId(l) { return data.layer_ids ? data.layer_ids[l] : l; }
  function heads() {
    if (state.head === "all") {
      var out = [];
      for (var h = 0; h < numHeads(state.layer); h++) { out.push(h); }
      return out;
    }
    return [state.head];
  }
  function weight(h, i, j) { return data.layers[state.layer][h][i][j] / SCALE; }
  /* (L, S) weights of the selection: one head, or the mean over heads for "all". */
  function matrix() {
    var hs = heads(), m = [];
    for (var i = 0; i < L; i++) {
      var row = new Array(S).fill(0);
      for (var k = 0; k < hs.length; k++) {
        var src = data.layers[state.layer][hs[k]][i];
        for (var j = 0; j < S; j++) { row[j] += src[j] / SCALE / hs.length; }
      }
      m.push(row);
    }
    return m;
  }
  function selectionName() {
    return say(state.head === "all" ? "selection_all" : "selection_head", { layer: layerId(state.layer), head: state.head });
  }
  function fmt(w) { return w.toFixed(Math.min(4, data.decimals)); }

  // ------------------------------------------------------------------ controls
  function fillSelect(select, options, value) {
    clear(select);
    options.forEach(function (o) {
      var opt = el("option", null, o[1]);
      opt.value = String(o[0]);
      select.appendChild(opt);
    });
    select.value = String(value);
  }
  function fillHeadSelect() {
    var n = numHeads(state.layer);
    if (state.head !== "all" && state.head >= n) { state.head = 0; }
    var opts = [["all", say("all_heads")]];
    for (var h = 0; h < n; h++) { opts.push([h, say("head_option", { head: h })]); }
    fillSelect($("ak-head"), opts, state.head);
  }
  function initControls() {
    var layers = [];
    for (var l = 0; l < data.layers.length; l++) { layers.push([l, say("layer_option", { layer: layerId(l) })]); }
    fillSelect($("ak-layer"), layers, state.layer);
    fillHeadSelect();
    $("ak-layer").addEventListener("change", function (ev) {
      state.layer = parseInt(ev.target.value, 10);
      fillHeadSelect();
      renderAll();
    });
    $("ak-head").addEventListener("change", function (ev) {
      state.head = ev.target.value === "all" ? "all" : parseInt(ev.target.value, 10);
      renderAll();
    });
  }

  // ----------------------------------------------------------------- head view
  function initHeadView() {
    var left = $("ak-left"), right = $("ak-right");
    data.queries.forEach(function (t, i) {
      var d = el("div", "ak-tok ak-q", t);
      d.setAttribute("data-i", i);
      d.title = t;
      d.addEventListener("mouseenter", function () { focus("i", i); });
      d.addEventListener("mouseleave", unfocus);
      left.appendChild(d);
    });
    data.keys.forEach(function (t, j) {
      var d = el("div", "ak-tok ak-k", t);
      d.setAttribute("data-j", j);
      d.title = t;
      d.addEventListener("mouseenter", function () { focus("j", j); });
      d.addEventListener("mouseleave", unfocus);
      right.appendChild(d);
    });
    var svg = $("ak-lines");
    svg.setAttribute("width", LINES_W);
    svg.setAttribute("height", Math.max(L, S) * ROW);
  }
  function renderHeadView() {
    var svg = $("ak-lines");
    clear(svg);
    var hs = heads(), cand = [], total = 0;
    hs.forEach(function (h) {
      for (var i = 0; i < L; i++) {
        for (var j = 0; j < S; j++) {
          var w = weight(h, i, j);
          if (w > 0) { total++; }
          if (w >= MIN_LINE) { cand.push([w, h, i, j]); }
        }
      }
    });
    if (cand.length > MAX_LINES) {
      cand.sort(function (a, b) { return b[0] - a[0]; });
      cand = cand.slice(0, MAX_LINES);
    }
    cand.forEach(function (c) {
      var line = document.createElementNS(SVGNS, "line");
      line.setAttribute("x1", 2);
      line.setAttribute("y1", c[2] * ROW + ROW / 2);
      line.setAttribute("x2", LINES_W - 2);
      line.setAttribute("y2", c[3] * ROW + ROW / 2);
      line.setAttribute("stroke", color(c[1]));
      line.setAttribute("stroke-width", 2);
      line.setAttribute("stroke-opacity", c[0].toFixed(4));
      line.setAttribute("data-h", c[1]);
      line.setAttribute("data-i", c[2]);
      line.setAttribute("data-j", c[3]);
      line.setAttribute("class", "ak-line");
      svg.appendChild(line);
    });
    var legend = $("ak-legend");
    clear(legend);
    hs.forEach(function (h) {
      var s = el("span");
      var sw = el("i");
      sw.style.background = color(h);
      s.appendChild(sw);
      s.appendChild(document.createTextNode(say("head_option", { head: h })));
      legend.appendChild(s);
    });
    $("ak-hv-note").textContent = say("lines_note", { shown: cand.length, total: total, min: MIN_LINE,
      cap: cand.length === MAX_LINES ? say("lines_cap", { max: MAX_LINES }) : "" });
    if (state.focus) { focus(state.focus[0], state.focus[1]); }
  }
  /* Highlight the lines of one query ("i") or one key ("j"); tint the other column by weight. */
  function focus(kind, idx) {
    state.focus = [kind, idx];
    var svg = $("ak-lines");
    svg.classList.add("ak-focus");
    var lines = svg.querySelectorAll("line");
    for (var n = 0; n < lines.length; n++) {
      var on = lines[n].getAttribute("data-" + kind) === String(idx);
      lines[n].classList.toggle("ak-hl", on);
    }
    var m = matrix();
    var hs = heads();
    var tint = hs.length === 1 ? color(hs[0]) : "#1f77b4";
    var mine = kind === "i" ? ".ak-q" : ".ak-k";
    var other = kind === "i" ? ".ak-k" : ".ak-q";
    document.querySelectorAll(".ak-tok" + mine).forEach(function (t, k) {
      t.classList.toggle("ak-active", k === idx);
    });
    document.querySelectorAll(".ak-tok" + other).forEach(function (t, k) {
      var w = kind === "i" ? m[idx][k] : m[k][idx];
      t.style.backgroundColor = rgba(tint, Math.min(1, w).toFixed(3));
      t.title = (kind === "i" ? data.keys[k] : data.queries[k]) + ": " + fmt(w);
    });
    var name = kind === "i" ? say("query_name", { i: idx, token: JSON.stringify(data.queries[idx]) })
                            : say("key_name", { j: idx, token: JSON.stringify(data.keys[idx]) });
    $("ak-status").textContent = say("status", { name: name, selection: selectionName() });
  }
  function unfocus() {
    state.focus = null;
    var svg = $("ak-lines");
    svg.classList.remove("ak-focus");
    svg.querySelectorAll("line.ak-hl").forEach(function (l) { l.classList.remove("ak-hl"); });
    document.querySelectorAll(".ak-tok").forEach(function (t) {
      t.classList.remove("ak-active");
      t.style.backgroundColor = "";
    });
    $("ak-status").textContent = "";
  }

  // --------------------------------------------------------------- matrix view
  function blues(t) {  // white -> dark blue
    var r = Math.round(255 - t * (255 - 8)), g = Math.round(255 - t * (255 - 48)),
        b = Math.round(255 - t * (255 - 107));
    return "rgb(" + r + "," + g + "," + b + ")";
  }
  function truncate(s, n) { return s.length > n ? s.slice(0, n - 1) + "\u2026" : s; }
  function canvasSize(canvas, w, h) {
    var dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    canvas.style.width = w + "px";
    canvas.style.height = h + "px";
    var ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return ctx;
  }
  var mx = { cs: 0, left: 0, top: 0, m: null };
  function renderMatrix() {
    var m = matrix(), vmax = 0;
    m.forEach(function (row) { row.forEach(function (w) { vmax = Math.max(vmax, w); }); });
    var cs = Math.max(3, Math.min(28, Math.floor(560 / Math.max(L, S))));
    var labels = cs >= 10;
    var left = labels ? 96 : 4, top = labels ? 96 : 4;
    var canvas = $("ak-matrix");
    var ctx = canvasSize(canvas, left + S * cs + 4, top + L * cs + 4);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, left + S * cs + 4, top + L * cs + 4);
    for (var i = 0; i < L; i++) {
      for (var j = 0; j < S; j++) {
        ctx.fillStyle = blues(vmax > 0 ? m[i][j] / vmax : 0);
        ctx.fillRect(left + j * cs, top + i * cs, cs, cs);
      }
    }
    if (labels) {
      ctx.fillStyle = "#1d2330";
      ctx.font = Math.min(12, cs - 1) + "px monospace";
      ctx.textBaseline = "middle";
      ctx.textAlign = "right";
      for (i = 0; i < L; i++) { ctx.fillText(truncate(data.queries[i], 12), left - 4, top + i * cs + cs / 2); }
      for (j = 0; j < S; j++) {
        ctx.save();
        ctx.translate(left + j * cs + cs / 2, top - 4);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "left";
        ctx.fillText(truncate(data.keys[j], 12), 0, 0);
        ctx.restore();
      }
    }
    mx = { cs: cs, left: left, top: top, m: m };
    $("ak-matrix-note").textContent = say("matrix_note", { selection: selectionName(), max: fmt(vmax) });
  }
  function initMatrix() {
    var canvas = $("ak-matrix");
    canvas.addEventListener("mousemove", function (ev) {
      var r = canvas.getBoundingClientRect();
      var j = Math.floor((ev.clientX - r.left - mx.left) / mx.cs);
      var i = Math.floor((ev.clientY - r.top - mx.top) / mx.cs);
      if (mx.m && i >= 0 && i < L && j >= 0 && j < S) {
        $("ak-matrix-info").textContent = say("matrix_info", { i: i, query: JSON.stringify(data.queries[i]), j: j,
          key: JSON.stringify(data.keys[j]), weight: fmt(mx.m[i][j]) });
      } else {
        $("ak-matrix-info").textContent = "";
      }
    });
  }

  // ---------------------------------------------------------------- patch view
  var patch = { img: null, cs: 0 };
  function hot(t) {  // black -> red -> yellow -> white
    var c = function (x) { return Math.round(255 * Math.max(0, Math.min(1, x))); };
    return [c(3 * t), c(3 * t - 1), c(3 * t - 2)];
  }
  function initPatch() {
    if (!data.patch) { return; }
    $("ak-patch-view").hidden = false;
    var opts = [];
    for (var i = 0; i < L; i++) { opts.push([i, i + ": " + data.queries[i]]); }
    state.query = L === S && L > data.patch.prefix ? data.patch.prefix : 0;
    fillSelect($("ak-patch-query"), opts, state.query);
    $("ak-patch-query").addEventListener("change", function (ev) {
      state.query = parseInt(ev.target.value, 10);
      renderPatch();
    });
    $("ak-patch").addEventListener("click", function (ev) {
      if (L !== S) { return; }  // queries are not the patches: nothing to pick
      var r = $("ak-patch").getBoundingClientRect();
      var c = Math.floor((ev.clientX - r.left) / patch.cs), row = Math.floor((ev.clientY - r.top) / patch.cs);
      var gw = data.patch.grid[1], gh = data.patch.grid[0];
      if (c < 0 || c >= gw || row < 0 || row >= gh) { return; }
      state.query = data.patch.prefix + row * gw + c;
      $("ak-patch-query").value = String(state.query);
      renderPatch();
    });
    if (data.patch.image) {
      var img = new Image();
      img.onload = function () { patch.img = img; renderPatch(); };
      img.src = data.patch.image;
    }
  }
  function renderPatch() {
    if (!data.patch) { return; }
    var gh = data.patch.grid[0], gw = data.patch.grid[1], prefix = data.patch.prefix;
    var row = matrix()[state.query];
    var cells = row.slice(prefix), vmax = 0, arg = 0, pre = 0;
    cells.forEach(function (w, k) { if (w > vmax) { vmax = w; arg = k; } });
    row.slice(0, prefix).forEach(function (w) { pre += w; });
    var cs = Math.max(6, Math.floor(360 / Math.max(gh, gw)));
    patch.cs = cs;
    var canvas = $("ak-patch");
    var ctx = canvasSize(canvas, gw * cs, gh * cs);
    ctx.clearRect(0, 0, gw * cs, gh * cs);
    if (patch.img) { ctx.drawImage(patch.img, 0, 0, gw * cs, gh * cs); }
    for (var r = 0; r < gh; r++) {
      for (var c = 0; c < gw; c++) {
        var t = vmax > 0 ? cells[r * gw + c] / vmax : 0;
        if (patch.img) {
          ctx.fillStyle = "rgba(0,0,0," + (0.85 * (1 - t)).toFixed(3) + ")";  // darken what gets little weight
        } else {
          var rgb = hot(t);
          ctx.fillStyle = "rgb(" + rgb[0] + "," + rgb[1] + "," + rgb[2] + ")";
        }
        ctx.fillRect(c * cs, r * cs, cs, cs);
      }
    }
    var q = state.query - prefix;
    if (L === S && q >= 0 && q < gh * gw) {
      ctx.strokeStyle = "#00e5ff";
      ctx.lineWidth = 2;
      ctx.strokeRect((q % gw) * cs + 1, Math.floor(q / gw) * cs + 1, cs - 2, cs - 2);
    }
    $("ak-patch-info").textContent = say("patch_info", { i: state.query, token: JSON.stringify(data.queries[state.query]),
      selection: selectionName(), row: Math.floor(arg / gw), col: arg % gw, weight: fmt(vmax) }) +
      (prefix ? say("patch_prefix", { count: prefix, weight: fmt(pre) }) : "") + say(L === S ? "patch_click" : "patch_end");
  }

  // --------------------------------------------------------------- series view
  var SW = 760, SH = 240, PAD = 20, PADL = 56;  // PADL leaves room for the y labels
  function initSeries() {
    if (!data.series) { return; }
    $("ak-series-view").hidden = false;
    var slider = $("ak-step");
    slider.min = 0;
    slider.max = L - 1;
    slider.value = state.step;
    slider.addEventListener("input", function (ev) {
      state.step = parseInt(ev.target.value, 10);
      renderSeries();
    });
    var svg = $("ak-series");
    svg.setAttribute("width", SW);
    svg.setAttribute("height", SH);
    svg.setAttribute("viewBox", "0 0 " + SW + " " + SH);
  }
  function renderSeries() {
    if (!data.series) { return; }
    var v = data.series.values, svg = $("ak-series");
    clear(svg);
    var lo = Infinity, hi = -Infinity;
    v.forEach(function (y) { if (y !== null) { lo = Math.min(lo, y); hi = Math.max(hi, y); } });
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    if (hi === lo) { hi = lo + 1; }
    var dx = (SW - PADL - PAD) / Math.max(S, 1);
    var x = function (j) { return PADL + (j + 0.5) * dx; };  // step j is the centre of its band
    var y = function (val) { return SH - PAD - (val - lo) / (hi - lo) * (SH - 2 * PAD); };
    var row = matrix()[state.step], vmax = 0, arg = 0;
    row.forEach(function (w, j) { if (w > vmax) { vmax = w; arg = j; } });
    var shades = document.createElementNS(SVGNS, "g");
    row.forEach(function (w, j) {
      if (w <= 0 || vmax <= 0) { return; }
      var r = document.createElementNS(SVGNS, "rect");
      r.setAttribute("x", (x(j) - dx / 2).toFixed(2));
      r.setAttribute("y", PAD);
      r.setAttribute("width", Math.max(dx, 1).toFixed(2));
      r.setAttribute("height", SH - 2 * PAD);
      r.setAttribute("fill", "#ff7f0e");
      r.setAttribute("fill-opacity", (0.85 * w / vmax).toFixed(3));
      r.setAttribute("class", "ak-shade");
      r.setAttribute("data-j", j);
      var tip = document.createElementNS(SVGNS, "title");
      tip.textContent = say("step_tip", { j: j, weight: fmt(w) });
      r.appendChild(tip);
      shades.appendChild(r);
    });
    svg.appendChild(shades);
    var axis = document.createElementNS(SVGNS, "path");
    axis.setAttribute("d", "M" + PADL + " " + PAD + " V" + (SH - PAD) + " H" + (SW - PAD));
    axis.setAttribute("stroke", "#98a2b3");
    axis.setAttribute("fill", "none");
    svg.appendChild(axis);
    var d = "", pen = false;
    v.forEach(function (val, j) {
      if (val === null) { pen = false; return; }
      d += (pen ? " L" : " M") + x(j).toFixed(2) + " " + y(val).toFixed(2);
      pen = true;
    });
    var path = document.createElementNS(SVGNS, "path");
    path.setAttribute("d", d.trim());
    path.setAttribute("stroke", "#1d2330");
    path.setAttribute("stroke-width", 1.5);
    path.setAttribute("fill", "none");
    path.setAttribute("class", "ak-series-line");
    svg.appendChild(path);
    if (L === S) {
      var mark = document.createElementNS(SVGNS, "line");
      mark.setAttribute("x1", x(state.step));
      mark.setAttribute("x2", x(state.step));
      mark.setAttribute("y1", PAD - 6);
      mark.setAttribute("y2", SH - PAD);
      mark.setAttribute("stroke", "#d62728");
      mark.setAttribute("stroke-width", 2);
      svg.appendChild(mark);
    }
    [[lo, SH - PAD], [hi, PAD]].forEach(function (p) {
      var t = document.createElementNS(SVGNS, "text");
      t.setAttribute("x", PADL - 4);
      t.setAttribute("y", p[1] + 3);
      t.setAttribute("text-anchor", "end");
      t.setAttribute("font-size", 10);
      t.textContent = Number(p[0].toPrecision(3)).toString();
      svg.appendChild(t);
    });
    $("ak-step-label").textContent = say("step_label", { step: state.step, token: JSON.stringify(data.queries[state.step]) });
    $("ak-series-info").textContent = say("series_info", { name: data.series.name, selection: selectionName(),
      step: state.step, arg: arg, weight: fmt(vmax) });
  }

  // --------------------------------------------------------- diagnostics table
  function initDiagnostics() {
    if (!data.diagnostics) { return; }
    $("ak-diag-view").hidden = false;
    var cols = data.diagnostics.columns, table = $("ak-diag");
    var li = cols.indexOf("layer"), hi = cols.indexOf("head"), lab = cols.indexOf("label"), why = cols.indexOf("reason");
    var thead = el("thead"), tr = el("tr");
    cols.forEach(function (c) { tr.appendChild(el("th", null, UI.columns[c] || c)); });
    thead.appendChild(tr);
    table.appendChild(thead);
    var body = el("tbody");
    data.diagnostics.rows.forEach(function (r) {
      var row = el("tr");
      r.forEach(function (v, k) {
        var text = v === null ? "\u2014" : (typeof v === "number" && !Number.isInteger(v) ? v.toFixed(3) : String(v));
        if (k === lab && UI.labels[text]) { text = UI.labels[text]; }  // a head label, in the page's language
        if (k === why) { text = rephrase(text); }
        row.appendChild(el("td", typeof v === "number" ? null : "ak-text", text));
      });
      if (li >= 0 && hi >= 0) {
        row.addEventListener("click", function () {
          var layer = data.layer_ids ? data.layer_ids.indexOf(r[li]) : r[li], head = r[hi];
          if (layer < 0 || layer >= data.layers.length || head < 0 || head >= numHeads(layer)) { return; }
          state.layer = layer;
          state.head = head;
          $("ak-layer").value = String(layer);
          fillHeadSelect();
          renderAll();
        });
      }
      body.appendChild(row);
    });
    table.appendChild(body);
  }
  function markDiagnostics() {
    if (!data.diagnostics) { return; }
    var cols = data.diagnostics.columns, li = cols.indexOf("layer"), hi = cols.indexOf("head");
    if (li < 0 || hi < 0) { return; }
    var rows = $("ak-diag").querySelectorAll("tbody tr");
    data.diagnostics.rows.forEach(function (r, k) {
      rows[k].classList.toggle("ak-selected", r[li] === layerId(state.layer) && r[hi] === state.head);
    });
  }

  function renderAll() {
    renderHeadView();
    renderMatrix();
    renderPatch();
    renderSeries();
    markDiagnostics();
  }

  $("ak-title").textContent = data.title;
  $("ak-sub").textContent = say("subtitle", { layers: data.layers.length, queries: L, keys: S });
  initControls();
  initHeadView();
  initMatrix();
  initPatch();
  initSeries();
  initDiagnostics();
  renderAll();
  document.body.setAttribute("data-ak-ready", "1");
})();
