#include "serve/dashboard_page.h"

namespace strata {

namespace {

// Sections: state graph, occupancy, requests, speculative decoding, handoffs (see the header).
constexpr std::string_view kPage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Strata dashboard</title>
<style>
  :root { --fg: #1d232a; --muted: #6b7480; --line: #dde2e8; --bg: #f6f7f9; --card: #fff; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 13px/1.4 "DejaVu Sans", system-ui, sans-serif; color: var(--fg); background: var(--bg); }
  header { position: sticky; top: 0; z-index: 1; display: flex; gap: 16px; align-items: baseline;
           padding: 10px 16px; background: #1d232a; color: #fff; }
  header h1 { margin: 0; font-size: 17px; }
  header .muted { color: #aab3bd; }
  #status.error { color: #ff8a80; }
  main { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 12px; padding: 12px; }
  section { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; min-width: 0; overflow-x: auto; }
  section[data-section="state-graph"], section.backend, section[data-section="router"] { grid-column: 1 / -1; }
  section.backend { display: grid; grid-template-columns: repeat(auto-fit, minmax(540px, 1fr)); gap: 10px; background: #eef1f4; }
  section.backend > h2, section.backend > p { grid-column: 1 / -1; margin: 0; }
  h2 { margin: 0 0 8px; font-size: 15px; }
  h3 { margin: 10px 0 4px; font-size: 13px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: right; padding: 2px 6px; border-bottom: 1px solid var(--line); white-space: nowrap; }
  th:first-child, td:first-child, td.left, th.left { text-align: left; }
  td.wrap { white-space: normal; text-align: left; }
  th { color: var(--muted); font-weight: normal; }
  .muted { color: var(--muted); }
  .error { color: #c62828; }
  .bar { width: 90px; height: 10px; background: #e8ebef; border-radius: 3px; overflow: hidden; display: inline-block; vertical-align: middle; }
  .fill { height: 100%; }
  .sw { display: inline-block; width: 9px; height: 9px; border-radius: 2px; margin-right: 5px; }
  .phase { padding: 0 6px; border-radius: 8px; color: #fff; font-size: 11px; }
  .phase-prefill { background: #f28e2b; } .phase-decode { background: #4e79a7; }
  .phase-verify { background: #59a14f; } .phase-waiting { background: #9aa3ad; }
  .stats span { margin-right: 14px; }
  svg text { font: 10px "DejaVu Sans Mono", monospace; fill: var(--fg); }
  details summary { cursor: pointer; color: var(--muted); margin-top: 6px; }
</style>
</head>
<body data-refresh-count="0">
<header>
  <h1>Strata</h1>
  <span id="model" class="muted">connecting...</span>
  <span id="role" class="muted"></span>
  <span class="muted">last updated <time id="last-updated">never</time></span>
  <span id="status" class="muted"></span>
</header>
<main id="root"></main>
<script>
'use strict';
const KEY = location.hash.match(/key=([^&]+)/);
const HEADERS = KEY ? {Authorization: 'Bearer ' + decodeURIComponent(KEY[1])} : {};
const COLORS = {window_kv: '#4e79a7', compressed_kv: '#f28e2b', index_keys: '#e15759',
  compressor_state: '#76b7b2', index_compressor_state: '#59a14f', engram_history: '#edc948',
  plain_kv: '#b07aa1', topk: '#ff9da7', candidates: '#9c755f', draft_state: '#bab0ac'};
const color = (kind) => COLORS[kind] || '#8c8c8c';
let refreshes = 0;

// DOM helpers: h(tag, {attr: value}, ...children); null attributes / children are skipped.
function build(e, attrs, kids) {
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
  for (const k of kids.flat(Infinity)) if (k !== undefined && k !== null) e.append(k instanceof Node ? k : String(k));
  return e;
}
const h = (tag, attrs, ...kids) => build(document.createElement(tag), attrs, kids);
const svg = (tag, attrs, ...kids) => build(document.createElementNS('http://www.w3.org/2000/svg', tag), attrs, kids);

// Numbers: exact integers with "," separators; human bytes beside them.
const int = (n) => (n === undefined || n === null || isNaN(n)) ? '-' : String(Math.round(Number(n))).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
function bytes(n) {
  if (n === undefined || isNaN(n)) return '-';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; ++i; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
}
const pct = (f) => isFinite(f) ? (100 * f).toFixed(1) + '%' : '-';
const bar = (frac, col) => h('span', {class: 'bar'}, h('div', {class: 'fill',
  style: 'width:' + (isFinite(frac) ? Math.max(0, Math.min(100, 100 * frac)) : 0).toFixed(1) + '%;background:' + col}));
const swatch = (kind) => h('span', {class: 'sw', style: 'background:' + color(kind)});
const table = (heads, rows, attrs) => h('table', attrs || {},
  h('thead', {}, h('tr', {}, heads.map((x) => h('th', {}, x)))), h('tbody', {}, rows));
const section = (name, title, ...kids) => h('section', {'data-section': name}, h('h2', {}, title), kids);
function layerList(ls) {  // [2,3,6,8] -> "L2-3,6,8"
  if (!ls || !ls.length) return '-';
  const parts = [];
  let a = ls[0], b = ls[0];
  for (const x of ls.slice(1).concat([null])) {
    if (x === b + 1) { b = x; continue; }
    parts.push(a === b ? String(a) : a + '-' + b);
    a = b = x;
  }
  return 'L' + parts.join(',');
}

// Prometheus text -> samples; a name is matched by its part after the prefix.
function parseProm(text) {
  const out = [];
  for (const line of (text || '').split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = line.match(/^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || '').matchAll(/([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1]] = l[2].replace(/\\n/g, '\n').replace(/\\(.)/g, '$1');
    out.push({name: m[1], labels, value: Number(m[3])});
  }
  return out;
}
class Metrics {
  constructor(text, prefix) {
    this.samples = parseProm(text).map((x) => Object.assign(x, {short: Metrics.short(x.name, prefix)}));
  }
  static short(name, prefix) {
    if (prefix && name.startsWith(prefix)) return name.slice(prefix.length);
    const i = name.lastIndexOf(':');
    return i >= 0 ? name.slice(i + 1) : name;
  }
  all(short) { return this.samples.filter((x) => x.short === short); }
  get(short, labels) {
    const x = this.all(short).find((s) => Object.entries(labels || {}).every(([k, v]) => s.labels[k] === v));
    return x ? x.value : undefined;
  }
  // Every series of a counter summed (e.g. over finish reasons); undefined without any.
  sum(short) {
    const xs = this.all(short);
    return xs.length ? xs.reduce((a, s) => a + s.value, 0) : undefined;
  }
}

// (a) The state graph: SVG lanes (one per owner: its layer -> the layers that read it),
// bytes per kind, the owner table.
function graphSvg(g) {
  let maxL = 0;
  for (const o of g.owners) maxL = Math.max(maxL, o.layer, ...o.consumer_layers);
  const labelW = 190, colW = Math.max(14, Math.min(40, (1100 - labelW) / (maxL + 2))), rowH = 14, top = 18;
  const x = (l) => labelW + (l + 1.5) * colW;  // l = -1: the request-global column
  const width = x(maxL) + colW, height = top + rowH * g.owners.length + 4;
  const kids = [svg('text', {x: x(-1) - 8, y: 11}, 'req')];
  for (let l = 0; l <= maxL; ++l) kids.push(svg('text', {x: x(l) - 6, y: 11}, 'L' + l));
  g.owners.forEach((o, i) => {
    const y = top + i * rowH + rowH / 2, c = color(o.kind), ls = [o.layer, ...o.consumer_layers];
    const dim = o.granularity === 'per_step' ? 0.45 : 1;
    kids.push(svg('g', {'data-owner': o.label, opacity: dim},
      svg('title', {}, o.label + ' -> ' + layerList(o.consumer_layers)),
      svg('text', {x: 4, y: y + 3}, o.label),
      svg('line', {x1: x(Math.min(...ls)), x2: x(Math.max(...ls)), y1: y, y2: y, stroke: c, 'stroke-width': 2}),
      o.consumer_layers.map((l) => svg('rect', {x: x(l) - 3, y: y - 3, width: 6, height: 6, fill: '#fff', stroke: c, 'stroke-width': 1.5})),
      svg('circle', {cx: x(o.layer), cy: y, r: 5, fill: c})));
  });
  return svg('svg', {width, height, viewBox: '0 0 ' + width + ' ' + height, role: 'img',
                     'aria-label': 'owners and consumer layers'}, kids);
}
function ownerSize(o) {
  if (o.granularity === 'per_step') return int(o.transient_bytes_per_query) + ' B / query token (transient)';
  if (o.fixed_bytes > 0 || o.granularity === 'ring' || o.granularity === 'fixed') return int(o.fixed_bytes) + ' B / request';
  return o.bytes_per_token.toFixed(2) + ' B / token';
}
function renderGraph(g) {
  if (!g) return section('state-graph', 'State graph', h('p', {class: 'muted'}, 'this runner has no state graph'));
  const maxTok = Math.max(1e-9, ...g.kinds.map((k) => k.bytes_per_token));
  const kinds = table(['kind', 'stage', 'owners', 'bytes / token', '', 'fixed bytes / request'], g.kinds.map((k) =>
    h('tr', {'data-kind': k.kind, 'data-stage': k.stage},
      h('td', {}, swatch(k.kind), k.kind), h('td', {}, k.stage),
      h('td', {'data-metric': 'owners'}, k.owners),
      h('td', {'data-metric': 'bytes_per_token'}, k.bytes_per_token.toFixed(2)),
      h('td', {}, bar(k.bytes_per_token / maxTok, color(k.kind))),
      h('td', {'data-metric': 'fixed_bytes_per_request'}, int(k.fixed_bytes_per_request)))));
  const owners = table(['owner', 'kind', 'stage', 'layer', 'granularity', 'consumers', 'row bytes', 'size'],
    g.owners.map((o) => h('tr', {'data-owner': o.label, 'data-kind': o.kind},
      h('td', {'data-field': 'label'}, swatch(o.kind), o.label), h('td', {class: 'left'}, o.kind),
      h('td', {class: 'left'}, o.stage), h('td', {}, o.layer < 0 ? 'request' : 'L' + o.layer),
      h('td', {class: 'left'}, o.granularity + (o.ratio > 1 ? ' /' + o.ratio : '') + (o.rows_fixed ? ' x' + o.rows_fixed : '')),
      h('td', {class: 'left', 'data-field': 'consumers'}, layerList(o.consumer_layers)),
      h('td', {'data-field': 'row_bytes'}, int(o.row_bytes)), h('td', {'data-field': 'size'}, ownerSize(o)))));
  return section('state-graph', 'State graph',
    h('p', {class: 'stats'}, h('span', {}, h('b', {'data-metric': 'owner_count'}, g.owners.length), ' owners'),
      h('span', {}, h('b', {'data-metric': 'graph_bytes_per_token'}, g.bytes_per_token.toFixed(2)), ' B per token'),
      h('span', {}, h('b', {'data-metric': 'graph_fixed_bytes_per_request'}, int(g.fixed_bytes_per_request)), ' B fixed per request'),
      h('span', {class: 'muted'}, 'circle: owner layer; squares: layers that read it')),
    h('div', {style: 'overflow-x:auto'}, graphSvg(g)),
    h('h3', {}, 'Bytes per kind (owners counted once)'), kinds,
    h('details', {}, h('summary', {}, 'Owners (' + g.owners.length + ')'), owners));
}

// (b) Occupancy per kind and tier, the prefix-cache tiers below the pool, prefix hits.
function renderOccupancy(m) {
  const rows = [], seen = new Set();
  for (const s of m.all('cache_used_bytes').concat(m.all('cache_capacity_bytes'))) {
    const key = s.labels.kind + '|' + s.labels.tier;
    if (seen.has(key)) continue;
    seen.add(key);
    const kt = {kind: s.labels.kind, tier: s.labels.tier};
    const used = m.get('cache_used_bytes', kt), cap = m.get('cache_capacity_bytes', kt);
    const at = {'data-kind': kt.kind, 'data-tier': kt.tier};
    rows.push(h('tr', at, h('td', {}, swatch(kt.kind), kt.kind), h('td', {class: 'left'}, kt.tier),
      h('td', Object.assign({'data-metric': 'cache_used_bytes', title: bytes(used)}, at), int(used)),
      h('td', Object.assign({'data-metric': 'cache_capacity_bytes', title: bytes(cap)}, at), int(cap)),
      h('td', {}, pct(used / cap)), h('td', {}, bar(used / cap, color(kt.kind)))));
  }
  const kids = [rows.length ? table(['kind', 'tier', 'used bytes', 'capacity bytes', 'used', ''], rows)
                            : h('p', {class: 'muted'}, 'no cache_used_bytes in /metrics')];
  const tiers = m.all('kv_tier_bytes');
  if (tiers.length) {
    kids.push(h('h3', {}, 'Prefix-cache tiers'), table(['tier', 'bytes', 'capacity bytes', 'objects', 'hits / lookups', ''],
      tiers.map((t) => {
        const l = {tier: t.labels.tier}, cap = m.get('kv_tier_capacity_bytes', l);
        const hits = m.get('kv_tier_hits_total', l), looks = m.get('kv_tier_lookups_total', l);
        const at = {'data-tier': l.tier};
        return h('tr', at, h('td', {}, l.tier), h('td', Object.assign({'data-metric': 'kv_tier_bytes'}, at), int(t.value)),
          h('td', Object.assign({'data-metric': 'kv_tier_capacity_bytes'}, at), int(cap)),
          h('td', Object.assign({'data-metric': 'kv_tier_objects'}, at), int(m.get('kv_tier_objects', l))),
          h('td', {}, int(hits) + ' / ' + int(looks)), h('td', {}, cap > 0 ? bar(t.value / cap, '#4e79a7') : ''));
      })));
  }
  const hits = m.get('prefix_cache_hits_total'), queries = m.get('prefix_cache_queries_total');
  kids.push(h('p', {class: 'stats'},
    h('span', {}, 'prefix-cache hits ', h('b', {'data-metric': 'prefix_cache_hits_total'}, int(hits)),
      ' / ', h('b', {'data-metric': 'prefix_cache_queries_total'}, int(queries)), ' tokens (', pct(hits / queries), ')'),
    h('span', {}, 'bytes per cached unit ', h('b', {'data-metric': 'prefix_cache_bytes_per_unit'}, int(m.get('prefix_cache_bytes_per_unit'))))));
  return section('occupancy', 'Occupancy', kids);
}

// (c) Running and waiting requests.
function renderRequests(r, m) {
  const list = (r && r.list) || [];
  const running = m.get('num_requests_running'), waiting = m.get('num_requests_waiting');
  const counts = {};
  for (const q of list) counts[q.phase] = (counts[q.phase] || 0) + 1;
  const rows = list.map((q) => h('tr', {'data-request-id': q.id, 'data-phase': q.phase, 'data-imported': q.imported ? 'true' : 'false'},
    h('td', {}, q.id), h('td', {class: 'left'}, h('span', {class: 'phase phase-' + q.phase}, q.phase)),
    h('td', {'data-field': 'computed_tokens'}, int(q.computed_tokens)),
    h('td', {'data-field': 'prompt_tokens'}, int(q.prompt_tokens)),
    h('td', {}, bar(q.computed_tokens / Math.max(1, q.prompt_tokens), '#f28e2b')),
    h('td', {'data-field': 'last_step_tokens'}, int(q.last_step_tokens)),
    h('td', {'data-field': 'generated_tokens'}, int(q.generated_tokens)),
    h('td', {'data-field': 'cached_tokens'}, int(q.cached_tokens)),
    h('td', {'data-field': 'imported'}, q.imported ? 'transfer' : '-'),
    h('td', {'data-field': 'age_s'}, Number(q.age_s).toFixed(1))));
  if (!rows.length) rows.push(h('tr', {}, h('td', {colspan: 10, class: 'muted'}, 'idle: no requests held')));
  return section('requests', 'Requests',
    h('p', {class: 'stats'},
      h('span', {}, 'running ', h('b', {'data-metric': 'num_requests_running'}, int(running !== undefined ? running : r && r.running))),
      h('span', {}, 'waiting ', h('b', {'data-metric': 'num_requests_waiting'}, int(waiting !== undefined ? waiting : r && r.waiting))),
      h('span', {}, 'finished ', h('b', {'data-metric': 'request_success_total'}, int(m.sum('request_success_total') || 0))),
      ['prefill', 'decode', 'verify', 'waiting'].map((p) =>
        h('span', {}, h('span', {class: 'phase phase-' + p}, p), ' ', h('b', {'data-phase-count': p}, counts[p] || 0)))),
    table(['id', 'phase', 'computed', 'prompt', 'prefill', 'last step', 'generated', 'cached', 'imported', 'age s'], rows));
}

// (d) Speculative decoding (vLLM's spec_decode_* counters).
function renderSpec(m) {
  const drafts = m.get('spec_decode_num_drafts'), draftTok = m.get('spec_decode_num_draft_tokens');
  const acc = m.get('spec_decode_num_accepted_tokens');
  const perPos = m.all('spec_decode_num_accepted_tokens_per_pos')
    .sort((a, b) => Number(a.labels.position) - Number(b.labels.position));
  const kids = [h('p', {class: 'stats'},
    h('span', {}, 'verify passes ', h('b', {'data-metric': 'spec_decode_num_drafts'}, int(drafts))),
    h('span', {}, 'accepted ', h('b', {'data-metric': 'spec_decode_num_accepted_tokens'}, int(acc)),
      ' / ', h('b', {'data-metric': 'spec_decode_num_draft_tokens'}, int(draftTok)), ' draft tokens'),
    h('span', {}, 'acceptance ', h('b', {'data-metric': 'spec_decode_acceptance_rate'}, pct(acc / draftTok))),
    h('span', {}, 'tokens per pass ', h('b', {'data-metric': 'spec_decode_mean_tokens_per_pass'},
      drafts > 0 ? (1 + acc / drafts).toFixed(2) : '-')))];
  if (perPos.length) {
    kids.push(h('h3', {}, 'Accepted per draft position'), table(['position', 'accepted', 'rate per pass', ''],
      perPos.map((s) => h('tr', {'data-position': s.labels.position}, h('td', {}, s.labels.position),
        h('td', {'data-metric': 'spec_decode_num_accepted_tokens_per_pos', 'data-position': s.labels.position}, int(s.value)),
        h('td', {}, pct(s.value / drafts)), h('td', {}, bar(s.value / drafts, '#59a14f'))))));
  } else if (!(draftTok > 0)) {
    kids.push(h('p', {class: 'muted'}, 'no drafts (speculative decoding off, or nothing decoded yet)'));
  }
  return section('speculative', 'Speculative decoding', kids);
}

// (e) Recent PD handoffs (newest first) and the transfer counters.
function renderHandoffs(hs, m) {
  const recent = ((hs && hs.recent) || []).slice().reverse();
  const counter = (name, label) => m.get(name) === undefined ? null :
    h('span', {}, label + ' ', h('b', {'data-metric': name}, int(m.get(name))));
  const rows = recent.map((x) => h('tr', {'data-handoff-seq': x.seq, 'data-direction': x.direction, 'data-ok': x.ok ? 'true' : 'false'},
    h('td', {}, x.seq), h('td', {class: 'left'}, new Date(x.unix_ms).toLocaleTimeString()),
    h('td', {class: 'left'}, x.direction), h('td', {'data-field': 'num_tokens'}, int(x.num_tokens)),
    h('td', {'data-field': 'payload_bytes'}, int(x.payload_bytes)),
    h('td', {class: 'wrap'}, Object.entries(x.bytes_per_kind || {}).map(([k, v]) =>
      h('span', {'data-kind': k, 'data-bytes': v, style: 'margin-right:8px'}, swatch(k), k + ' ' + int(v)))),
    h('td', {'data-field': 'latency_ms'}, Number(x.latency_ms).toFixed(1)),
    h('td', {class: x.ok ? 'left' : 'left error', 'data-field': 'status'}, x.ok ? 'ok' : x.error)));
  if (!rows.length) rows.push(h('tr', {}, h('td', {colspan: 8, class: 'muted'}, 'no handoffs (a colocated server, or none yet)')));
  return section('handoffs', 'PD handoffs',
    h('p', {class: 'stats'}, h('span', {}, 'recorded ', h('b', {'data-metric': 'handoffs_total'}, int(hs ? hs.total : 0))),
      counter('kv_transfer_exports_total', 'exports'), counter('kv_transfer_imports_total', 'imports'),
      counter('kv_transfer_import_failures_total', 'import failures')),
    table(['#', 'time', 'direction', 'tokens', 'payload bytes', 'bytes per kind', 'latency ms', 'status'], rows));
}

function renderServer(state, metricsText) {
  const m = new Metrics(metricsText, state.metrics_prefix);
  return [renderGraph(state.state_graph), renderOccupancy(m), renderRequests(state.requests, m),
          renderSpec(m), renderHandoffs(state.handoffs, m)];
}

// The router's view: its own counters, then one section per backend.
function renderRouter(state, m) {
  const kids = [section('router', 'Router',
    h('p', {class: 'stats'},
      h('span', {}, 'requests ', h('b', {'data-metric': 'router_requests_total'}, int(m.get('router_requests_total')))),
      h('span', {}, 'failures ', h('b', {'data-metric': 'router_failures_total'}, int(m.get('router_failures_total')))),
      h('span', {}, 'prefill handoffs ', h('b', {'data-metric': 'router_handoff_seconds_count'}, int(m.get('router_handoff_seconds_count'))))),
    table(['backend', 'role', 'in flight', 'status'], state.backends.map((b) =>
      h('tr', {'data-backend': b.url, 'data-role': b.role}, h('td', {}, b.url), h('td', {class: 'left'}, b.role),
        h('td', {'data-metric': 'router_in_flight'}, int(m.get('router_in_flight', {role: b.role, url: b.url}))),
        h('td', {class: b.error ? 'left error' : 'left'}, b.error || 'ok')))))];
  for (const b of state.backends) {
    kids.push(h('section', {class: 'backend', 'data-backend': b.url, 'data-role': b.role},
      h('h2', {}, b.role + ' ' + b.url + (b.state ? ' (' + b.state.model + ')' : '')),
      b.state ? renderServer(b.state, b.metrics || '') : h('p', {class: 'error', 'data-field': 'error'}, b.error || 'no state')));
  }
  return kids;
}

function render(state, metricsText) {
  const router = state.kind === 'router';
  document.getElementById('model').textContent = router ? 'router' : state.model;
  document.getElementById('role').textContent = router ? 'policy ' + state.policy : 'role ' + state.role;
  document.getElementById('root').replaceChildren(...(router ? renderRouter(state, new Metrics(metricsText, 'strata:'))
                                                             : renderServer(state, metricsText)));
}

async function refresh() {
  const status = document.getElementById('status');
  try {
    const opts = {headers: HEADERS, cache: 'no-store'};
    const [sr, mr] = await Promise.all([fetch('/v1/dashboard/state', opts), fetch('/metrics', opts)]);
    if (!sr.ok) throw new Error('/v1/dashboard/state: HTTP ' + sr.status);
    const state = await sr.json();
    render(state, mr.ok ? await mr.text() : '');
    document.body.dataset.refreshCount = ++refreshes;
    const t = new Date();
    const when = document.getElementById('last-updated');
    when.textContent = t.toLocaleTimeString();
    when.setAttribute('datetime', t.toISOString());
    status.textContent = mr.ok ? '' : '/metrics: HTTP ' + mr.status;
    status.className = mr.ok ? 'muted' : 'error';
  } catch (e) {
    status.textContent = 'refresh failed: ' + e.message;
    status.className = 'error';
  }
}
(async function loop() { await refresh(); setTimeout(loop, 1000); })();
</script>
</body>
</html>
)PAGE";

}  // namespace

std::string_view dashboard_page_html() { return kPage; }

}  // namespace strata
