// fleetbus dashboard: plain JS, no build step. Pages are hash routes (#fleet, #rules,
// #drift); data comes from /api/* (polled) and /api/events (server-sent drift events).
"use strict";

const CLUSTER_STATES = ["Ready", "ApiUnreachable", "Disconnected", "Conflict", "Left"];
const CELL_STATES = ["Synced", "Waiting", "Error", "Conflict", "Invalid", "Suspended", "NotSelected"];
const CELL_TEXT = { Synced: "OK", Waiting: "WAIT", Error: "ERR", Conflict: "CONF", Invalid: "INV", Suspended: "SUSP", NotSelected: "—" };
const CARD_W = 236, CARD_H = 104, GAP = 8;
const FEED_MAX = 200;

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const st = (word) => `<span class="st st-${esc(word)}">${esc(word)}</span>`;

const ui = {
  config: { allowActions: false },
  clusters: [], counts: {}, total: 0, unverified: [],
  stateFilter: new Set(),
  rules: null,
  feed: [],
  page: "fleet",
};

function age(secs) {
  if (secs == null) return "?";
  if (secs < 120) return `${secs}s`;
  if (secs < 7200) return `${Math.floor(secs / 60)}m`;
  if (secs < 172800) return `${Math.floor(secs / 3600)}h`;
  return `${Math.floor(secs / 86400)}d`;
}
const since = (iso) => (iso ? age(Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000))) : "?");
const clock = (iso) => (iso ? new Date(iso).toLocaleTimeString([], { hour12: false }) : "");
const objName = (o) => (o.namespace ? `${o.namespace}/${o.name}` : o.name);
const objArg = (o) => (o.namespace ? `${o.kind}/${o.namespace}/${o.name}` : `${o.kind}/${o.name}`);

async function getJSON(url) {
  const res = await fetch(url, { headers: { Accept: "application/json" } });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || `${res.status} ${res.statusText}`);
  return body;
}

async function postJSON(url, data) {
  const res = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(data) });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || `${res.status} ${res.statusText}`);
  return body;
}

// ---------- theme ----------
function applyTheme(t) {
  document.documentElement.dataset.theme = t;
}
function initTheme() {
  const saved = localStorage.getItem("fleetbus-theme");
  const prefersLight = window.matchMedia && window.matchMedia("(prefers-color-scheme: light)").matches;
  applyTheme(saved || (prefersLight ? "light" : "dark"));
  $("theme").addEventListener("click", () => {
    const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
    localStorage.setItem("fleetbus-theme", next);
    applyTheme(next);
  });
}

// ---------- routing ----------
function route() {
  const page = (location.hash.replace("#", "") || "fleet").split("?")[0];
  ui.page = ["fleet", "rules", "drift"].includes(page) ? page : "fleet";
  for (const p of ["fleet", "rules", "drift"]) $(`page-${p}`).hidden = p !== ui.page;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === ui.page);
  document.body.dataset.page = ui.page;
  // A drawer belongs to the page that opened it.
  $("detail").hidden = true;
  if (ui.page === "fleet") renderGrid();
  if (ui.page === "rules") refreshRules();
  if (ui.page === "drift") refreshDrifted();
}

// ---------- header summary ----------
function renderSummary() {
  $("summary").innerHTML = CLUSTER_STATES.filter((s) => ui.counts[s]).map((s) =>
    `<span class="chip" data-state="${s}"><span class="dot st-${s}"></span>${s} <b>${ui.counts[s]}</b></span>`).join("")
    + `<span class="count">${ui.total} clusters</span>`
    // Records that do not verify against the fleet root: left out, and said.
    + (ui.unverified.length ? `<span class="chip" id="unverified" title="${esc(ui.unverified.map((u) => `${u.key}: ${u.why}`).join("\n"))}">${ui.unverified.length} unverified record(s) left out</span>` : "");
}

// ---------- fleet ----------
async function refreshClusters() {
  try {
    const data = await getJSON("/api/clusters");
    ui.clusters = data.clusters; ui.counts = data.counts; ui.total = data.total;
    ui.unverified = data.unverified || [];
    document.body.dataset.clusters = String(data.total);
    renderSummary();
    renderStateChips();
    if (ui.page === "fleet") renderGrid();
  } catch (e) {
    $("f-count").textContent = `cannot read clusters: ${e.message}`;
  }
}

