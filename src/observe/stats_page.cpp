#include "observe/stats_page.hpp"

namespace sluice::observe {

const std::string_view stats_page_html = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice: live rate limits</title>
<style>
  :root { --bg:#0f1419; --panel:#171d24; --text:#e6e6e6; --dim:#8a96a3; --ok:#4caf50; --bad:#ef5350; --warn:#ffb300; --line:#263140; }
  * { box-sizing: border-box; }
  body { margin:0; font:13px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; background:var(--bg); color:var(--text); }
  header { display:flex; gap:24px; align-items:baseline; padding:16px 24px; border-bottom:1px solid var(--line); flex-wrap:wrap; }
  header h1 { font-size:18px; margin:0; letter-spacing:.5px; }
  .pill { padding:2px 10px; border-radius:999px; background:var(--panel); color:var(--dim); }
  .pill b { color:var(--text); font-weight:600; }
  #store.up b { color:var(--ok); } #store.down b { color:var(--bad); }
  #conn-state.stale { color:var(--bad); }
  main { padding:16px 24px; }
  /* Fits 1280 px: numbers stay on one line, the limits and clients columns wrap; a narrower
     window scrolls the table, never the page. */
  .table { overflow-x:auto; }
  table { width:100%; border-collapse:collapse; background:var(--panel); border-radius:8px; }
  th, td { padding:8px 8px; text-align:right; border-bottom:1px solid var(--line); white-space:nowrap; vertical-align:top; }
  th { color:var(--dim); font-weight:500; font-size:11px; text-transform:uppercase; letter-spacing:.4px; white-space:normal; }
  th:first-child, td:first-child { text-align:left; }
  td.route, td.top { font-family:ui-monospace, SFMono-Regular, Menlo, monospace; }
  td.route.none { font-family:inherit; color:var(--dim); font-style:italic; }
  td.top, td.limits { text-align:left; font-size:12px; color:var(--dim); white-space:normal; min-width:150px; max-width:300px; }
  td.top a { color:var(--text); }
  td.limits div { margin:1px 0; }
  td.limits b { color:var(--text); font-weight:600; }
  td.limits .refusing b, td.limits .refusing .n { color:var(--bad); }
  td.pct.hot { color:var(--bad); font-weight:600; } td.pct.warm { color:var(--warn); }
  .bar { display:inline-block; height:8px; border-radius:4px; background:var(--bad); vertical-align:middle; margin-left:8px; }
  canvas { vertical-align:middle; }
  p.note { color:var(--dim); font-size:12px; }
  #empty { color:var(--dim); padding:24px; text-align:center; }
</style>
</head>
<body>
<header>
  <h1>sluice</h1>
  <span class="pill">uptime <b id="uptime">-</b></span>
  <span class="pill">connections <b id="connections">-</b></span>
  <span class="pill" title="requests leaky buckets hold back now">waiting <b id="waiting">-</b></span>
  <span class="pill" id="store">store <b>-</b></span>
  <span class="pill" id="conn-state">updated <b id="updated">never</b></span>
</header>
<main>
  <div class="table"><table>
    <thead>
      <tr><th>route</th><th>requests/s</th><th>forwarded/s</th><th>limited/s</th><th>limited %</th><th title="held back by a leaky bucket, then forwarded">delayed/s</th><th title="skipped every limit of the route (exempt)">exempt/s</th><th>shadow/s</th><th>store errors/s</th><th>total requests</th><th>limited % (last 2 min)</th><th title="each limit of the route, its settings, and how many requests it refused per second; the one refusing most in red">limits: refused/s</th><th title="the clients limited most in the last minute; a client links to its /limits look-up">most limited clients (last min): quota left</th></tr>
    </thead>
    <tbody id="routes"></tbody>
  </table></div>
  <div id="empty">waiting for the first figures...</div>
  <p class="note">Rates are per second over the last poll (every second), from the cumulative counters at
  <a href="stats.json" style="color:inherit">/stats.json</a>; Prometheus scrapes <a href="metrics" style="color:inherit">/metrics</a>.
  <i>(no route)</i> counts requests that matched no route (answered 404). A request refused by two limits
  counts for each. "quota left" is each limit's remaining quota for that client now (from
  <a href="limits" style="color:inherit">/limits</a>, every 5 s; not shown when /limits needs the admin token).</p>
</main>
<script>
"use strict";
const POLL_MS = 1000, HISTORY = 120;
let previous = null;            // last /stats.json reading
const history = new Map();      // route -> [limited %, ...]
const quota = new Map();        // "route client" -> "burst 0, minute 12" (from /limits)
let quotaRefused = false;       // /limits answered 401/403: it needs the admin token
let quotaAt = 0;

function fmtRate(x) { return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2); }
function fmtUptime(s) {
  s = Math.floor(s); const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + m + "m " + (s % 60) + "s";
}
function cell(text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; return td; }
function lookup(route, client) { return "limits?route=" + encodeURIComponent(route) + "&client=" + encodeURIComponent(client); }

