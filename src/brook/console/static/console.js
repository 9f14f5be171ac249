/* brook console: sortable tables, table filters, keyboard shortcuts and the live lag chart.
   No inline script anywhere (the Content-Security-Policy allows scripts from this site only). */
(function () {
  "use strict";

  // --- sortable tables: a button in each header; the sort survives htmx refreshes ---------
  const sorts = {};  // table id -> [column, ascending]

  function cellValue(row, col) {
    const cell = row.children[col];
    if (!cell) return "";
    const v = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    const n = Number(v.replace(/,/g, ""));
    return v !== "" && v !== "-" && !isNaN(n) ? n : v.toLowerCase();
  }

  function sortTable(table, col, asc) {
    const body = table.tBodies[0];
    if (!body) return;
    const rows = Array.from(body.rows);
    if (rows.length < 2) return;
    rows.sort((a, b) => {
      const x = cellValue(a, col), y = cellValue(b, col);
      if (typeof x === typeof y) return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
      return (typeof x === "number" ? -1 : 1) * (asc ? 1 : -1);
    });
    rows.forEach(r => body.appendChild(r));
    table.querySelectorAll("thead th").forEach((th, i) => {
      th.setAttribute("aria-sort", i === col ? (asc ? "ascending" : "descending") : "none");
    });
  }

  function makeSortable(table) {
    if (table.dataset.sortReady) return;
    table.dataset.sortReady = "1";
    table.querySelectorAll("thead th").forEach((th, col) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "sort";
      button.innerHTML = th.innerHTML;
      button.title = "Sort by this column";
      th.textContent = "";
      th.appendChild(button);
      th.setAttribute("aria-sort", "none");
      button.addEventListener("click", () => {
        const key = table.id || "";
        const [prev, prevAsc] = sorts[key] || [-1, true];
        const asc = prev === col ? !prevAsc : true;
        sorts[key] = [col, asc];
        sortTable(table, col, asc);
      });
    });
  }

  function setup(root) {
    root.querySelectorAll("table.sortable").forEach(makeSortable);
  }

  document.addEventListener("DOMContentLoaded", () => setup(document));
  document.addEventListener("htmx:afterSwap", (e) => {
    setup(document);
    const table = e.target.closest ? e.target.closest("table") : null;
    document.querySelectorAll("table.sortable").forEach(t => {
      const s = sorts[t.id || ""];
      if (s) sortTable(t, s[0], s[1]);
    });
    void table;
  });

  // --- filters of a table by an input (data-filter-table="table id") ----------------------
  document.addEventListener("input", (e) => {
    const input = e.target;
    const id = input.dataset && input.dataset.filterTable;
    if (!id) return;
    const needle = input.value.toLowerCase();
    const table = document.getElementById(id);
    if (!table) return;
    Array.from(table.tBodies[0].rows).forEach(r => {
      r.hidden = needle !== "" && !r.textContent.toLowerCase().includes(needle);
    });
  });

  // --- keyboard: "/" focuses the page's search; "g" then a letter goes to a page ----------
  let pendingG = false;
  document.addEventListener("keydown", (e) => {
    const t = e.target;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) return;
    if (e.key === "/") {
      const search = document.querySelector("[data-search]");
      if (search) { e.preventDefault(); search.focus(); }
      return;
    }
    if (pendingG) {
      pendingG = false;
      const to = {c: "/groups", o: "/offsets-topic", t: "/topics", k: "/cluster", s: "/security"}[e.key];
      if (to) { e.preventDefault(); window.location.href = to; }
      return;
    }
    if (e.key === "g") pendingG = true;
  });

  // --- the lag chart ---------------------------------------------------------------------
  function cssVar(name, fallback) {
    const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return v || fallback;
  }

  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                   "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

  function durationText(s) {
    if (s === null || s === undefined) return "not consuming";
    s = Math.round(s);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }

  function startChart(el) {
    const url = el.dataset.lagUrl;
    const interval = Math.max(1, Number(el.dataset.interval || 5)) * 1000;
    let chart = null, labels = "";
    const state = window.brookLag = {data: null, updates: 0, latest: null};

    function build(payload) {
      const fg = cssVar("--fg", "#222"), grid = cssVar("--grid", "#ddd");
      const series = [{}].concat(payload.series.map((s, i) => ({
        label: s.label, stroke: i === 0 ? fg : PALETTE[(i - 1) % PALETTE.length],
        width: i === 0 ? 2 : 1, spanGaps: false,
      })));
      const axis = {stroke: fg, grid: {stroke: grid}, ticks: {stroke: grid}};
      const opts = {
        width: Math.max(300, el.clientWidth), height: 280, series: series,
        scales: {x: {time: true}, y: {range: (u, min, max) => [0, Math.max(1, max * 1.1)]}},
        axes: [axis, Object.assign({label: "records behind"}, axis)],
        legend: {live: true},
      };
      if (chart) chart.destroy();
      chart = new uPlot(opts, toData(payload), el);
    }

    function toData(payload) {
      return [payload.t].concat(payload.series.map(s => s.values));
    }

    async function tick() {
      try {
        const r = await fetch(url, {headers: {"Accept": "application/json"}, credentials: "same-origin"});
        if (!r.ok) throw new Error("HTTP " + r.status);
        const payload = await r.json();
        const now = payload.series.map(s => s.label).join("\u0000");
        if (!chart || now !== labels) { labels = now; build(payload); }
        else chart.setData(toData(payload));
        state.data = payload; state.updates += 1; state.latest = payload.lag;
        const lagNow = document.getElementById("lag-now");
        if (lagNow) lagNow.textContent = payload.lag === null ? "-" : payload.lag;
        const behind = document.getElementById("time-behind");
        if (behind) behind.textContent = durationText(payload.time_behind);
        const updated = document.getElementById("lag-updated");
        if (updated) updated.textContent = "chart updated " + new Date().toLocaleTimeString() +
          (payload.hidden_partitions ? " · " + payload.hidden_partitions + " partitions with less lag not drawn" : "");
      } catch (err) {
        const updated = document.getElementById("lag-updated");
        if (updated) updated.textContent = "the chart could not update: " + err.message;
      }
    }
    tick();
    setInterval(tick, interval);
    if (window.ResizeObserver) {
      new ResizeObserver(() => { if (chart) chart.setSize({width: Math.max(300, el.clientWidth), height: 280}); }).observe(el);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const el = document.getElementById("lag-chart");
    if (el && window.uPlot) startChart(el);
  });
})();