function renderStateChips() {
  $("f-states").innerHTML = CLUSTER_STATES.map((s) =>
    `<span class="chip${ui.stateFilter.has(s) ? " on" : ""}" data-state="${s}"><span class="dot st-${s}"></span>${s} <b>${ui.counts[s] || 0}</b></span>`).join("");
}

function labelMatch(labels, f) {
  if (!f) return true;
  const [k, ...rest] = f.split("=");
  if (!(k in labels)) return false;
  return rest.length === 0 || labels[k] === rest.join("=");
}

function filtered() {
  const name = $("f-name").value.trim();
  const label = $("f-label").value.trim();
  return ui.clusters.filter((c) =>
    (!ui.stateFilter.size || ui.stateFilter.has(c.state)) &&
    (!name || c.name.includes(name)) && labelMatch(c.labels || {}, label));
}

function cardHTML(c) {
  const labels = Object.entries(c.labels || {}).map(([k, v]) => `<span class="lbl">${esc(k)}=${esc(v)}</span>`).join("");
  const where = [c.region, c.distribution].filter(Boolean).join(" · ") || "no region";
  return `<div class="head"><span class="name" title="${esc(c.name)}">${esc(c.name)}</span>${st(c.state)}</div>` +
    `<div class="meta">♥ ${age(c.heartbeatAgeSeconds)} · agent ${esc(c.agentVersion)}${c.kubernetesVersion ? ` · k8s ${esc(c.kubernetesVersion)}` : ""}</div>` +
    `<div class="meta">${esc(where)}</div><div class="labels">${labels}</div>`;
}

// Only the rows in view (plus a margin) exist in the DOM; a card's position depends
// only on its index, so new data never moves what is on screen. Cards are kept per
// cluster and rewritten only when their text changes (no flicker, stable targets).
const cards = new Map();
function renderGrid() {
  const grid = $("grid"), spacer = $("grid-spacer");
  const list = filtered();
  $("f-count").textContent = `${list.length} of ${ui.total} shown`;
  const width = grid.clientWidth - 28;
  const cols = Math.max(1, Math.floor((width + GAP) / (CARD_W + GAP)));
  const cardW = Math.floor((width - (cols - 1) * GAP) / cols);
  const rows = Math.ceil(list.length / cols);
  spacer.style.height = `${rows * (CARD_H + GAP)}px`;
  const first = Math.max(0, Math.floor(grid.scrollTop / (CARD_H + GAP)) - 2);
  const last = Math.min(rows, Math.ceil((grid.scrollTop + grid.clientHeight) / (CARD_H + GAP)) + 2);
  const seen = new Set();
  for (let i = first * cols; i < Math.min(list.length, last * cols); i++) {
    const c = list[i];
    seen.add(c.name);
    let el = cards.get(c.name);
    if (!el) {
      el = document.createElement("div");
      el.dataset.cluster = c.name;
      cards.set(c.name, el);
      spacer.appendChild(el);
    }
    const cls = `card st-b-${c.state}`;
    if (el.className !== cls) el.className = cls;
    el.dataset.state = c.state;
    const html = cardHTML(c);
    if (el._html !== html) { el.innerHTML = html; el._html = html; }
    el.style.left = `${(i % cols) * (cardW + GAP)}px`;
    el.style.top = `${Math.floor(i / cols) * (CARD_H + GAP)}px`;
    el.style.width = `${cardW}px`;
  }
  for (const [name, el] of cards) {
    if (!seen.has(name)) { el.remove(); cards.delete(name); }
  }
  let empty = spacer.querySelector(".empty-state");
  if (!list.length) {
    if (!empty) { empty = document.createElement("div"); empty.className = "empty-state"; spacer.appendChild(empty); }
    empty.textContent = ui.total ? "no cluster matches the filters" : "no cluster in the registry yet";
  } else if (empty) empty.remove();
}