// Each limit: its name, settings and refusals per second; the one refusing most stands out.
function limitsCell(r) {
  const td = cell("", "limits");
  if (!r.limits.length) { td.textContent = r.route === "-" ? "" : "none"; return td; }
  const most = Math.max(0, ...r.limits.map(l => l.lps));
  for (const l of r.limits) {
    const div = document.createElement("div");
    if (most > 0 && l.lps === most) div.className = "refusing";
    const name = document.createElement("b"); name.textContent = l.name; div.appendChild(name);
    div.appendChild(document.createTextNode(" " + l.setting + ": "));
    const n = document.createElement("span"); n.className = "n"; n.textContent = fmtRate(l.lps) + "/s"; div.appendChild(n);
    if (l.bps > 0) div.appendChild(document.createTextNode(" (banned " + fmtRate(l.bps) + "/s)"));
    td.appendChild(div);
  }
  return td;
}

function topCell(r) {
  const td = cell("", "top");
  if (!r.top.length) { td.textContent = "-"; return td; }
  r.top.forEach(([client, n], i) => {
    if (i) td.appendChild(document.createTextNode(", "));
    const a = document.createElement("a"); a.href = lookup(r.route, client); a.textContent = client; td.appendChild(a);
    const left = quota.get(r.route + " " + client);
    td.appendChild(document.createTextNode(" (" + n + ")" + (left ? " left: " + left : "")));
  });
  return td;
}

// Every 5 s: what the top clients (three per route) have left, from /limits. Nothing is
// asked once /limits turns out to need the admin token.
async function refreshQuota(routes) {
  if (quotaRefused || Date.now() - quotaAt < 5000) return;
  quotaAt = Date.now();
  for (const r of routes) {
    if (r.route === "-") continue;
    for (const [client] of (r.top_limited || []).slice(0, 3)) {
      try {
        const res = await fetch(lookup(r.route, client), { cache: "no-store" });
        if (res.status === 401 || res.status === 403) { quotaRefused = true; return; }
        if (!res.ok) continue;
        const state = await res.json();
        const parts = state.limits.filter(l => l.applies).map(l => l.name + " " + l.remaining);
        quota.set(r.route + " " + client, parts.join(", "));
      } catch (e) { /* the next round tries again */ }
    }
  }
}

function spark(values) {
  const c = document.createElement("canvas"); c.width = 110; c.height = 24;
  const g = c.getContext("2d"); g.strokeStyle = "#ef5350"; g.lineWidth = 1.5; g.beginPath();
  values.forEach((v, i) => {
    const x = (i / (HISTORY - 1)) * (c.width - 2) + 1, y = c.height - 2 - (v / 100) * (c.height - 4);
    if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
  });
  g.stroke(); return c;
}

