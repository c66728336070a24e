// Pulsarcast live dashboard: draws the snapshots of /dashboard/events (one a second).
// Vanilla JS and SVG, no build step, nothing loaded from elsewhere (docs/dashboard.md).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const base = location.pathname.replace(/\/?$/, "/");
const previous = new Map(); // "peer topic" -> {ts, delivered, latency_sum, latency_count, lag}

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

const short = (peer) => (peer ? "…" + peer.slice(-6) : "—");
const num = (v, digits) => (v === null || v === undefined ? "—" : Number(v).toFixed(digits));
const ms = (s) => (s === null || s === undefined ? "—" : (s * 1000).toFixed(1) + " ms");

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

function lagClass(lag) {
  if (lag === null || lag === undefined) return "lag-none";
  return lag < 0.5 ? "lag-ok" : lag < 2 ? "lag-warn" : "lag-bad";
}

// Rates and the lag window from this snapshot and the last one of the same node.
function derive(ts, peer, t) {
  const key = peer + " " + t.root_cid;
  const p = previous.get(key);
  let rate = null;
  let lag = p ? p.lag : null;
  if (p && ts > p.ts) {
    rate = (t.delivered - p.delivered) / (ts - p.ts);
    const n = t.latency_count - p.latency_count;
    if (n > 0) lag = (t.latency_sum - p.latency_sum) / n;
  } else if (!p && t.latency_count > 0) {
    lag = t.latency_sum / t.latency_count;
  }
  previous.set(key, { ts, delivered: t.delivered, latency_sum: t.latency_sum, latency_count: t.latency_count, lag });
  return { rate, lag };
}

function fastText(f) {
  if (!f) return "—";
  const parts = [];
  if (f.subscribed_fast) parts.push("fast");
  if (f.group && f.group.members) parts.push(f.group.members + " members, " + Object.keys(f.group.helpers).length + " helpers");
  if (f.joined.length) parts.push("in " + f.joined.length + " groups");
  if (Object.keys(f.helping).length) parts.push("helps " + Object.keys(f.helping).length);
  return parts.join("; ") || "—";
}

// One topic's tree as the nodes in view report it: edges parent -> node, and
// node -> child for children outside the view (a single node's dashboard).
function treeOf(entries) {
  const known = new Map(entries.map((e) => [e.peer, e]));
  const edges = new Map();
  const add = (parent, child) => edges.set(parent + ">" + child, [parent, child]);
  for (const e of entries) {
    if (e.t.parent) add(e.t.parent, e.peer);
    for (const c of e.t.children) if (!known.has(c)) add(e.peer, c);
  }
  const parentOf = new Map();
  for (const [p, c] of edges.values()) parentOf.set(c, p);
  const peers = new Set(known.keys());
  for (const [p, c] of edges.values()) { peers.add(p); peers.add(c); }
  const kids = new Map([...peers].map((p) => [p, []]));
  for (const [p, c] of edges.values()) kids.get(p).push(c);
  for (const list of kids.values()) list.sort();
  const roots = [...peers].filter((p) => !parentOf.has(p)).sort();
  const depth = new Map();
  const pos = new Map();
  let leaf = 0;
  const place = (p, d, seen) => {
    if (seen.has(p)) return;
    seen.add(p);
    depth.set(p, d);
    const cs = kids.get(p).filter((c) => !seen.has(c));
    if (!cs.length) { pos.set(p, leaf++); return; }
    for (const c of cs) place(c, d + 1, seen);
    const xs = cs.map((c) => pos.get(c)).filter((x) => x !== undefined);
    pos.set(p, xs.length ? (Math.min(...xs) + Math.max(...xs)) / 2 : leaf++);
  };
  const seen = new Set();
  for (const r of roots) place(r, 0, seen);
  for (const p of peers) if (!seen.has(p)) place(p, 0, seen); // a cycle in passing reports
  // A depth counts from the topic's root only when the view reaches it.
  const rooted = (p) => {
    let cur = p;
    for (let i = 0; i <= peers.size; i++) {
      const e = known.get(cur);
      if (!parentOf.has(cur)) return !!(e && (e.t.role === "root" || e.t.acting_root));
      cur = parentOf.get(cur);
    }
    return false;
  };
  return { known, edges: [...edges.values()], peers, depth, pos, leaves: leaf, rooted };
}

function drawTree(tree, derived) {
  const dx = 110, dy = 80, pad = 40;
  const maxDepth = Math.max(0, ...tree.depth.values());
  const svg = el("svg:svg", {
    class: "tree",
    width: Math.max(1, tree.leaves) * dx + pad,
    height: (maxDepth + 1) * dy + pad,
  });
  const at = (p) => [pad / 2 + tree.pos.get(p) * dx + dx / 2 - 20, pad / 2 + tree.depth.get(p) * dy + 20];
  for (const [p, c] of tree.edges) {
    const [x1, y1] = at(p), [x2, y2] = at(c);
    const line = el("svg:line", { x1, y1, x2, y2, "data-parent": p, "data-child": c });
    svg.appendChild(line);
    const child = tree.known.get(c);
    if (child && child.t.parent === p && child.t.parent_rtt !== null) {
      svg.appendChild(el("svg:text", { class: "rtt", x: (x1 + x2) / 2 + 4, y: (y1 + y2) / 2 }, ms(child.t.parent_rtt)));
    }
  }
  for (const p of tree.peers) {
    const [x, y] = at(p);
    const e = tree.known.get(p);
    const cls = e ? lagClass(derived.get(p).lag) : "lag-out";
    const g = el("svg:g", { "data-peer": p });
    const circle = el("svg:circle", { cx: x, cy: y, r: 14, class: cls });
    circle.appendChild(el("svg:title", {}, p + (e ? " (" + e.t.role + ")" : " (outside this view)")));
    g.appendChild(circle);
    g.appendChild(el("svg:text", { x, y: y + 28 }, short(p)));
    if (e && (e.t.role === "root" || e.t.acting_root)) g.appendChild(el("svg:text", { x, y: y + 4 }, "R"));
    svg.appendChild(g);
  }
  return svg;
}