async function showCluster(name) {
  const c = ui.clusters.find((x) => x.name === name);
  if (!c) return;
  const labels = Object.entries(c.labels || {}).map(([k, v]) => `<span class="lbl">${esc(k)}=${esc(v)}</span>`).join(" ") || "<span class='muted'>none</span>";
  let html = `<h3>${esc(c.name)} ${st(c.state)}</h3><dl>` +
    `<dt>cluster ID</dt><dd class="mono">${esc(c.clusterId)}</dd>` +
    `<dt>heartbeat</dt><dd>${age(c.heartbeatAgeSeconds)} ago</dd>` +
    `<dt>agent</dt><dd>${esc(c.agentVersion)}</dd>` +
    `<dt>Kubernetes</dt><dd>${esc(c.kubernetesVersion || "?")}</dd>` +
    `<dt>distribution</dt><dd>${esc(c.distribution || "?")} ${esc(c.provider || "")}</dd>` +
    `<dt>region</dt><dd>${esc(c.region || "?")}</dd>` +
    `<dt>API server</dt><dd>${c.apiReachable ? "reachable" : `unreachable: ${esc(c.apiMessage)}`}</dd>` +
    `<dt>labels</dt><dd>${labels}</dd></dl>` +
    `<h4>Sync progress</h4><div id="progress" class="muted">asking the agent…</div>`;
  if (ui.config.allowActions) {
    html += `<h4>Relabel</h4><form id="relabel" class="form"><input name="labels" placeholder="env=prod tier-" spellcheck="false">` +
      `<label><input type="checkbox" name="overwrite"> overwrite</label><button class="primary">Apply</button></form><div id="relabel-msg" class="msg"></div>`;
  }
  openDetail(html);
  if (ui.config.allowActions) {
    $("relabel").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const f = ev.target;
      const labels = f.labels.value.split(/[\s,]+/).filter(Boolean);
      try {
        const r = await postJSON("/api/actions/label", { cluster: name, labels, overwrite: f.overwrite.checked });
        msg("relabel-msg", `labels now: ${Object.entries(r.labels).map(([k, v]) => `${k}=${v}`).join(", ")}`, true);
        refreshClusters();
      } catch (e) { msg("relabel-msg", e.message, false); }
    });
  }
  try {
    const p = await getJSON(`/api/progress?cluster=${encodeURIComponent(name)}`);
    const el = $("progress");
    if (!el) return;
    if (p.error) { el.textContent = p.error; return; }
    const g = p.progress, pct = g.copiesWanted ? Math.floor((100 * g.copiesInSync) / g.copiesWanted) : 100;
    el.className = "";
    el.innerHTML = `${p.inSync ? st("Synced") : st("Waiting")} ${g.copiesInSync}/${g.copiesWanted} copies (${pct}%)` +
      `<div class="bar"><div id="progress-bar"></div></div>` +
      `<span class="muted">bus kinds read ${g.kindsReady}/${g.kinds} · errors ${g.errors} · conflicts ${g.conflicts}</span>`;
    $("progress-bar").style.width = `${pct}%`;
  } catch (e) {
    const el = $("progress");
    if (el) el.textContent = e.message;
  }
}

// ---------- rules ----------
async function refreshRules() {
  try {
    const rules = await getJSON("/api/rules");
    // Redraw only when something changed: a cell under the pointer stays put.
    if (JSON.stringify(rules) === JSON.stringify(ui.rules)) return;
    ui.rules = rules;
    renderRules();
  } catch (e) {
    $("r-note").textContent = `cannot read rule status: ${e.message}`;
  }
}

