/* MegaScope page: talks to the scope server over one WebSocket (/ws) and draws what the model
 * computes with Plotly. The message shapes are those of mapp/scope/protocol.py (its docstring).
 *
 * Rules this file keeps:
 *  - nothing the server sends is evaluated or inserted as HTML: DOM text goes through
 *    textContent, and strings handed to Plotly (whose labels understand a few HTML tags) are
 *    entity-escaped first (plotlyText);
 *  - no request leaves the page's own host: Plotly comes from /assets/plotly.min.js;
 *  - hooks for tests: every chart container (#heatmap, #overview, #attention, #topk, #pca) gets
 *    data-drawn="1" once drawn with data (removed when it is emptied), #status has data-state
 *    (connecting, connected, running, error, disconnected), body has data-runs (runs finished)
 *    and data-errors (script errors, if any).
 */
(function () {
  "use strict";

  // -- script errors are shown and recorded, so a headless test can see them -----------------
  const scriptErrors = [];
  function scriptError(message) {
    scriptErrors.push(String(message));
    document.body.dataset.errors = scriptErrors.join(" | ");
  }
  window.addEventListener("error", (e) => scriptError(e.message));
  window.addEventListener("unhandledrejection", (e) => scriptError(e.reason));

  const $ = (id) => document.getElementById(id);

  // Mirrors of protocol.py's limits, used only when the model frame does not carry them: the
  // server checks every message anyway, these just keep the form from sending what it refuses.
  const FALLBACK_LIMITS = { prompts: 8, prompt_chars: 2000, max_new_tokens: 256, bins: 256, top_k: 50 };
  const CHARTS = ["heatmap", "overview", "attention", "topk", "pca"];
  const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  const FONT = { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 11, color: "#1d2430" };
  const PROMPT_COLORS = ["#2f6db3", "#d1603d", "#2e8b57", "#8e44ad", "#c0392b", "#16a0a0", "#b8860b", "#5b6472"];

  // -- state ----------------------------------------------------------------------------------
  let model = null;       // the last `model` frame
  let socket = null;
  let connected = false;
  let retries = 0;        // consecutive failed connections, for the back-off
  let pending = false;    // a generate was sent and its run has not finished
  let runsDone = 0;
  let run = null;         // what the current run (or training snapshot) has shown so far
  let selectedStep = 0;   // the step whose top-k is shown
  let followSteps = true; // the top-k follows the newest step until the user picks one
  let awaitingStart = false; // a generate was sent and no `start` has answered it yet

  /* A run as the page keeps it. Rows are stored by position so steps can arrive with gaps (a slow
   * client misses steps; `done` then brings every row again). */
  function newRun(id, promptTokens, reducer, bins) {
    return {
      id: id,
      reducer: reducer,
      bins: bins,
      tokens: promptTokens.map((t) => t.slice()),   // per prompt: token texts, prompt then generated
      promptLen: promptTokens.map((t) => t.length),
      rows: new Map(),    // layer number -> kind -> per prompt -> position -> [bins values]
      steps: [],          // step -> {topk, clean, kl, ids}
      lastStep: -1,
      done: false,
      dropped: 0,
      iteration: null,
      attention: new Map(), // "layer/head/prompt" -> attention frame, so going back is instant
      pca: new Map(),       // layer -> pca frame
    };
  }

  // -- small helpers --------------------------------------------------------------------------
  function option(select, value, text) {
    const o = document.createElement("option");
    o.value = String(value);
    o.textContent = text === undefined ? String(value) : text;
    select.appendChild(o);
  }

  /* Refill a <select>, keeping the user's choice when it is still offered. */
  function fillSelect(select, items, fallback) {
    const before = select.value;
    select.textContent = "";
    items.forEach((item) => (Array.isArray(item) ? option(select, item[0], item[1]) : option(select, item)));
    const values = Array.from(select.options, (o) => o.value);
    if (values.includes(before)) select.value = before;
    else if (fallback !== undefined && values.includes(String(fallback))) select.value = String(fallback);
  }

  function range(from, to) {
    const out = [];
    for (let i = from; i <= to; i++) out.push(i);
    return out;
  }

  function intValue(id) { return parseInt($(id).value, 10); }

  function limits() { return Object.assign({}, FALLBACK_LIMITS, (model && model.limits) || {}); }

  /* Plotly reads a few HTML tags and entities in labels and hover text: escape them so a token
   * such as "<br>" is shown as written. */
  function plotlyText(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  /* A token as a chart label: whitespace made visible where it would otherwise vanish. */
  function tokenLabel(t) {
    if (t === null || t === undefined) return "…";
    let s = String(t).replace(/\r/g, "").replace(/\n/g, "⏎").replace(/\t/g, "⇥");
    if (s.trim() === "") s = s.replace(/ /g, "␣") || "∅";
    return plotlyText(s);
  }

  /* Tick values and labels for a token axis; long sequences keep every n-th label so they stay
   * readable (hover still names every token). */
  function tokenTicks(labels) {
    const every = Math.max(1, Math.ceil(labels.length / 48));
    const vals = [], text = [];
    for (let i = 0; i < labels.length; i += every) { vals.push(i); text.push(labels[i]); }
    return { tickmode: "array", tickvals: vals, ticktext: text, automargin: true };
  }

  function baseLayout(extra) {
    return Object.assign({
      font: FONT,
      margin: { l: 60, r: 10, t: 24, b: 40 },
      paper_bgcolor: "#fff",
      plot_bgcolor: "#fff",
      uirevision: "keep",   // zoom survives redraws within a view
    }, extra);
  }

  /* Draw (or redraw in place) a chart; an empty one shows why instead. data-drawn marks a
   * container drawn with data. */
  function draw(id, traces, layout) {
    const el = $(id);
    el.querySelectorAll(":scope > .empty").forEach((n) => n.remove());
    Plotly.react(el, traces, layout, PLOT_CONFIG);
    el.dataset.drawn = "1";
  }

  function empty(id, message) {
    const el = $(id);
    if (el.data !== undefined) Plotly.purge(el);
    el.textContent = "";
    delete el.dataset.drawn;
    const note = document.createElement("div");
    note.className = "empty";
    note.textContent = message;
    el.appendChild(note);
  }

  // -- status line ------------------------------------------------------------------------------
  function setStatus(state, text) {
    const el = $("status");
    el.dataset.state = state;
    el.textContent = text;
    el.title = text;
  }

  function idleStatus() {
    if (!connected) return;
    if (pending && run) {
      const total = run.maxNew ? " / " + run.maxNew : "";
      setStatus("running", "generating: step " + (run.lastStep + 1) + total);
    } else if (pending) {
      setStatus("running", "generating…");
    } else {
      setStatus("connected", "connected" + (model && model.mode === "training" ? " (training)" : ""));
    }
  }

  // -- connection ---------------------------------------------------------------------------------
  function socketUrl() {
    const token = new URLSearchParams(window.location.search).get("token");
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    return scheme + "//" + window.location.host + "/ws" + (token ? "?token=" + encodeURIComponent(token) : "");
  }

  function connect() {
    setStatus("connecting", "connecting…");
    const ws = new WebSocket(socketUrl());
    socket = ws;
    ws.onopen = () => {
      connected = true;
      retries = 0;
      idleStatus();
    };
    ws.onmessage = (event) => {
      let message;
      try {
        message = JSON.parse(event.data);   // JSON only: nothing from the server is evaluated
      } catch (e) {
        setStatus("error", "unreadable frame from the server");
        return;
      }
      handle(message);
    };
    ws.onclose = () => {
      if (socket !== ws) return;
      connected = false;
      pending = false;
      awaitingStart = false;
      updateButtons();
      // back off 0.5 s, 1 s, 2 s ... up to 10 s so a stopped server is not hammered
      const delay = Math.min(10000, 500 * Math.pow(2, retries++));
      setStatus("disconnected", "disconnected: retrying in " + Math.round(delay / 1000 * 10) / 10 + " s");
      setTimeout(connect, delay);
    };
    // onerror is always followed by onclose, which does the reporting
  }

  function send(message) {
    if (!connected || socket.readyState !== WebSocket.OPEN) {
      setStatus("error", "not connected: nothing sent");
      return false;
    }
    socket.send(JSON.stringify(message));
    return true;
  }

  // -- incoming frames ------------------------------------------------------------------------
  const handlers = {
    model: onModel,
    start: onStart,
    step: onStep,
    done: onDone,
    snapshot: onSnapshot,
    attention: onAttention,
    pca: onPca,
    perturbations: (m) => showPerturbations(m.active),
    error: onError,
  };

  function handle(message) {
    const fn = message && handlers[message.type];
    if (fn) fn(message);
    // an unknown frame type is ignored: a newer server may send more than this page knows
  }

  function onModel(m) {
    const first = model === null;
    model = m;
    const info = [m.layers + " layers", m.heads + " heads"];
    if (m.query_groups && m.query_groups !== m.heads) info.push(m.query_groups + " query groups");
    info.push("hidden " + m.hidden, "ffn " + m.ffn, "vocab " + m.vocab);
    if (m.tp > 1 || m.pp > 1) info.push("TP " + m.tp + " × PP " + m.pp);
    $("model-info").textContent = info.join(" · ");

    const training = m.mode === "training";
    $("generate-panel").hidden = training;
    $("iteration").hidden = !training;

    const layers = range(1, m.layers);
    fillSelect($("reducer"), m.reducers || [], (m.defaults || {}).reducer);
    fillSelect($("kind"), m.kinds || [], "residual");
    fillSelect($("layer"), layers, 1);
    fillSelect($("att-layer"), layers, 1);
    fillSelect($("att-head"), range(0, Math.max(0, m.heads - 1)), 0);
    fillSelect($("pca-layer"), [[0, "0 (embeddings)"]].concat(layers.map((l) => [l, String(l)])), m.layers);
    fillSelect($("pert-target"), Object.keys(m.perturbations || {}));
    fillPerturbKinds();
    fillSelect($("pert-layer"), [["all", "all"]].concat(layers.map((l) => [l, String(l)])), "all");

    const lim = limits();
    $("max-new-tokens").max = lim.max_new_tokens;
    $("bins").max = lim.bins;
    $("top-k").max = lim.top_k;
    if (first && m.defaults) {
      // defaults only on the first connection: a reconnect keeps what the user typed
      if (m.defaults.max_new_tokens) $("max-new-tokens").value = m.defaults.max_new_tokens;
      if (m.defaults.bins) $("bins").value = m.defaults.bins;
      if (m.defaults.top_k) $("top-k").value = m.defaults.top_k;
    }
    updateButtons();
    idleStatus();
  }

  function onStart(m) {
    // every viewer sees every run; the frame's own settings win, then what this page sent
    const sent = Object.assign({}, awaitingStart ? lastGenerate : {}, m);
    run = newRun(m.id, m.prompts || [], sent.reducer || $("reducer").value, sent.bins || intValue("bins"));
    run.maxNew = sent.max_new_tokens;
    pending = true;
    awaitingStart = false;
    selectedStep = 0;
    followSteps = true;
    fillPromptSelect((m.prompts || []).map((toks) => toks.join("")));
    showPerturbations(m.perturbations);
    // the views of the previous run go; they come back as this run's steps arrive
    CHARTS.forEach((id) => empty(id, "waiting for the first step…"));
    $("kl").textContent = "";
    updateButtons();
    idleStatus();
    schedule();
  }

  function onStep(m) {
    if (!run || m.id !== run.id) return;   // a late frame of an earlier run
    (m.tokens || []).forEach((t, p) => {
      // token of step s sits right after the prompt; a missed step leaves a hole that `done` fills
      if (t !== null && t !== undefined && run.tokens[p]) run.tokens[p][run.promptLen[p] + m.step] = t;
    });
    storeRows(m.layers, m.rows_from || []);
    run.steps[m.step] = { topk: m.topk, clean: m.clean_topk, kl: m.kl, ids: m.token_ids };
    run.lastStep = Math.max(run.lastStep, m.step);
    if (followSteps) selectedStep = run.lastStep;
    idleStatus();
    schedule();
  }

  function onDone(m) {
    if (!run || m.id !== run.id) return;
    finish(m);
    pending = false;
    updateButtons();
    idleStatus();
  }

  /* A training snapshot: the probe prompts' rows as of one iteration, shown with the same views. */
  function onSnapshot(m) {
    const tokens = m.tokens || [];
    const keep = run && run.tokens.length === tokens.length;
    // the training job picks the reducer; a snapshot that names it is believed over the form
    run = newRun(m.id !== undefined ? m.id : "it" + m.iteration, tokens, m.reducer || $("reducer").value || "rms", m.bins || null);
    run.iteration = m.iteration;
    if (m.topk) run.steps[0] = { topk: m.topk, clean: m.clean_topk, kl: m.kl, ids: m.token_ids };
    run.lastStep = m.topk ? 0 : -1;
    selectedStep = Math.max(0, run.lastStep);
    $("iteration").textContent = "iteration " + m.iteration;
    if (!keep) fillPromptSelect(tokens.map((toks) => toks.join("")));
    finish(m);
  }

  /* `done` and `snapshot` carry every row and the final token texts. */
  function finish(m) {
    if (m.tokens) run.tokens = m.tokens.map((t) => t.slice());
    run.text = m.text;
    run.rows = new Map();
    storeRows(m.layers, []);
    run.done = true;
    run.dropped = m.dropped || 0;
    runsDone += 1;
    document.body.dataset.runs = String(runsDone);
    schedule();
    requestAttention();
    requestPca();
  }

  function storeRows(layers, rowsFrom) {
    (layers || []).forEach((entry) => {
      let kinds = run.rows.get(entry.layer);
      if (!kinds) { kinds = new Map(); run.rows.set(entry.layer, kinds); }
      Object.keys(entry).forEach((kind) => {
        if (kind === "layer" || !Array.isArray(entry[kind])) return;
        let prompts = kinds.get(kind);
        if (!prompts) { prompts = []; kinds.set(kind, prompts); }
        entry[kind].forEach((rows, p) => {
          if (!rows) return;
          const into = prompts[p] || (prompts[p] = []);
          const from = rowsFrom[p] || 0;
          rows.forEach((row, i) => { into[from + i] = row; });
        });
      });
    });
  }

  function onAttention(m) {
    if (!run) return;
    run.attention.set(m.layer + "/" + m.head + "/" + m.prompt, m);
    drawAttention();
  }

  function onPca(m) {
    if (!run) return;
    run.pca.set(m.layer, m);
    drawPca();
  }

  function onError(m) {
    // a refused generate (no `start` came for it) must not leave the button disabled
    if (awaitingStart) { awaitingStart = false; pending = false; }
    updateButtons();
    setStatus("error", "error: " + m.message);
  }

  // -- outgoing requests ------------------------------------------------------------------------
  let lastGenerate = null;

  function generate() {
    const lim = limits();
    const prompts = $("prompts").value.split("\n").map((l) => l.replace(/\r$/, "")).filter((l) => l.trim() !== "");
    if (!prompts.length) { setStatus("error", "type at least one prompt (one per line)"); return; }
    if (prompts.length > lim.prompts) { setStatus("error", "at most " + lim.prompts + " prompts"); return; }
    if (prompts.some((p) => p.length > lim.prompt_chars)) {
      setStatus("error", "a prompt is longer than " + lim.prompt_chars + " characters");
      return;
    }
    const message = {
      type: "generate",
      prompts: prompts,
      max_new_tokens: intValue("max-new-tokens"),
      reducer: $("reducer").value,
      bins: intValue("bins"),
      top_k: intValue("top-k"),
    };
    for (const key of ["max_new_tokens", "bins", "top_k"]) {
      if (!Number.isInteger(message[key]) || message[key] < 1) {
        setStatus("error", key.replace(/_/g, " ") + " must be a positive integer");
        return;
      }
    }
    if (send(message)) {
      lastGenerate = message;
      pending = true;
      awaitingStart = true;
      updateButtons();
      idleStatus();
    }
  }

  function applyPerturbation() {
    const layer = $("pert-layer").value;
    const strength = parseFloat($("pert-strength").value);
    const seed = intValue("pert-seed");
    if (!Number.isFinite(strength) || strength < 0) { setStatus("error", "strength must be a number ≥ 0"); return; }
    send({
      type: "perturb",
      target: $("pert-target").value,
      kind: $("pert-kind").value,
      strength: strength,
      layer: layer === "all" ? null : parseInt(layer, 10),
      seed: Number.isInteger(seed) && seed >= 0 ? seed : 0,
    });
  }

  /* Ask for the attention matrix of the selection unless the run has it already. Only after a
   * run is complete: the server answers from the last forward pass. */
  function requestAttention() {
    if (!run || !run.done) return;
    const key = selectedAttention();
    if (run.attention.has(key.join("/"))) { drawAttention(); return; }
    // the previous matrix stays until the answer replaces it (no flicker on every snapshot)
    if (!$("attention").dataset.drawn) empty("attention", "loading…");
    send({ type: "attention", layer: key[0], head: key[1], prompt: key[2] });
  }

  function requestPca() {
    if (!run || !run.done) return;
    const layer = intValue("pca-layer");
    if (run.pca.has(layer)) { drawPca(); return; }
    if (!$("pca").dataset.drawn) empty("pca", "loading…");
    send({ type: "pca", layer: layer });
  }

  function selectedAttention() { return [intValue("att-layer"), intValue("att-head"), selectedPrompt()]; }

  function selectedPrompt() { return Math.max(0, intValue("prompt") || 0); }

  // -- controls -----------------------------------------------------------------------------------
  function updateButtons() {
    const ready = connected && model !== null;
    $("generate").disabled = !ready || pending || model.mode === "training";
    $("apply").disabled = !ready;
    $("clear").disabled = !ready;
  }

  function fillPerturbKinds() {
    const kinds = (model && model.perturbations && model.perturbations[$("pert-target").value]) || [];
    fillSelect($("pert-kind"), kinds);
  }

  function fillPromptSelect(texts) {
    const items = texts.map((t, i) => {
      const short = t.length > 40 ? t.slice(0, 39) + "…" : t;
      return [i, i + ": " + short.replace(/\s+/g, " ")];
    });
    fillSelect($("prompt"), items, 0);
  }

  function showPerturbations(active) {
    const list = $("active");
    list.textContent = "";
    if (!active || !active.length) {
      const li = document.createElement("li");
      li.className = "muted";
      li.textContent = "none";
      list.appendChild(li);
      return;
    }
    active.forEach((p) => {
      const li = document.createElement("li");
      if (p && typeof p === "object" && p.target !== undefined) {
        li.textContent = p.target + " · " + p.kind + " · layer " + (p.layer === null || p.layer === undefined ? "all" : p.layer)
          + " · strength " + p.strength + (p.seed !== undefined ? " · seed " + p.seed : "");
      } else {
        li.textContent = JSON.stringify(p);
      }
      list.appendChild(li);
    });
  }

  // -- drawing ----------------------------------------------------------------------------------
  /* Steps can come faster than the browser paints: redraws are coalesced to one per frame. */
  let scheduled = false;
  function schedule() {
    if (scheduled) return;
    scheduled = true;
    window.requestAnimationFrame(() => {
      scheduled = false;
      renderAll();
    });
  }

  function renderAll() {
    if (!run) return;
    drawText();
    drawHeatmap();
    drawOverview();
    drawTopk();
  }

  function drawText() {
    const out = $("output");
    out.textContent = "";
    const chosen = selectedPrompt();
    run.tokens.forEach((tokens, p) => {
      const line = document.createElement("div");
      line.className = "line" + (p === chosen ? " chosen" : "");
      line.dataset.prompt = String(p);
      const idx = document.createElement("span");
      idx.className = "idx";
      idx.textContent = String(p);
      line.appendChild(idx);
      const promptLen = run.iteration === null ? run.promptLen[p] : tokens.length;
      const head = document.createElement("span");
      head.className = "prompt-tok";
      head.textContent = tokens.slice(0, promptLen).join("");
      line.appendChild(head);
      for (let i = promptLen; i < tokens.length; i++) {
        const span = document.createElement("span");
        const step = i - promptLen;
        span.className = "gen-tok" + (p === chosen && step === selectedStep ? " selected" : "");
        span.dataset.step = String(step);
        // a generated line break is shown (and clickable) as ⏎ before the break itself
        span.textContent = tokens[i] === undefined ? "…" : tokens[i].replace(/\n/g, "⏎\n");
        line.appendChild(span);
      }
      out.appendChild(line);
    });
    const info = [];
    if (run.iteration !== null) info.push("iteration " + run.iteration);
    else if (!run.done) info.push("generating…");
    if (run.dropped) info.push(run.dropped + " steps dropped (slow connection)");
    $("run-info").textContent = info.length ? "(" + info.join(", ") + ")" : "";
  }

  /* The rows (positions) of one prompt, kind and layer; missed positions are null. */
  function rowsOf(layer, kind, p) {
    const kinds = run.rows.get(layer);
    const prompts = kinds && kinds.get(kind);
    return (prompts && prompts[p]) || [];
  }

  function colorsFor(reducer) {
    // the mean of a slice is signed: a diverging scale centred on 0; the others are magnitudes
    return reducer === "mean" ? { colorscale: "RdBu", reversescale: true, zmid: 0 } : { colorscale: "Viridis" };
  }

  function drawHeatmap() {
    const p = selectedPrompt(), kind = $("kind").value, layer = intValue("layer");
    const rows = rowsOf(layer, kind, p);
    if (!rows.length) { empty("heatmap", run.done ? "no " + kind + " rows for layer " + layer : "waiting for rows…"); return; }
    const bins = rows.reduce((n, r) => Math.max(n, r ? r.length : 0), 0);
    const labels = run.tokens[p] ? run.tokens[p].map(tokenLabel) : [];
    const z = [], text = [];
    for (let i = 0; i < rows.length; i++) {
      z.push(rows[i] || new Array(bins).fill(null));
      text.push(new Array(bins).fill(labels[i] === undefined ? "…" : labels[i]));
    }
    const ys = labels.slice(0, rows.length);
    draw("heatmap", [Object.assign({
      type: "heatmap",
      z: z,
      x: range(0, bins - 1),
      y: range(0, rows.length - 1),
      text: text,
      hovertemplate: "token %{y}: %{text}<br>bin %{x}<br>" + run.reducer + " %{z:.4g}<extra></extra>",
      colorbar: { thickness: 10, len: 0.9 },
    }, colorsFor(run.reducer))], baseLayout({
      title: { text: plotlyText(kind + " · layer " + layer + " · prompt " + p + " · " + run.reducer), font: { size: 12 }, x: 0.01 },
      xaxis: { title: { text: "bin" }, dtick: bins > 32 ? undefined : 1 },
      yaxis: Object.assign({ autorange: "reversed" }, tokenTicks(ys)),
      shapes: promptEdge(p, rows.length, "y"),
      uirevision: "heatmap " + kind + layer + p,
    }));
  }

  /* A dotted line where the prompt ends and generation begins, along a token axis. */
  function promptEdge(p, n, axis) {
    const at = run.iteration === null ? run.promptLen[p] : n;
    if (!(at > 0 && at < n)) return [];
    const edge = at - 0.5;
    const line = { type: "line", line: { color: "#e8eaee", width: 2, dash: "dot" } };
    return [axis === "y"
      ? Object.assign(line, { xref: "paper", x0: 0, x1: 1, yref: "y", y0: edge, y1: edge })
      : Object.assign(line, { yref: "paper", y0: 0, y1: 1, xref: "x", x0: edge, x1: edge })];
  }

  function reduceRow(row, how) {
    if (!row || !row.length) return null;
    if (how === "max") return Math.max.apply(null, row);
    if (how === "min") return Math.min.apply(null, row);
    return row.reduce((a, b) => a + b, 0) / row.length;
  }

  function drawOverview() {
    const p = selectedPrompt(), kind = $("kind").value, how = $("overview-reduce").value;
    const layers = Array.from(run.rows.keys()).filter((l) => rowsOf(l, kind, p).length).sort((a, b) => a - b);
    if (!layers.length) { empty("overview", run.done ? "no " + kind + " rows" : "waiting for rows…"); return; }
    const width = layers.reduce((n, l) => Math.max(n, rowsOf(l, kind, p).length), 0);
    const z = layers.map((l) => {
      const rows = rowsOf(l, kind, p), out = [];
      for (let i = 0; i < width; i++) out.push(reduceRow(rows[i], how));
      return out;
    });
    const labels = (run.tokens[p] || []).map(tokenLabel).slice(0, width);
    while (labels.length < width) labels.push("…");
    draw("overview", [Object.assign({
      type: "heatmap",
      z: z,
      x: range(0, width - 1),
      y: layers.map((l) => "L" + l),
      text: layers.map(() => labels),
      hovertemplate: "layer %{y}, token %{x}: %{text}<br>" + how + " of " + run.reducer + " %{z:.4g}<extra></extra>",
      colorbar: { thickness: 10, len: 0.9 },
    }, colorsFor(run.reducer))], baseLayout({
      title: { text: plotlyText(kind + " · prompt " + p + " · click a layer to open it"), font: { size: 12 }, x: 0.01 },
      xaxis: tokenTicks(labels),
      yaxis: { type: "category", automargin: true },
      shapes: promptEdge(p, width, "x"),
      uirevision: "overview " + kind + p,
    }));
    bindOnce("overview", "plotly_click", (ev) => {
      // a click on a cell opens that layer in the heatmap beside it
      const pt = ev.points && ev.points[0];
      if (!pt) return;
      $("layer").value = String(pt.y).replace(/^L/, "");
      schedule();
    });
  }

  function bindOnce(id, event, fn) {
    const el = $(id);
    el.scopeBound = el.scopeBound || {};
    if (el.scopeBound[event]) return;
    el.scopeBound[event] = true;
    el.on(event, fn);
  }

  function drawAttention() {
    if (!run || !run.done) return;
    const key = selectedAttention();
    const m = run.attention.get(key.join("/"));
    if (!m) return;   // its answer is on the way
    const n = m.matrix.length;
    if (!n) { empty("attention", "no tokens"); return; }
    const labels = (m.tokens || []).map(tokenLabel);
    while (labels.length < n) labels.push("…");
    const cols = m.matrix.reduce((w, r) => Math.max(w, r.length), 0);
    // rows may be ragged (a causal matrix sent as its lower triangle): pad with null
    const z = m.matrix.map((r) => (r.length < cols ? r.concat(new Array(cols - r.length).fill(null)) : r));
    const text = z.map((r, i) => r.map((_, j) => labels[i] + " → " + (labels[j] === undefined ? "…" : labels[j])));
    draw("attention", [{
      type: "heatmap",
      z: z,
      x: range(0, cols - 1),
      y: range(0, n - 1),
      text: text,
      hovertemplate: "query %{y} → key %{x}<br>%{text}<br>p %{z:.4f}<extra></extra>",
      colorscale: [[0, "#f7fbff"], [0.5, "#6baed6"], [1, "#08306b"]],  // white: no attention
      zmin: 0,
      colorbar: { thickness: 10, len: 0.9 },
    }], baseLayout({
      title: { text: "layer " + m.layer + " · head " + m.head + " · prompt " + m.prompt, font: { size: 12 }, x: 0.01 },
      xaxis: Object.assign({ title: { text: "key" }, side: "bottom", tickangle: -60 }, tokenTicks(labels.slice(0, cols))),
      yaxis: Object.assign({ title: { text: "query" }, autorange: "reversed" }, tokenTicks(labels)),
      margin: { l: 70, r: 10, t: 24, b: 70 },
      uirevision: "attention " + key.join("/"),
    }));
  }

  function drawTopk() {
    const last = run.lastStep;
    const slider = $("step");
    slider.max = String(Math.max(0, last));
    slider.disabled = last < 1;
    slider.value = String(selectedStep);
    const p = selectedPrompt();
    const entry = run.steps[selectedStep];
    $("step-label").textContent = last < 0 ? "" : "step " + selectedStep + " of " + last;
    $("kl").textContent = "";
    if (last < 0) { empty("topk", run.done ? "no top-k in this view" : "waiting for the first step…"); return; }
    if (!entry || !entry.topk || !entry.topk[p]) { empty("topk", "step " + selectedStep + " was dropped (slow connection)"); return; }
    const chosenId = entry.ids ? entry.ids[p] : undefined;
    const clean = entry.clean && entry.clean[p];
    const traces = [barTrace(entry.topk[p], chosenId, clean ? "perturbed" : "top-k", clean ? "#d1603d" : "#2f6db3", "")];
    const layout = baseLayout({
      showlegend: false,
      margin: { l: 90, r: 20, t: 30, b: 36 },
      uirevision: "topk",
    });
    layout.yaxis = barAxis(entry.topk[p]);
    // one probability scale for both sides, so perturbed and clean bars compare by length
    const top = Math.max.apply(null, entry.topk[p].concat(clean || []).map((t) => t.p).concat([0.01]));
    const pRange = [0, Math.min(1, top * 1.1)];
    if (clean) {
      // perturbed and clean side by side, each with its own token axis: their top tokens differ
      traces.push(barTrace(clean, chosenId, "clean", "#2f6db3", "2"));
      layout.xaxis = { domain: [0, 0.44], title: { text: "perturbed p" }, range: pRange };
      layout.xaxis2 = { domain: [0.56, 1], title: { text: "clean p" }, range: pRange, anchor: "y2" };
      layout.yaxis2 = Object.assign(barAxis(clean), { anchor: "x2" });
      const kl = entry.kl ? entry.kl[p] : null;
      if (kl !== null && kl !== undefined) $("kl").textContent = "KL " + Number(kl).toPrecision(4);
    } else {
      layout.xaxis = { title: { text: "p" }, range: pRange };
    }
    layout.title = { text: "prompt " + p + " · step " + selectedStep, font: { size: 12 }, x: 0.01 };
    draw("topk", traces, layout);
  }

  function barTrace(list, chosenId, name, color, axis) {
    return {
      type: "bar",
      orientation: "h",
      name: name,
      x: list.map((t) => t.p),
      y: range(0, list.length - 1),
      xaxis: "x" + axis,
      yaxis: "y" + axis,
      text: list.map((t) => tokenLabel(t.token) + " (id " + t.id + ")"),
      textposition: "none",
      hovertemplate: name + ": %{text}<br>p %{x:.4f}<extra></extra>",
      // the token that was actually generated stands out
      marker: { color: list.map((t) => (t.id === chosenId ? "#1d2430" : color)) },
    };
  }

  function barAxis(list) {
    return Object.assign({ autorange: "reversed" }, tokenTicks(list.map((t) => tokenLabel(t.token))));
  }

  function drawPca() {
    if (!run || !run.done) return;
    const m = run.pca.get(intValue("pca-layer"));
    if (!m) return;
    const chosen = selectedPrompt();
    const traces = (m.points || []).map((pts, p) => {
      const labels = ((m.tokens || [])[p] || []).map(tokenLabel);
      const promptLen = run.iteration === null ? run.promptLen[p] : Infinity;
      return {
        type: "scatter",
        mode: "lines+markers",
        name: "prompt " + p,
        x: pts.map((xy) => xy[0]),
        y: pts.map((xy) => xy[1]),
        text: pts.map((_, i) => (labels[i] === undefined ? "…" : labels[i])),
        hovertemplate: "prompt " + p + ", token %{pointNumber}: %{text}<extra></extra>",
        line: { color: PROMPT_COLORS[p % PROMPT_COLORS.length], width: p === chosen ? 2.5 : 1.2 },
        // the trajectory starts at a square; generated tokens are diamonds
        marker: {
          size: pts.map((_, i) => (i === 0 ? 9 : 6)),
          symbol: pts.map((_, i) => (i === 0 ? "square" : i >= promptLen ? "diamond" : "circle")),
        },
        opacity: p === chosen ? 1 : 0.75,
      };
    }).filter((t) => t.x.length);
    if (!traces.length) { empty("pca", "no points"); return; }
    const ex = m.explained || [];
    const pct = (v) => (v === undefined || v === null ? "" : " (" + (100 * v).toFixed(1) + "%)");
    $("pca-info").textContent = ex.length ? "explained variance " + ex.map((v) => (100 * v).toFixed(1) + "%").join(" + ") : "";
    draw("pca", traces, baseLayout({
      title: { text: m.layer === 0 ? "embeddings" : "after layer " + m.layer, font: { size: 12 }, x: 0.01 },
      xaxis: { title: { text: "PC1" + pct(ex[0]) }, zeroline: false },
      yaxis: { title: { text: "PC2" + pct(ex[1]) }, zeroline: false },
      legend: { orientation: "h", y: -0.15 },
      uirevision: "pca " + m.layer,
    }));
  }

  // -- wiring -------------------------------------------------------------------------------------
  $("generate").addEventListener("click", generate);
  $("prompts").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); if (!$("generate").disabled) generate(); }
  });
  $("apply").addEventListener("click", applyPerturbation);
  $("clear").addEventListener("click", () => send({ type: "clear" }));
  $("pert-target").addEventListener("change", fillPerturbKinds);

  $("prompt").addEventListener("change", () => { schedule(); requestAttention(); if (run) drawPca(); });
  $("kind").addEventListener("change", schedule);
  $("layer").addEventListener("change", schedule);
  $("overview-reduce").addEventListener("change", schedule);
  $("att-layer").addEventListener("change", requestAttention);
  $("att-head").addEventListener("change", requestAttention);
  $("pca-layer").addEventListener("change", requestPca);
  $("step").addEventListener("input", () => {
    selectedStep = intValue("step");
    followSteps = run !== null && selectedStep === run.lastStep;
    schedule();
  });
  $("output").addEventListener("click", (e) => {
    // clicking a generated token shows its top-k; clicking a line chooses its prompt
    const line = e.target.closest(".line");
    if (!line || !run) return;
    const p = parseInt(line.dataset.prompt, 10);
    const promptChanged = p !== selectedPrompt();
    $("prompt").value = String(p);
    if (e.target.classList.contains("gen-tok")) {
      selectedStep = parseInt(e.target.dataset.step, 10);
      followSteps = selectedStep === run.lastStep;
    }
    schedule();
    if (promptChanged) { requestAttention(); drawPca(); }
  });

  CHARTS.forEach((id) => empty(id, "no run yet"));
  if (typeof Plotly === "undefined") {
    scriptError("plotly.min.js did not load");
    setStatus("error", "plotly.min.js did not load from the server");
  }
  connect();
})();
