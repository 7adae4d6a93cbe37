// The gateway's status page: reads /metrics every 2 s and fills the page,
// and /pages/recent (JSON) for the list of recent pages.
//
// Every number shown carries data-metric (the series exactly as /metrics
// writes it, `name{labels}`) and, once read, data-value (the value's text as
// /metrics wrote it), so a test can compare the page with /metrics. Numbers
// computed here (a ratio, a rate) carry data-derived, and their data-metric
// says how they are computed.
"use strict";

const POLL_MS = 2000;
const SAMPLES = 150;
const THROUGHPUT_COUNTER = "gateway_stream_delivered_bytes_total";

// The OpenMetrics text as a Map from `name{labels}` (as written) to
// {name, labels, text, value}. Comment lines (# TYPE, # HELP, # EOF) are skipped.
function parseMetrics(text) {
  const series = new Map();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const parsed = parseLine(line);
    if (parsed) series.set(parsed.key, parsed);
  }
  return series;
}

// `name{a="x",b="y"} value [timestamp]`; label values may hold escaped quotes.
function parseLine(line) {
  let i = 0;
  while (i < line.length && line[i] !== "{" && line[i] !== " ") i++;
  const name = line.slice(0, i);
  const labels = {};
  if (line[i] === "{") {
    i++;
    while (i < line.length && line[i] !== "}") {
      const eq = line.indexOf("=", i);
      if (eq < 0 || line[eq + 1] !== '"') return null;
      const label = line.slice(i, eq);
      let j = eq + 2;
      let value = "";
      while (j < line.length && line[j] !== '"') {
        if (line[j] === "\\" && j + 1 < line.length) {
          const next = line[j + 1];
          value += next === "n" ? "\n" : next;
          j += 2;
        } else {
          value += line[j];
          j++;
        }
      }
      if (j >= line.length) return null;
      labels[label] = value;
      i = j + 1;
      if (line[i] === ",") i++;
    }
    if (line[i] !== "}") return null;
    i++;
  }
  const key = line.slice(0, i);
  const rest = line.slice(i).trim().split(" ");
  if (name === "" || rest.length === 0 || rest[0] === "") return null;
  return { key, name, labels, text: rest[0], value: number(rest[0]) };
}