function renderRules() {
  const g = ui.rules;
  if (!g) return;
  const rf = $("r-rule").value.trim(), cf = $("r-cluster").value.trim();
  const rules = g.rules.filter((r) => r.includes(rf));
  const clusters = g.clusters.filter((c) => c.includes(cf));
  const cells = new Map(g.cells.map((c) => [`${c.rule}\u0000${c.cluster}`, c]));
  $("r-legend").innerHTML = CELL_STATES.map((s) => `<span class="chip"><span class="dot st-${s}"></span>${s}</span>`).join("");
  $("r-note").textContent = g.note || `${rules.length} rules × ${clusters.length} clusters` + (g.skipped ? ` · ${g.skipped} unreadable records skipped` : "");
  let html = `<tr><th class="rule">rule \\ cluster</th>${clusters.map((c) => `<th class="col" title="${esc(c)}">${esc(c)}</th>`).join("")}</tr>`;
  for (const r of rules) {
    html += `<tr><td class="rule mono" title="${esc(r)}">${esc(r)}</td>`;
    for (const c of clusters) {
      const cell = cells.get(`${r}\u0000${c}`);
      const pl = cell && placed(cell);
      html += cell
        ? `<td><span class="cell st-${esc(cell.state)}${pl ? (pl.here ? " placed" : " unplaced") : ""}" data-rule="${esc(r)}" data-cluster="${esc(c)}" data-state="${esc(cell.state)}"${pl ? ` data-placed="${pl.here}"` : ""} title="${esc(cell.state)}: ${esc(cell.message)}${pl ? ` · ${esc(pl.text)}` : ""}">${CELL_TEXT[cell.state] || esc(cell.state)}${pl && pl.here ? ` <span class="pl">◆${pl.here}</span>` : ""}</span></td>`
        : `<td><span class="cell none" title="no status reported">·</span></td>`;
    }
    html += "</tr>";
  }
  if (!rules.length) html += `<tr><td class="rule muted">${g.note ? "" : "no rule reports a status yet"}</td></tr>`;
  $("matrix").innerHTML = html;
}

// A placement rule's sink cell: how many of the rule's placement decisions
// chose this cluster (the grid marks chosen clusters), or null.
function placed(cell) {
  if (cell.placedHere == null) return null;
  const all = cell.placedHere + (cell.placedElsewhere || 0);
  return { here: cell.placedHere, text: `placement: chosen here for ${cell.placedHere} of ${all}` };
}

function showCell(rule, cluster) {
  const c = ui.rules && ui.rules.cells.find((x) => x.rule === rule && x.cluster === cluster);
  if (!c) return;
  const role = [c.source && "source", c.sink && "sink"].filter(Boolean).join(" + ") || "neither source nor sink";
  let html = `<h3>${esc(rule)} <span class="muted">on</span> ${esc(cluster)}</h3><p>${st(c.state)} <span class="muted">${esc(c.reason)}</span></p>` +
    `<p>${esc(c.message)}</p><dl>` +
    `<dt>role</dt><dd>${role}</dd><dt>in sync</dt><dd>${c.objectsSynced}</dd><dt>errors</dt><dd>${c.errors}</dd>` +
    `<dt>conflicts</dt><dd>${c.conflicts}</dd><dt>skipped</dt><dd>${c.skipped}</dd>` +
    (c.readyCopies != null ? `<dt>copies ready</dt><dd>${c.readyCopies}/${c.reportedCopies}</dd>` : "") +
    (placed(c) ? `<dt>placement</dt><dd>${esc(placed(c).text.replace("placement: ", ""))}</dd>` : "") +
    `<dt>generation</dt><dd>${esc(c.observedGeneration ?? "?")}</dd><dt>last sync</dt><dd>${c.lastSyncTime ? since(c.lastSyncTime) + " ago" : "never"}</dd>` +
    `<dt>reported</dt><dd>${since(c.updatedAt)} ago</dd></dl>`;
  const problems = c.problems || [];
  html += `<h4>Errors and conflicts (${c.problemsTotal || problems.length})</h4>`;
  html += problems.length
    ? problems.map((p) => `<div class="problem k-${esc(p.kind)}">${st(p.kind)} <span class="mono">${esc(p.object)}</span><div>${esc(p.message)}</div></div>`).join("")
    : `<p class="muted">none</p>`;
  if (c.problemsTotal > problems.length) html += `<p class="muted">and ${c.problemsTotal - problems.length} more</p>`;
  openDetail(html);
}

