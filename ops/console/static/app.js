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
  const state = { q: "", ns: "", stage: "", phase: "", reason: "", node: "", stuck: "", page: 0, pod: "" };
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
  // renderTimeline draws the last three minutes on a fixed time axis:
  // a line breaks where no poll saw the pipeline (no page was open), and
  // each mark is at the time it happened.
  function renderTimeline(points, marks) {
    const svg = $("#timeline");
    svg.replaceChildren();
    if (!points.length) return;
    const t1 = Date.parse(points[points.length - 1].time), t0 = t1 - 180e3;
    const x = (t) => ((Date.parse(t) - t0) / 180e3 * 1000).toFixed(1);
    const shown = points.filter((p) => Date.parse(p.time) >= t0);
    const max = Math.max(1, ...shown.map((p) => Math.max(p.redelivered, p.ackPending, p.pending)));
    const y = (v) => (76 - v / max * 72).toFixed(1);
    for (let s = 30; s < 180; s += 30) {
      const g = document.createElementNS(SVG, "line");
      g.setAttribute("class", "grid");
      g.setAttribute("x1", s / 180 * 1000); g.setAttribute("x2", s / 180 * 1000);
      g.setAttribute("y1", "0"); g.setAttribute("y2", "80");
      svg.append(g);
    }
    // Runs of points no more than 5 s apart: a gap is drawn as a gap.
    const runs = [];
    for (const p of shown) {
      const last = runs.length && runs[runs.length - 1];
      if (last && Date.parse(p.time) - Date.parse(last[last.length - 1].time) <= 5000) last.push(p);
      else runs.push([p]);
    }
    for (const run of runs) {
      for (const [cls, f] of [["pending", (p) => p.pending], ["ack", (p) => p.ackPending], ["redelivered", (p) => p.redelivered]]) {
        const line = document.createElementNS(SVG, "polyline");
        line.setAttribute("class", cls);
        line.setAttribute("points", run.map((p) => x(p.time) + "," + y(f(p))).join(" "));
        svg.append(line);
      }
    }
    const inRange = marks.filter((m) => Date.parse(m.time) >= t0);
    for (const m of inRange) {
      const l = document.createElementNS(SVG, "line");
      l.setAttribute("class", "m-" + m.kind);
      l.setAttribute("x1", x(m.time)); l.setAttribute("x2", x(m.time));
      l.setAttribute("y1", "0"); l.setAttribute("y2", "80");
      const title = document.createElementNS(SVG, "title");
      title.textContent = m.kind + " " + m.process + " at " + new Date(m.time).toLocaleTimeString();
      l.append(title);
      svg.append(l);
    }
    const clock = (t) => new Date(t).toLocaleTimeString();
    $("#axis").textContent = clock(t0) + " · gridlines every 30 s · " + clock(t1) + "   (top of the scale: " + max + ")";
    $("#marks").textContent = inRange.slice(-6).map((m) => new Date(m.time).toLocaleTimeString() + " " + m.process + " " + m.kind).join(" · ");
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
    renderTimeline(snap.timeline || [], snap.marks || []);
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
    if (d.points) snap.timeline = (snap.timeline || []).concat(d.points).slice(-180);
    if (d.marks) snap.marks = (snap.marks || []).concat(d.marks);
    if (snap.timeline.length) snap.marks = (snap.marks || []).filter((m) => Date.parse(m.time) >= Date.parse(snap.timeline[0].time));
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
  $("#stuck").addEventListener("change", () => setState({ stuck: $("#stuck").checked ? "1" : "" }));
  $("#node-filter").addEventListener("click", () => setState({ node: "" }));
  $("#prev").addEventListener("click", () => setState({ page: Math.max(0, state.page - 1) }, true));
  $("#next").addEventListener("click", () => setState({ page: state.page + 1 }, true));
  window.addEventListener("hashchange", () => { readHash(); syncControls(); lastJourney = ""; loadPods(true); loadJourney(); });
  readHash();
  syncControls();
  loadPods(true);
  loadJourney();
  connect();
})();
