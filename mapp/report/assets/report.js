/* The mapp report page: draws the Plotly figures built in Python (mapp/report/html.py) and the
 * sortable tables. document.body.dataset.rendered holds the number of charts drawn once all are
 * done, dataset.errors any script error, so a headless browser can check the page. */
(function () {
  "use strict";
  var errors = [];
  function fail(message) {
    errors.push(String(message));
    document.body.dataset.errors = errors.join(" | ");
  }
  window.addEventListener("error", function (e) { fail(e.message); });
  window.addEventListener("unhandledrejection", function (e) { fail(e.reason); });

  var D = JSON.parse(document.getElementById("mapp-data").textContent);

  function fmt(v, d) {
    if (v === null || v === undefined) { return "-"; }
    if (Math.abs(v) >= 100) { return v.toFixed(0); }
    return v.toFixed(d === undefined ? 3 : d);
  }
  function ms(ns) { return ns === null || ns === undefined ? "-" : fmt(ns / 1e6) + " ms"; }
  function pct(f) { return f === null || f === undefined ? "-" : (100 * f).toFixed(1) + "%"; }

  /* Sortable table: cols = [[key, title, formatter, isText]]; click a header to sort. */
  function table(id, rows, cols) {
    var box = document.getElementById(id);
    if (!rows.length) { return; }
    var t = document.createElement("table"), head = t.createTHead().insertRow(), body = t.createTBody(), dir = {};
    function fill() {
      while (body.firstChild) { body.removeChild(body.firstChild); }
      rows.forEach(function (r) {
        var tr = body.insertRow();
        cols.forEach(function (c) {
          var td = tr.insertCell(), v = r[c[0]];
          td.textContent = c[2] ? c[2](v, r) : (v === null ? "-" : v);
          if (c[3]) { td.className = "t"; }
        });
      });
    }
    cols.forEach(function (c) {
      var th = document.createElement("th");
      th.textContent = c[1];
      if (c[3]) { th.className = "t"; }
      th.addEventListener("click", function () {
        dir[c[0]] = -(dir[c[0]] || -1);
        rows.sort(function (a, b) {
          var x = a[c[0]], y = b[c[0]];
          return (x === y ? 0 : (x === null ? -1 : y === null ? 1 : (x < y ? -1 : 1))) * dir[c[0]];
        });
        fill();
      });
      head.appendChild(th);
    });
    fill();
    box.appendChild(t);
  }

  var b = D.bundle || {};
  var layout = ["tp", "pp", "dp", "cp", "ep"].filter(function (a) {
    return b[a] && (b[a] > 1 || a === "tp" || a === "pp" || a === "dp");
  }).map(function (a) { return a.toUpperCase() + b[a]; }).join(" x ");
  document.getElementById("run").textContent = (b.directory || "") + " \u00b7 " + (b.format || "") + " \u00b7 " +
    b.traced_ranks + " of " + b.world_size + " ranks \u00b7 " + layout + (b.vpp > 1 ? " (VPP" + b.vpp + ")" : "") +
    " \u00b7 " + (b.events || 0).toLocaleString() + " events \u00b7 " +
    (b.aligned ? "clocks aligned to rank " + b.reference_rank : "clocks not aligned") +
    (D.median_iteration_ns ? " \u00b7 median iteration " + ms(D.median_iteration_ns) : "");
  if (D.verdict) {
    document.getElementById("verdict-section").hidden = false;
    document.getElementById("verdict").textContent = D.verdict;
  }

  table("table-breakdown", D.breakdown.slice(), [["rank", "rank"], ["pp", "pp"], ["tp", "tp"], ["dp", "dp"],
    ["window_ns", "window", ms], ["compute_frac", "compute", pct], ["exposed_comm_frac", "exposed comm", pct],
    ["idle_frac", "idle", pct]]);
  table("table-skew", D.skew.slice(), [["group", "group", null, true], ["op", "op", null, true],
    ["instances", "count"], ["mean_spread_ns", "mean spread", ms], ["max_spread_ns", "max spread", ms],
    ["top_last_arriver", "most often last"], ["top_last_share", "share", pct]]);
  table("table-last", D.last_arrivers.slice(0, 10), [["rank", "rank"], ["pp", "pp"], ["tp", "tp"], ["dp", "dp"],
    ["times_last", "times last"], ["collectives", "of"], ["caused_wait_ns", "others waited", ms],
    ["waited_ns", "it waited", ms]]);
  table("table-slowest", D.slowest_ops.slice(), [["rank", "rank"], ["name", "op", null, true],
    ["iteration", "iteration"], ["microbatch", "microbatch"], ["dur_ns", "duration", ms],
    ["vs_median", "vs median", function (v) { return v === null ? "-" : fmt(v, 2) + "x"; }]]);
  if (D.findings.length) {
    document.getElementById("findings-section").hidden = false;
    table("table-findings", D.findings, [["severity", "severity", null, true], ["message", "finding", null, true]]);
  }

  /* The charts: one Plotly figure per chart id, or a note where the run has no data for it. */
  var config = { displaylogo: false, responsive: true, showLink: false, showSendToCloud: false };
  var drawing = Object.keys(D.figures).map(function (id) {
    var box = document.getElementById("chart-" + id), figure = D.figures[id];
    if (!figure) {
      var p = document.createElement("p");
      p.className = "empty";
      p.textContent = D.empty[id] || "no data";
      box.appendChild(p);
      return null;
    }
    figure.layout.template = D.template;
    return Plotly.newPlot(box, figure.data, figure.layout, config);
  }).filter(function (promise) { return promise !== null; });
  Promise.all(drawing).then(function (drawn) {
    document.body.dataset.rendered = String(drawn.length);
  }, fail);
})();