// ---------- drift ----------
function feedItem(d, fresh) {
  const e = d.event;
  const paths = (e.changes || []).map((c) => c.path).join(", ") || (e.type === "Deleted" ? "deleted" : "");
  const by = e.changedBy ? e.changedBy.manager : "unknown";
  return `<li class="event${fresh ? " fresh" : ""}" data-cluster="${esc(e.cluster)}" data-object="${esc(objArg(e.object))}" data-phase="${esc(e.phase)}">` +
    `<span class="mono muted">${clock(d.published || e.detectedAt)}</span><b>${esc(e.cluster)}</b>${st(e.phase)}` +
    `<div class="what"><div><span class="mono">${esc(e.object.kind)} ${esc(objName(e.object))}</span> <span class="muted">by ${esc(by)}${e.count > 1 ? ` ×${e.count}` : ""}</span></div>` +
    `<div class="paths mono">${esc(paths)}</div></div></li>`;
}

function addFeed(d) {
  ui.feed.unshift(d);
  if (ui.feed.length > FEED_MAX) ui.feed.length = FEED_MAX;
  const feed = $("feed");
  const empty = feed.querySelector(".empty");
  if (empty) empty.remove();
  // Keep what the reader looks at in place: if scrolled down, compensate the new row.
  const keep = feed.scrollTop > 0;
  feed.insertAdjacentHTML("afterbegin", feedItem(d, true));
  while (feed.children.length > FEED_MAX) feed.lastElementChild.remove();
  if (keep) feed.scrollTop += feed.firstElementChild.offsetHeight;
  $("feed-count").textContent = `${ui.feed.length} since ${clock(ui.feedSince)}`;
  if (ui.page === "drift") refreshDrifted();
}

async function refreshDrifted() {
  try {
    const data = await getJSON("/api/drift");
    const act = ui.config.allowActions;
    $("drifted-count").textContent = `${data.drifted.length}`;
    $("drifted").innerHTML = `<tr><th>cluster</th><th>rule</th><th>object</th><th>phase</th><th>action</th><th>changed by</th><th>age</th>${act ? "<th></th>" : ""}</tr>` +
      (data.drifted.length ? data.drifted.map((e) =>
        `<tr class="click" data-cluster="${esc(e.cluster)}" data-object="${esc(objArg(e.object))}">` +
        `<td><b>${esc(e.cluster)}</b></td><td class="mono">${esc(e.rule)}</td><td class="mono">${esc(e.object.kind)} ${esc(objName(e.object))}</td>` +
        `<td>${st(e.phase)}</td><td>${esc(e.action)}</td><td>${esc(e.changedBy ? e.changedBy.manager : "-")}</td><td>${since(e.detectedAt)}</td>` +
        (act ? `<td><button class="correct" data-cluster="${esc(e.cluster)}" data-kind="${esc(e.object.kind)}" data-namespace="${esc(e.object.namespace || "")}" data-name="${esc(e.object.name)}" data-rule="${esc(e.rule)}">Correct now</button></td>` : "") +
        `</tr>`).join("") : `<tr><td colspan="8" class="muted">no copy is drifted</td></tr>`);
  } catch (e) {
    $("drifted").innerHTML = `<tr><td class="muted">cannot read drift: ${esc(e.message)}</td></tr>`;
  }
}

async function showHistory(cluster, object) {
  $("hist-object").textContent = `${object} on ${cluster}`;
  $("history").innerHTML = `<tr><td class="muted">loading…</td></tr>`;
  try {
    const data = await getJSON(`/api/drift/history?object=${encodeURIComponent(object)}&cluster=${encodeURIComponent(cluster)}`);
    $("history").innerHTML = `<tr><th>time</th><th>phase</th><th>type</th><th>changed by</th><th>changes (desired → live)</th></tr>` +
      (data.events.length ? data.events.map(({ event: e, published }) =>
        `<tr><td class="mono">${esc(new Date(published || e.detectedAt).toLocaleString([], { hour12: false }))}</td><td>${st(e.phase)}</td><td>${esc(e.type)}</td>` +
        `<td>${esc(e.changedBy ? `${e.changedBy.manager} (${e.changedBy.operation})` : "-")}</td>` +
        `<td>${(e.changes || []).map((c) => `<div class="change">${esc(c.path)}: <span class="from">${esc(c.desired)}</span> → <span class="to">${esc(c.live)}</span></div>`).join("") || esc(e.error || "")}</td></tr>`).join("")
        : `<tr><td class="muted">no stored event</td></tr>`);
  } catch (e) {
    $("history").innerHTML = `<tr><td class="muted">${esc(e.message)}</td></tr>`;
  }
}