function render(now, rates) {
  document.getElementById("uptime").textContent = fmtUptime(now.uptime_seconds);
  document.getElementById("connections").textContent = now.connections_active;
  document.getElementById("waiting").textContent = now.requests_waiting;
  const store = document.getElementById("store");
  store.className = "pill " + (now.store_up ? "up" : "down");
  store.querySelector("b").textContent = now.store_up ? "up" : "down";
  document.getElementById("updated").textContent = new Date().toLocaleTimeString();
  document.getElementById("conn-state").className = "pill";
  const body = document.getElementById("routes");
  body.replaceChildren();
  for (const r of rates) {
    const tr = document.createElement("tr");
    tr.dataset.route = r.route;
    const name = cell(r.route === "-" ? "(no route)" : r.route, r.route === "-" ? "route none" : "route");
    if (r.route === "-") name.title = "requests that matched no route (answered 404)";
    tr.appendChild(name);
    tr.appendChild(cell(fmtRate(r.rps), "rps"));
    tr.appendChild(cell(fmtRate(r.fps), "fps"));
    tr.appendChild(cell(fmtRate(r.lps), "lps"));
    const pct = cell(r.pct.toFixed(1) + " %", "pct" + (r.pct >= 50 ? " hot" : r.pct >= 10 ? " warm" : ""));
    const bar = document.createElement("span"); bar.className = "bar"; bar.style.width = Math.round(r.pct * 0.6) + "px";
    pct.appendChild(bar); tr.appendChild(pct);
    tr.appendChild(cell(fmtRate(r.dps), "dps"));
    tr.appendChild(cell(fmtRate(r.xps), "xps"));
    tr.appendChild(cell(fmtRate(r.sps), "sps"));
    tr.appendChild(cell(fmtRate(r.eps), "eps"));
    tr.appendChild(cell(String(r.total), "total"));
    const sparkCell = cell(""); sparkCell.appendChild(spark(history.get(r.route) || [])); tr.appendChild(sparkCell);
    tr.appendChild(limitsCell(r));
    tr.appendChild(topCell(r));
    body.appendChild(tr);
  }
  document.getElementById("empty").style.display = rates.length ? "none" : "block";
  if (!rates.length) document.getElementById("empty").textContent = "no traffic yet";
}

async function poll() {
  try {
    const res = await fetch("stats.json", { cache: "no-store" });
    const now = await res.json();
    const rates = [];
    for (const r of now.routes) {
      if (r.route === "-" && r.requests === 0) continue;
      const before = previous && previous.routes.find(p => p.route === r.route);
      const dt = previous ? Math.max(0.001, now.uptime_seconds - previous.uptime_seconds) : 1;
      const d = k => before ? Math.max(0, r[k] - before[k]) / dt : 0;
      const rps = d("requests"), lps = d("limited");
      const pct = rps > 0 ? Math.min(100, 100 * lps / rps) : 0;
      const h = history.get(r.route) || []; h.push(pct); if (h.length > HISTORY) h.shift(); history.set(r.route, h);
      const limits = (r.limits || []).map(l => {
        const was = before && (before.limits || []).find(b => b.name === l.name);
        const refused = x => (x.limited || 0) + (x.banned || 0);  // a ban's refusals are the limit's too
        return { name: l.name, setting: l.setting, lps: was ? Math.max(0, refused(l) - refused(was)) / dt : 0,
                 bps: was ? Math.max(0, (l.banned || 0) - (was.banned || 0)) / dt : 0 };
      });
      rates.push({ route: r.route, rps, fps: d("forwarded"), lps, pct, sps: d("shadow_limited"), eps: d("store_errors"), dps: d("delayed"), xps: d("exempt"),
                   total: r.requests, top: r.top_limited || [], limits });
    }
    previous = now;
    render(now, rates);
    refreshQuota(now.routes);
  } catch (e) {
    document.getElementById("conn-state").className = "pill stale";
  } finally {
    setTimeout(poll, POLL_MS);
  }
}
poll();
</script>
</body>
</html>
)html";

}  // namespace sluice::observe