function number(text) {
  if (text === "+Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  return Number(text);
}

// Series of one metric name, in the order /metrics gave them.
function family(series, name) {
  return [...series.values()].filter((s) => s.name === name);
}

function seriesKey(name, labels) {
  const parts = Object.entries(labels).map(
    ([k, v]) => `${k}="${String(v).replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`,
  );
  return parts.length ? `${name}{${parts.join(",")}}` : name;
}

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

function formatBytes(n) {
  if (!Number.isFinite(n)) return String(n);
  let unit = 0;
  while (Math.abs(n) >= 1024 && unit < BYTE_UNITS.length - 1) {
    n /= 1024;
    unit++;
  }
  return unit === 0 ? `${n} B` : `${n.toFixed(1)} ${BYTE_UNITS[unit]}`;
}

function formatCount(n) {
  return Number.isFinite(n) ? n.toLocaleString("en-US") : String(n);
}

function formatMs(seconds) {
  return `${(seconds * 1000).toFixed(1)} ms`;
}

// Fills `cell` from the series `key`: its value's text in data-value, a
// formatted number as text; absent series show – and lose data-value.
function fill(cell, series, key, format) {
  cell.dataset.metric = key;
  const s = series.get(key);
  if (!s) {
    delete cell.dataset.value;
    cell.textContent = "–";
    cell.title = "absent from /metrics";
    return null;
  }
  cell.dataset.value = s.text;
  cell.textContent = format(s.value);
  cell.title = key + " " + s.text;
  return s.value;
}

function formatFor(cell) {
  return cell.dataset.unit === "bytes" ? formatBytes : formatCount;
}

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function renderFixed(series) {
  for (const cell of document.querySelectorAll("[data-metric]:not([data-derived])")) {
    if (cell.closest("tbody#origins, tbody#streams")) continue;
    fill(cell, series, cell.dataset.metric, formatFor(cell));
  }
  const lookups = family(series, "gateway_cache_lookups_total");
  const total = lookups.reduce((sum, s) => sum + s.value, 0);
  const hits = series.get('gateway_cache_lookups_total{outcome="hit"}');
  const ratio = document.getElementById("hit-ratio");
  if (hits && total > 0) {
    const value = hits.value / total;
    ratio.dataset.value = String(value);
    ratio.textContent = `${(value * 100).toFixed(1)} %`;
  } else {
    delete ratio.dataset.value;
    ratio.textContent = lookups.length ? "no lookups yet" : "–";
  }
}

const ORIGIN_COLUMNS = [
  ["gateway_origin_up", (v) => (v === 1 ? "up" : "down")],
  ["gateway_origin_srtt_seconds", formatMs],
  ["gateway_origin_rto_seconds", formatMs],
  ["gateway_origin_cwnd_bytes", formatBytes],
  ["gateway_origin_in_flight_bytes", formatBytes],
  ["gateway_origin_packets_sent_total", formatCount],
  ["gateway_origin_retransmitted_chunks_total", formatCount],
];

function renderOrigins(series) {
  const body = document.getElementById("origins");
  const ups = family(series, "gateway_origin_up");
  if (ups.length === 0) return;
  body.replaceChildren();
  for (const up of ups) {
    const origin = up.labels.origin;
    const row = el("tr");
    row.append(el("td", {}, origin));
    for (const [name, format] of ORIGIN_COLUMNS) {
      const cell = el("td", { class: "num" });
      const value = fill(cell, series, seriesKey(name, { origin }), format);
      if (name === "gateway_origin_up") cell.classList.add(value === 1 ? "up" : "down");
      row.append(cell);
    }
    body.append(row);
  }
}

// Per-stream delivered counters of the previous read, for the rate column.
let previousDelivered = new Map();
let previousAt = 0;

function renderStreams(series, at) {
  const body = document.getElementById("streams");
  const backlogs = family(series, "gateway_stream_backlog_bytes");
  const delivered = new Map();
  if (backlogs.length === 0) return delivered;
  const peaks = family(series, "gateway_stream_backlog_peak_bytes").map((s) => s.value);
  const scale = Math.max(1, ...peaks, ...backlogs.map((s) => s.value));
  const seconds = (at - previousAt) / 1000;
  body.replaceChildren();
  for (const backlog of backlogs) {
    const labels = { origin: backlog.labels.origin, stream: backlog.labels.stream };
    const row = el("tr");
    row.append(el("td", {}, labels.origin), el("td", { class: "num" }, labels.stream));
    const backlogCell = el("td", { class: "num" });
    fill(backlogCell, series, backlog.key, formatBytes);
    const bar = el("div", { class: "bar" });
    bar.style.width = `${(100 * backlog.value) / scale}%`;
    const barCell = el("td", { class: "bar-col" });
    barCell.append(bar);
    row.append(backlogCell, barCell);
    for (const name of ["gateway_stream_queued_bytes", "gateway_stream_backlog_peak_bytes", THROUGHPUT_COUNTER]) {
      const cell = el("td", { class: "num" });
      const value = fill(cell, series, seriesKey(name, labels), formatBytes);
      if (name === THROUGHPUT_COUNTER && value !== null) delivered.set(backlog.key, value);
      row.append(cell);
    }
    const rate = el("td", { class: "num", "data-derived": "", "data-metric": `rate(${seriesKey(THROUGHPUT_COUNTER, labels)})` });
    const before = previousDelivered.get(backlog.key);
    const now = delivered.get(backlog.key);
    if (before !== undefined && now !== undefined && seconds > 0 && now >= before) {
      const value = (now - before) / seconds;
      rate.dataset.value = String(value);
      rate.textContent = `${formatBytes(Math.round(value))}/s`;
    } else {
      rate.textContent = "–";
    }
    row.append(rate);
    // From the eBPF maps: the LAN-side TCP programs per origin and stream,
    // xdp_sctp per stream id only.
    const toBrowsers = el("td", { class: "num ebpf" });
    fill(toBrowsers, series, seriesKey("gateway_ebpf_stream_browser_in_flight_bytes", labels), formatBytes);
    const arrived = el("td", { class: "num ebpf" });
    fill(arrived, series, seriesKey("gateway_ebpf_stream_arrived_bytes_total", { stream: labels.stream }), formatBytes);
    row.append(toBrowsers, arrived);
    body.append(row);
  }
  previousDelivered = delivered;
  previousAt = at;
  return delivered;
}

// The last SAMPLES reads: {at (ms), bytes (sum of the throughput counter)}.
const samples = [];

function renderChart(series, at) {
  const counters = family(series, THROUGHPUT_COUNTER);
  if (counters.length === 0) return;
  samples.push({ at, bytes: counters.reduce((sum, s) => sum + s.value, 0) });
  while (samples.length > SAMPLES) samples.shift();
  const rates = [];
  for (let i = 1; i < samples.length; i++) {
    const seconds = (samples[i].at - samples[i - 1].at) / 1000;
    const delta = samples[i].bytes - samples[i - 1].bytes;
    // A restarted gateway starts its counters again at 0: no rate there.
    rates.push(seconds > 0 && delta >= 0 ? delta / seconds : 0);
  }
  const now = document.getElementById("throughput-now");
  if (rates.length === 0) return;
  const last = rates[rates.length - 1];
  now.dataset.value = String(last);
  now.textContent = `${formatBytes(Math.round(last))}/s`;
  const max = Math.max(...rates);
  const peak = document.getElementById("chart-max");
  peak.dataset.value = String(max);
  peak.textContent = `${formatBytes(Math.round(max))}/s`;
  const [width, height] = [600, 160];
  const step = width / (SAMPLES - 1);
  const offset = (SAMPLES - 1 - rates.length) * step;
  const points = rates.map((r, i) => {
    const x = offset + i * step;
    const y = height - 4 - (max > 0 ? (r / max) * (height - 8) : 0);
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  });
  document.getElementById("chart-line").setAttribute("points", points.join(" "));
}

const PAGE_COLUMNS = ["issued", "used", "claimed", "wasted", "failed"];

// The recent pages from /pages/recent: one row per page, each figure with
// data-field (its key in the JSON) and data-value, the row with data-url.
function renderPages(answer) {
  const body = document.getElementById("pages");
  if (!answer.prefetch) {
    const row = el("tr");
    row.append(el("td", { colspan: "8", class: "none" }, "prefetch is off"));
    body.replaceChildren(row);
    return;
  }
  if (answer.pages.length === 0) return;
  body.replaceChildren();
  for (const page of answer.pages) {
    const row = el("tr", { "data-url": page.url });
    row.append(el("td", { class: "url", title: page.url }, page.url));
    row.append(el("td", { "data-field": "state", "data-value": page.state }, page.state));
    row.append(el("td", { class: "num" }, `${(page.age_ms / 1000).toFixed(0)} s`));
    for (const key of PAGE_COLUMNS) {
      const value = page[key];
      const cell = el("td", { class: "num", "data-field": key, "data-value": String(value) }, formatCount(value));
      if (key === "wasted" && value > 0) cell.classList.add("down");
      if (key === "used" && value > 0) cell.classList.add("up");
      row.append(cell);
    }
    body.append(row);
  }
}

async function pollPages() {
  const response = await fetch("/pages/recent", { cache: "no-store" });
  if (!response.ok) throw new Error(`${response.status} ${response.statusText} from /pages/recent`);
  renderPages(await response.json());
}

let reads = 0;

async function poll() {
  const status = document.getElementById("scrape");
  try {
    const response = await fetch("/metrics", { cache: "no-store" });
    if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
    const series = parseMetrics(await response.text());
    const at = Date.now();
    renderFixed(series);
    renderOrigins(series);
    renderStreams(series, at);
    renderChart(series, at);
    await pollPages();
    reads++;
    document.body.dataset.reads = String(reads);
    status.textContent = `read /metrics at ${new Date(at).toLocaleTimeString()}, every ${POLL_MS / 1000} s`;
    status.classList.remove("stale");
  } catch (error) {
    status.textContent = `cannot read /metrics: ${error.message}; the figures below are from the last read`;
    status.classList.add("stale");
  }
  setTimeout(poll, POLL_MS);
}

poll();