function connectEvents() {
  const conn = $("conn");
  const es = new EventSource("/api/events");
  es.addEventListener("ready", () => {
    conn.textContent = "live"; conn.className = "conn live";
    ui.feedSince = ui.feedSince || new Date().toISOString();
    document.body.dataset.feed = "live";
  });
  es.addEventListener("drift", (m) => { try { addFeed(JSON.parse(m.data)); } catch (_) { /* not ours */ } });
  es.addEventListener("failed", (m) => { conn.title = m.data; });
  es.addEventListener("error", () => {
    conn.textContent = "reconnecting"; conn.className = "conn down";
    document.body.dataset.feed = "down";
  });
}

// ---------- detail drawer ----------
function openDetail(html) {
  $("detail-body").innerHTML = html;
  $("detail").hidden = false;
}
function msg(id, text, ok) {
  const el = $(id);
  if (el) { el.textContent = text; el.className = `msg ${ok ? "ok" : "err"}`; }
}

// ---------- wiring ----------
function wire() {
  window.addEventListener("hashchange", route);
  $("detail-close").addEventListener("click", () => { $("detail").hidden = true; });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") $("detail").hidden = true; });
  $("grid").addEventListener("scroll", () => requestAnimationFrame(renderGrid), { passive: true });
  window.addEventListener("resize", () => requestAnimationFrame(renderGrid));
  for (const id of ["f-name", "f-label"]) $(id).addEventListener("input", () => { $("grid").scrollTop = 0; renderGrid(); });
  for (const id of ["r-rule", "r-cluster"]) $(id).addEventListener("input", renderRules);
  $("f-states").addEventListener("click", (e) => {
    const chip = e.target.closest(".chip");
    if (!chip) return;
    const s = chip.dataset.state;
    if (ui.stateFilter.has(s)) ui.stateFilter.delete(s); else ui.stateFilter.add(s);
    renderStateChips(); $("grid").scrollTop = 0; renderGrid();
  });
  $("grid").addEventListener("click", (e) => { const c = e.target.closest(".card"); if (c) showCluster(c.dataset.cluster); });
  $("matrix").addEventListener("click", (e) => {
    const c = e.target.closest(".cell:not(.none)");
    if (c) showCell(c.dataset.rule, c.dataset.cluster);
  });
  $("feed").addEventListener("click", (e) => { const li = e.target.closest("li.event"); if (li) showHistory(li.dataset.cluster, li.dataset.object); });
  $("drifted").addEventListener("click", async (e) => {
    const b = e.target.closest("button.correct");
    if (b) {
      e.stopPropagation();
      b.disabled = true; b.textContent = "correcting…";
      const d = b.dataset;
      try {
        const r = await postJSON("/api/actions/correct", { cluster: d.cluster, rule: d.rule, kind: d.kind, namespace: d.namespace || null, name: d.name });
        b.textContent = `${(r.corrected || []).length} corrected, ${(r.failed || []).length} failed`;
      } catch (err) { b.textContent = "failed"; b.title = err.message; }
      setTimeout(refreshDrifted, 500);
      return;
    }
    const tr = e.target.closest("tr.click");
    if (tr) showHistory(tr.dataset.cluster, tr.dataset.object);
  });
}

async function main() {
  initTheme();
  wire();
  try { ui.config = await getJSON("/api/config"); } catch (_) { /* read-only defaults */ }
  $("mode").textContent = ui.config.allowActions ? "actions allowed" : "read-only";
  route();
  connectEvents();
  await refreshClusters();
  setInterval(refreshClusters, 2000);
  setInterval(() => { if (ui.page === "rules") refreshRules(); }, 3000);
  setInterval(() => { if (ui.page === "drift") refreshDrifted(); }, 5000);
}

main();