const COLUMNS = [
  ["peer", "node"], ["role", "role"], ["depth", "depth"], ["parent", "parent"], ["children", "children"],
  ["rtt", "parent RTT"], ["rate", "deliveries/s"], ["latency", "mean latency"], ["lag", "lag"],
  ["delivered", "delivered"], ["repairs", "repairs"], ["retained", "retained"], ["bytes", "bytes"],
  ["fast", "fast groups"], ["head", "last event"],
];

function drawTopic(root, entries, ts) {
  const section = el("section", { class: "topic", "data-topic": root });
  const name = entries[0].t.name;
  const h2 = el("h2", {}, name + " ");
  h2.appendChild(el("span", { class: "cid" }, root));
  section.appendChild(h2);
  const derived = new Map(entries.map((e) => [e.peer, derive(ts, e.peer, e.t)]));
  const tree = treeOf(entries);
  section.appendChild(drawTree(tree, derived));
  const table = el("table", { class: "nodes" });
  const head = el("tr");
  for (const [, title] of COLUMNS) head.appendChild(el("th", {}, title));
  table.appendChild(head);
  for (const e of entries) {
    const t = e.t, d = derived.get(e.peer);
    const values = {
      peer: short(e.peer), role: t.role + (t.acting_root ? " (acting)" : ""),
      depth: tree.rooted(e.peer) ? String(tree.depth.get(e.peer)) : t.parent ? "≥ 1" : "—",
      parent: short(t.parent), children: t.children.map(short).join(" ") || "—",
      rtt: ms(t.parent_rtt), rate: num(d.rate, 1),
      latency: t.latency_count ? ms(t.latency_sum / t.latency_count) : "—", lag: ms(d.lag),
      delivered: String(t.delivered), repairs: t.repairs + " (" + t.recovered + " recovered)",
      retained: String(t.retained), bytes: bytes(t.retained_bytes), fast: fastText(t.fast),
      head: t.heads.length ? "…" + t.heads[0].slice(-12) : "—",
    };
    const tr = el("tr", { "data-peer": e.peer });
    for (const [key] of COLUMNS) {
      const td = el("td", { class: key }, values[key]);
      if (key === "head" && t.heads.length) td.title = t.heads[0];
      if (key === "lag") td.appendChild(el("span", { class: "dot " + lagClass(d.lag) }));
      tr.appendChild(td);
    }
    table.appendChild(tr);
  }
  section.appendChild(table);
  return section;
}

function render(doc) {
  document.getElementById("view").textContent = doc.cluster
    ? "cluster view: " + doc.nodes.length + " sidecars"
    : "this node";
  const nodes = document.getElementById("nodes");
  nodes.replaceChildren();
  const byTopic = new Map();
  for (const n of doc.nodes) {
    if (n.error) {
      nodes.appendChild(el("div", { class: "node error" }, n.api + ": " + n.error));
      continue;
    }
    const card = el("div", { class: "node", "data-peer": n.peer_id });
    card.appendChild(el("span", { class: "mono" }, n.peer_id));
    card.appendChild(document.createTextNode(
      " · sidecar " + n.version + " · Kubo " + (n.kubo_version || "?") + " · " + n.neighbours + " tree connections"));
    nodes.appendChild(card);
    for (const t of n.topics) {
      if (!byTopic.has(t.root_cid)) byTopic.set(t.root_cid, []);
      byTopic.get(t.root_cid).push({ peer: n.peer_id, t });
    }
  }
  const topics = document.getElementById("topics");
  const order = (root) => byTopic.get(root)[0].t.name + " " + root; // "news" before "meta-news"
  const roots = [...byTopic.keys()].sort((a, b) => (order(a) < order(b) ? -1 : 1));
  const sections = roots.map((root) => drawTopic(root, byTopic.get(root), doc.ts));
  if (!sections.length) sections.push(el("p", { class: "empty" }, "No topics yet."));
  topics.replaceChildren(...sections);
  document.body.dataset.updated = String(doc.ts);
}

function connect() {
  const conn = document.getElementById("conn");
  const source = new EventSource(base + "events");
  source.onopen = () => { conn.textContent = "live"; conn.className = "conn up"; };
  source.onerror = () => { conn.textContent = "reconnecting…"; conn.className = "conn down"; };
  source.onmessage = (m) => render(JSON.parse(m.data));
}

connect();
