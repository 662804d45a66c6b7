// podflow console: renders the snapshots the server sends over
// server-sent events, and the selected pod's journey.
"use strict";
(function () {
  const $ = (s) => document.querySelector(s);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  let snap = null, selected = null, lastJourney = "";
  // The view's state lives in the address (#q=…&ns=…&stage=…&pod=ns/name),
  // so a pod, a stage or a node can be linked, bookmarked and reloaded.
  const state = { q: "", ns: "", stage: "", phase: "", reason: "", node: "", stuck: "", page: 0, pod: "", range: "" };
  const PAGE = 100;
  let page = null, podsVersion = -1, podsQuery = "";
  const now = () => Date.now() / 1000;

  const age = (s) => s < 0 ? "never" : s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m" : Math.floor(s / 3600) + "h";
  const since = (unix) => unix ? age(Math.max(0, Math.round(now() - unix))) : "never";

  function readHash() {
    const h = new URLSearchParams(location.hash.slice(1));
    for (const k of Object.keys(state)) state[k] = h.get(k) || (k === "page" ? 0 : "");
    state.page = parseInt(state.page, 10) || 0;
    selected = state.pod || null;
  }
  function writeHash() {
    const h = new URLSearchParams();
    for (const [k, v] of Object.entries(state)) if (v) h.set(k, v);
    const s = h.toString();
    if (location.hash.slice(1) !== s) history.replaceState(null, "", s ? "#" + s : location.pathname);
  }
  function setState(changes, keepPage) {
    Object.assign(state, changes);
    if (!keepPage) state.page = 0;
    selected = state.pod || null;
    writeHash();
    syncControls();
    loadPods(true);
  }
  const ms = (ns) => ns ? (ns / 1e6).toFixed(ns < 1e7 ? 2 : 0) + "ms" : "-";

  function renderPipeline(stages) {
    const root = $("#pipeline");
    root.replaceChildren();
    for (const s of stages) {
      const box = el("div", "stage");
      box.dataset.stage = s.name;
      if (s.backingUp) box.classList.add("backing");
      if (s.noReplica) box.classList.add("idle");
      if (s.missing) box.classList.add("missing");
      box.title = (s.peers || []).map((p) => p.name + ": " + p.handled + " handled").join("\n");
      box.append(el("h4", "", s.name));
      const dl = el("dl");
      const row = (k, v) => { dl.append(el("dt", "", k), el("dd", "", String(v))); };
      row("replicas", s.replicas + (s.handling ? " · " + s.handling + " pulling" : ""));
      row("pending", s.pending);
      row("ack pending", s.ackPending);
      row("redelivered", s.redelivered);
      row("dead letters", s.deadLetters);
      row("in / out", s.inPerSec.toFixed(1) + " / " + s.outPerSec.toFixed(1) + "/s");
      row("p50 / p99", s.p50Ms || s.p99Ms ? s.p50Ms.toFixed(1) + " / " + s.p99Ms.toFixed(1) + " ms" : "-");
      box.append(dl);
      const waiting = snap && snap.summary ? (snap.summary.stuckByStage || {})[podStage(s.name)] || 0 : 0;
      if (waiting) box.append(el("div", "stuck-count", waiting + " stuck here"));
      if (podStage(s.name) === state.stage) box.classList.add("selected");
      box.addEventListener("click", () => setState({ stage: state.stage === podStage(s.name) ? "" : podStage(s.name), stuck: "" }));
      root.append(box);
    }
  }

  // podStage is the stage a card's pods say they are in.
  const podStage = (card) => card.startsWith("nodeagent") ? "nodeagent" : card;

  const SVG = "http://www.w3.org/2000/svg";
  const svgEl = (tag, attrs, text) => {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const RANGES = ["5m", "15m", "1h", "6h", "24h"];
  const COLORS = ["#4aa3ff", "#e5c07b", "#98c379", "#c678dd", "#56b6c2", "#d19a66", "#e06c75", "#8394a5", "#61afef", "#b5bd68"];
  let hist = null, historyBusy = false, historyAt = 0;

  // niceMax rounds a count up to 1, 2 or 5 times a power of ten.
  const niceMax = (v) => {
    const p = Math.pow(10, Math.floor(Math.log10(Math.max(v, 1))));
    return [1, 2, 5, 10].map((m) => m * p).find((n) => n >= v);
  };
  const clockOf = (ms, step) => {
    const d = new Date(ms), two = (n) => String(n).padStart(2, "0");
    return two(d.getHours()) + ":" + two(d.getMinutes()) + (step < 60 ? ":" + two(d.getSeconds()) : "");
  };

  // loadHistory reads the stream's history over the chosen range: every
  // 5 s for an hour or less, every 30 s beyond, and when the range changes.
  async function loadHistory(force) {
    const range = state.range || "15m";
    const every = /h$/.test(range) && range !== "1h" ? 30e3 : 5e3;
    if (historyBusy || (!force && Date.now() - historyAt < every)) return;
    historyBusy = true;
    try {
      const r = await fetch("/api/timeline?range=" + encodeURIComponent(range));
      if (!r.ok) { $("#marks").textContent = "timeline: " + (await r.text()); return; }
      hist = await r.json();
      historyAt = Date.now();
      renderTimeline();
    } finally { historyBusy = false; }
  }

  // renderTimeline draws the events the stream stored per bucket, stacked
  // by the stage that produced them, on a time axis and a count axis, with
  // a line at each kill, restart and fault where it happened.
  function renderTimeline() {
    const h = hist, svg = $("#timeline");
    if (!h) return;
    svg.replaceChildren();
    const L = 46, R = 992, T = 8, B = 150, W = R - L, Hh = B - T;
    const t0 = Date.parse(h.from), t1 = Date.parse(h.to), stepMs = h.stepSec * 1000;
    const x = (ms) => L + (ms - t0) / (t1 - t0) * W;
    const top = niceMax(Math.max(1, ...h.buckets.map((b) => b.total)));
    const y = (v) => B - v / top * Hh;
    // The count axis: 0, half, top.
    for (const v of [0, top / 2, top]) {
      svg.append(svgEl("line", { class: "grid", x1: L, x2: R, y1: y(v), y2: y(v) }));
      svg.append(svgEl("text", { class: "tick", x: L - 4, y: y(v) + 4, "text-anchor": "end" }, String(v)));
    }
    // The time axis: at most eight labelled ticks at round times.
    const iv = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200]
      .find((s) => s * 8 * 1000 >= t1 - t0 && s % h.stepSec === 0) || h.stepSec * Math.ceil(h.buckets.length / 8);
    for (let ms = Math.ceil(t0 / (iv * 1000)) * iv * 1000; ms < t1; ms += iv * 1000) {
      svg.append(svgEl("line", { class: "grid", x1: x(ms), x2: x(ms), y1: T, y2: B + 4 }));
      svg.append(svgEl("text", { class: "tick", x: x(ms), y: B + 16, "text-anchor": "middle" }, clockOf(ms, iv)));
    }
    svg.append(svgEl("line", { class: "axis-line", x1: L, x2: R, y1: B, y2: B }));
    const color = (st) => COLORS[Math.max(0, h.stages.indexOf(st)) % COLORS.length];
    for (const b of h.buckets) {
      if (!b.total) continue;
      const ms = Date.parse(b.start), bx = x(Math.max(ms, t0)), bw = Math.max(1, x(Math.min(ms + stepMs, t1)) - bx - 1);
      const g = svgEl("g", { class: "bucket" });
      g.dataset.total = b.total;
      let acc = 0;
      const lines = [clockOf(ms, 1) + "  " + b.total + " events"];
      for (const st of h.stages) {
        const types = (b.counts || {})[st];
        if (!types) continue;
        const n = Object.values(types).reduce((a, c) => a + c, 0);
        g.append(svgEl("rect", { x: bx, width: bw, y: y(acc + n), height: y(acc) - y(acc + n), fill: color(st) }));
        acc += n;
        const lat = (b.latency || {})[st];
        lines.push(st + ": " + Object.entries(types).map(([t, c]) => t + " " + c).join(", ") +
          (lat ? "  (handling p50 " + lat.p50Ms.toFixed(1) + " ms, p99 " + lat.p99Ms.toFixed(1) + " ms)" : ""));
      }
      g.append(svgEl("title", {}, lines.join("\n")));
      svg.append(g);
    }
    // Marks: the journals' (kills, restarts, faults) and the polls'
    // (a replica that stopped or resumed answering the ping).
    const polled = ((snap && snap.marks) || []).filter((m) => m.kind === "silent" || m.kind === "answering");
    const marks = h.marks.concat(polled).filter((m) => Date.parse(m.time) >= t0 && Date.parse(m.time) < t1)
      .sort((a, b) => Date.parse(a.time) - Date.parse(b.time));
    for (const m of marks) {
      const l = svgEl("line", { class: "m-" + m.kind, x1: x(Date.parse(m.time)), x2: x(Date.parse(m.time)), y1: T, y2: B });
      l.append(svgEl("title", {}, m.kind + " " + m.process + (m.detail ? " (" + m.detail + ")" : "") + " at " + new Date(m.time).toLocaleTimeString()));
      svg.append(l);
    }
    $("#tl-step").textContent = h.stepSec < 60 ? h.stepSec + " s" : h.stepSec / 60 + " min";
    $("#tl-total").textContent = h.events + " events" + (h.truncated ? ", read up to " + new Date(h.readTo).toLocaleTimeString() + " (the limit)" : "");
    const legend = $("#tl-legend");
    legend.replaceChildren(...h.stages.map((st) => { const k = el("span", "key", st); k.style.setProperty("--c", color(st)); return k; }));
    $("#marks").textContent = marks.length ? marks.slice(-8).map((m) => new Date(m.time).toLocaleTimeString() + " " + m.process + " " + m.kind).join(" · ") : "no kills, restarts or faults in this range";
  }

  function podsURL() {
    const q = new URLSearchParams({ q: state.q, namespace: state.ns, stage: state.stage, phase: state.phase, reason: state.reason,
      node: state.node, stuck: state.stuck, offset: state.page * PAGE, limit: PAGE });
    for (const [k, v] of [...q.entries()]) if (!v || v === "0" && k === "offset") q.delete(k);
    return "/api/pods?" + q.toString();
  }

  // loadPods reads the page the view shows: when the filters changed, or
  // the pods did (the server's version).
  async function loadPods(force) {
    const url = podsURL();
    if (!force && url === podsQuery && page && page.version === podsVersion) return;
    podsQuery = url;
    const r = await fetch(url);
    if (!r.ok || url !== podsQuery) return;
    page = await r.json();
    renderPods();
  }

  function renderPods() {
    const body = $("#pods tbody");
    body.replaceChildren();
    if (!page) return;
    for (const p of page.pods) {
      const key = p.namespace + "/" + p.name;
      const tr = el("tr");
      tr.dataset.pod = key;
      if (p.stuck) tr.classList.add("stuck");
      if (p.ready) tr.classList.add("ready");
      if (key === selected) tr.classList.add("selected");
      tr.title = p.verdict;
      for (const [cls, v] of [["ns", p.namespace], ["name", p.name], ["phase", p.phase], ["stage", p.stage],
        ["reason", p.reason], ["age", p.created ? since(p.created) : age(p.ageSec)], ["node", p.node || "-"]]) tr.append(el("td", cls, v || ""));
      tr.addEventListener("click", () => { setState({ pod: key }, true); lastJourney = ""; loadJourney(); });
      body.append(tr);
    }
    const last = Math.min(page.offset + page.pods.length, page.total);
    $("#pods-count").textContent = page.total ? (page.offset + 1) + "–" + last + " of " + page.total : "no pods match";
    $("#prev").disabled = state.page === 0;
    $("#next").disabled = last >= page.total;
  }

  // syncControls shows the state in the filters (after a link was opened).
  function syncControls() {
    if (document.activeElement !== $("#filter")) $("#filter").value = state.q;
    for (const [id, key, counts, all] of [["#ns", "ns", "byNamespace", "all namespaces"], ["#phase", "phase", "byPhase", "every phase"],
      ["#reason", "reason", "byReason", "every reason"], ["#stage", "stage", "byStage", "every stage"]]) {
      const sel = $(id), c = (snap && snap.summary && snap.summary[counts]) || {};
      const opts = [["", all]].concat(Object.keys(c).sort().map((k) => [k, k + " (" + c[k] + ")"]));
      if (state[key] && !(state[key] in c)) opts.push([state[key], state[key] + " (0)"]);
      const sig = JSON.stringify(opts);
      if (sel.dataset.sig !== sig) {
        sel.replaceChildren(...opts.map(([v, t]) => { const o = el("option", "", t); o.value = v; return o; }));
        sel.dataset.sig = sig;
      }
      sel.value = state[key];
    }
    $("#stuck").checked = state.stuck === "1";
    $("#range").value = state.range || "15m";
    $("#node-filter").textContent = state.node ? "node " + state.node + " ✕" : "";
  }

  function bar(frac) {
    const b = el("span", "bar"), i = el("span");
    i.style.width = Math.min(100, Math.round(frac * 100)) + "%";
    b.append(i);
    return b;
  }

  function renderNodes(nodes) {
    const body = $("#nodes tbody");
    body.replaceChildren();
    for (const n of nodes) {
      const tr = el("tr");
      tr.dataset.node = n.name;
      tr.append(el("td", "", n.name), el("td", "ready-" + n.ready, n.ready + (n.unschedulable ? ",SchedulingDisabled" : "")));
      const cpu = el("td"); cpu.append(bar(n.cpuFrac), n.cpu);
      const mem = el("td"); mem.append(bar(n.memFrac), n.memory);
      tr.append(cpu, mem, el("td", "", n.pods + (n.maxPods ? " / " + n.maxPods : "")), el("td", "", since(n.heartbeat)));
      if (n.name === state.node) tr.classList.add("selected");
      tr.addEventListener("click", () => setState({ node: state.node === n.name ? "" : n.name }));
      body.append(tr);
    }
  }

  function renderJourney(j) {
    $("#journey-title").textContent = j.namespace + "/" + j.name + (j.uid ? "  uid " + j.uid : "");
    const pod = page && page.pods.find((p) => p.namespace === j.namespace && p.name === j.name);
    const v = $("#journey-verdict");
    v.textContent = j.where ? "at " + j.where + ": " + j.verdict : "no events in the stream";
    v.className = "verdict" + (pod && pod.stuck ? " stuck" : "");
    const root = $("#journey");
    root.replaceChildren();
    const entries = j.entries || [];
    if (!entries.length) return;
    const t = (e) => Date.parse(e.time);
    const start = Math.min(...entries.map((e) => t(e) - ((e.took || 0) + (e.waited || 0)) / 1e6));
    const end = Math.max(...entries.map(t));
    const span = Math.max(end - start, 1);
    for (const e of entries) {
      const row = el("div", "wf-row");
      row.dataset.stage = e.stage;
      row.dataset.event = e.event;
      if (e.redeliveries) row.classList.add("redelivered");
      if (/Failed|Rejected|Unschedulable/.test(e.event)) row.classList.add("failed");
      row.title = e.event + (e.detail ? ": " + e.detail : "");
      row.append(el("span", "wf-label", e.stage + (e.replica && e.replica !== e.stage ? " · " + e.replica : "")));
      const track = el("div", "wf-track");
      const end_ = t(e), tookMs = (e.took || 0) / 1e6, waitMs = (e.waited || 0) / 1e6;
      const w = el("div", "wf-wait");
      w.style.left = ((end_ - tookMs - waitMs - start) / span * 100) + "%";
      w.style.width = (waitMs / span * 100) + "%";
      const h = el("div", "wf-took");
      h.style.left = ((end_ - tookMs - start) / span * 100) + "%";
      h.style.width = (tookMs / span * 100) + "%";
      track.append(w, h);
      let info = e.event + "  wait " + ms(e.waited) + "  took " + ms(e.took);
      if (e.redeliveries) info += "  redelivered " + e.redeliveries;
      if (/conflicts=/.test(e.detail || "")) info += "  " + e.detail.match(/conflicts=\d+/)[0];
      if (e.repeats > 1) info += "  \u00d7" + e.repeats + " (the last at " + new Date(e.last).toLocaleTimeString() + ")";
      row.append(track, el("span", "wf-info", info));
      root.append(row);
    }
    const evs = $("#journey-events");
    evs.replaceChildren();
    for (const e of j.events || []) {
      evs.append(el("li", e.type, e.type + " " + e.reason + (e.count > 1 ? " (x" + e.count + ")" : "") + ": " + e.message));
    }
  }

  async function loadJourney() {
    if (!selected) return;
    const [ns, name] = selected.split("/");
    const r = await fetch("/api/journey?namespace=" + encodeURIComponent(ns) + "&name=" + encodeURIComponent(name));
    if (!r.ok) return;
    const text = await r.text();
    if (text === lastJourney) return;
    lastJourney = text;
    renderJourney(JSON.parse(text));
  }

  function render() {
    $("#status").textContent = "live · " + new Date(snap.time).toLocaleTimeString();
    $("#status").className = "status live";
    $("#pods-total").textContent = snap.summary ? snap.summary.total + " pods, " + snap.summary.stuck + " stuck" : "";
    renderPipeline(snap.stages || []);
    loadHistory(false);
    renderNodes(snap.nodes || []);
    syncControls();
    $("#errors").textContent = (snap.errors || []).join("; ");
    if (snap.podsVersion !== podsVersion) { podsVersion = snap.podsVersion; loadPods(true); }
    loadJourney();
  }

  // apply merges a delta into the snapshot: only what changed comes.
  function apply(d) {
    snap.time = d.time;
    if (d.stages) snap.stages = d.stages;
    if (d.nodes || d.gone) {
      const by = new Map(snap.nodes.map((n) => [n.name, n]));
      for (const n of d.nodes || []) by.set(n.name, n);
      for (const g of d.gone || []) by.delete(g);
      snap.nodes = [...by.values()].sort((a, b) => a.name < b.name ? -1 : 1);
    }
    if (d.marks) snap.marks = (snap.marks || []).concat(d.marks).slice(-200);
    if (d.summary) snap.summary = d.summary;
    if (d.podsTotal !== undefined) snap.podsTotal = d.podsTotal;
    if (d.podsVersion) snap.podsVersion = d.podsVersion;
    if (d.errors || d.noErrors) snap.errors = d.errors || [];
  }

  function connect() {
    const es = new EventSource("/api/events");
    es.addEventListener("snapshot", (m) => { snap = JSON.parse(m.data); render(); });
    es.addEventListener("delta", (m) => { if (snap) { apply(JSON.parse(m.data)); render(); } });
    es.onerror = () => { $("#status").textContent = "disconnected; retrying"; $("#status").className = "status down"; };
  }
  let typing = null;
  $("#filter").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => setState({ q: $("#filter").value.trim() }), 200);
  });
  for (const [id, key] of [["#ns", "ns"], ["#phase", "phase"], ["#reason", "reason"], ["#stage", "stage"]]) {
    $(id).addEventListener("change", () => setState({ [key]: $(id).value }));
  }
  $("#range").replaceChildren(...RANGES.map((r) => { const o = el("option", "", "last " + r); o.value = r; return o; }));
  $("#range").addEventListener("change", () => {
    state.range = $("#range").value === "15m" ? "" : $("#range").value;
    writeHash();
    loadHistory(true);
  });
  $("#stuck").addEventListener("change", () => setState({ stuck: $("#stuck").checked ? "1" : "" }));
  $("#node-filter").addEventListener("click", () => setState({ node: "" }));
  $("#prev").addEventListener("click", () => setState({ page: Math.max(0, state.page - 1) }, true));
  $("#next").addEventListener("click", () => setState({ page: state.page + 1 }, true));
  window.addEventListener("hashchange", () => { readHash(); syncControls(); lastJourney = ""; loadPods(true); loadJourney(); loadHistory(true); });
  readHash();
  syncControls();
  loadPods(true);
  loadJourney();
  loadHistory(true);
  connect();
})();
