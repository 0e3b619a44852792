// The review page's script: the list and the episode, drawn from the server's JSON API (same origin:
// every URL is relative to the token's folder). No library, nothing fetched from anywhere else.
"use strict";

const CODE_ORDER = ["MISSING_STREAM", "FRAME_GAP", "CLOCK_OFFSET", "CLOCK_STEP", "CLOCK_DRIFT",
  "DURATION_OUT_OF_RANGE", "OUTCOME_UNSET", "OUTCOME_MISMATCH", "UNLABELLED_INTERVENTION", "DEAD_AIR",
  "SERVO_FAULT", "SCHEMA_MISMATCH", "TRUNCATED", "CORRUPT", "UNSAFE_NAME"];

async function api(path, body) {
  const init = body === undefined ? {} : {method: "POST", body: JSON.stringify(body),
    headers: {"Content-Type": "application/json"}};
  const r = await fetch(path, init);
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

// Most in need of eyes first: rejected and not reviewed, then warnings not reviewed, then the rest.
function need(row) {
  const rejected = row.status === "FAIL" || row.status === "ERROR";
  if (rejected && !row.review) return 0;
  if (row.status === "WARN" && !row.review) return 1;
  if (row.status === "UNVALIDATED") return 2;
  if (rejected) return 3;
  if (row.status === "WARN") return 4;
  return 5;
}

function sortRows(rows) {
  return rows.slice().sort((a, b) => need(a) - need(b) || a.path.localeCompare(b.path));
}

const FILTERS = {
  status: r => [r.status],
  code: r => r.codes.concat(r.warning_codes),
  review: r => [r.review || "not reviewed"],
  outcome: r => [r.outcome || "-"],
  trigger: r => r.triggers.length ? r.triggers : ["none"],
  operator: r => [r.operator || "-"],
  task: r => [r.task || "-"],
  curation: r => curationFlags(r),
};

// The list's curation flags: `curate`'s scores of a converted episode, in the words of its report
// (jerk beyond two deviations, a length far from its task's median, success graded low).
function curationFlags(r) {
  const s = r.scores;
  if (!s) return ["not in a dataset"];
  const flags = [];
  if (s.jerk_z !== null && s.jerk_z > 2) flags.push("jerky (jerk_z > 2)");
  if (s.duration_ratio !== null && (s.duration_ratio > 1.5 || s.duration_ratio < 1 / 1.5)) flags.push("length off (×1.5)");
  if (s.graded_success !== null && s.graded_success < 0.5) flags.push("graded success < 0.5");
  return flags.length ? flags : ["unremarkable"];
}

function scoreText(s) {
  if (!s) return "";
  const fmt = (v, digits) => v === null || v === undefined ? "-" : v.toFixed(digits);
  return `success ${fmt(s.graded_success, 2)} · jerk_z ${fmt(s.jerk_z, 1)} · dur× ${fmt(s.duration_ratio, 2)}` +
    ` · cov ${fmt(s.coverage_gain, 3)}`;
}

// ---------------------------------------------------------------- the list
async function listPage() {
  const data = await api("api/episodes");
  const rows = sortRows(data.episodes);
  const form = document.getElementById("filters");
  for (const [name, values] of Object.entries(FILTERS)) {
    const select = form.elements[name];
    const seen = [...new Set(rows.flatMap(values))].sort();
    select.append(el("option", {value: "", text: "any"}));
    for (const v of seen) select.append(el("option", {value: v, text: v}));
    select.addEventListener("change", render);
  }
  const tbody = document.querySelector("#episodes tbody");
  let shown = [];
  let selected = 0;

  function render() {
    shown = rows.filter(r => Object.entries(FILTERS).every(([name, values]) => {
      const want = form.elements[name].value;
      return !want || values(r).includes(want);
    }));
    sessionStorage.setItem("reviewOrder", JSON.stringify(shown.map(r => r.key)));
    tbody.replaceChildren(...shown.map(row));
    selected = Math.min(selected, Math.max(0, shown.length - 1));
    mark();
    const counts = {};
    for (const r of rows) counts[r.status] = (counts[r.status] || 0) + 1;
    document.getElementById("summary").textContent = `${shown.length} of ${rows.length} episodes shown (` +
      Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ") + `); reviewer ${data.reviewer}`;
  }

  function row(r) {
    const reasons = el("td", {class: "reasons"});
    for (const c of r.codes) reasons.append(el("span", {class: "code FAIL", text: c}));
    for (const c of r.warning_codes) reasons.append(el("span", {class: "code WARN", text: c}));
    if (r.error) reasons.append(el("div", {class: "error", text: r.error}));
    const interventions = r.interventions.length ?
      `${r.interventions.length}: ${r.triggers.join(", ")}` : "";
    const tr = el("tr", {"data-key": r.key},
      el("td", {}, el("a", {href: `episode.html?key=${r.key}`, text: r.name})),
      el("td", {class: r.status, text: r.status}), reasons,
      el("td", {class: r.review || "", text: r.review || ""}),
      el("td", {text: r.outcome}), el("td", {text: interventions}),
      el("td", {text: r.operator}), el("td", {text: r.task}), el("td", {class: "scores", text: scoreText(r.scores)}));
    return tr;
  }

  function mark() {
    [...tbody.rows].forEach((tr, i) => tr.classList.toggle("selected", i === selected));
  }

  document.addEventListener("keydown", e => {
    if (e.target.tagName === "SELECT" || e.target.tagName === "INPUT") return;
    if (e.key === "j") selected = Math.min(selected + 1, shown.length - 1);
    else if (e.key === "k") selected = Math.max(selected - 1, 0);
    else if (e.key === "Enter" && shown[selected]) location.href = `episode.html?key=${shown[selected].key}`;
    else return;
    mark();
  });
  render();
  document.body.dataset.ready = "1";
}

// ---------------------------------------------------------------- one episode
const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];

class Plot {
  constructor(title, lines, end, spans, onSeek) {
    this.canvas = el("canvas", {width: 640, height: 90, title});
    this.title = title;
    this.lines = lines;  // [{t, v, colour, dash}]
    this.end = end;
    this.spans = spans;  // [{from, to, fill}]
    this.time = 0;
    const all = lines.flatMap(l => l.v).filter(Number.isFinite);
    this.lo = Math.min(...all);
    this.hi = Math.max(...all);
    if (!(this.hi > this.lo)) { this.lo -= 1; this.hi += 1; }
    this.canvas.addEventListener("click", e => onSeek(e.offsetX / this.canvas.width * this.end));
  }

  draw() {
    const c = this.canvas.getContext("2d");
    const w = this.canvas.width, h = this.canvas.height;
    const x = t => t / this.end * w;
    const y = v => h - 4 - (v - this.lo) / (this.hi - this.lo) * (h - 18);
    c.clearRect(0, 0, w, h);
    for (const s of this.spans) {
      c.fillStyle = s.fill;
      c.fillRect(x(s.from), 0, Math.max(2, x(s.to) - x(s.from)), h);
    }
    for (const l of this.lines) {
      c.strokeStyle = l.colour;
      c.setLineDash(l.dash ? [4, 3] : []);
      c.beginPath();
      l.t.forEach((t, i) => i ? c.lineTo(x(t), y(l.v[i])) : c.moveTo(x(t), y(l.v[i])));
      c.stroke();
    }
    c.setLineDash([]);
    c.fillStyle = "#333";
    c.fillText(this.title, 4, 11);
    c.strokeStyle = "#000";
    c.beginPath();
    c.moveTo(x(this.time), 0);
    c.lineTo(x(this.time), h);
    c.stroke();
  }
}

function lastAtOrBefore(stamps, t) {
  let lo = 0, hi = stamps.length - 1;
  if (hi < 0 || t < stamps[0]) return 0;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (stamps[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

async function episodePage() {
  const key = new URLSearchParams(location.search).get("key");
  let order = JSON.parse(sessionStorage.getItem("reviewOrder") || "null");
  if (!order || !order.includes(key)) {
    order = sortRows((await api("api/episodes")).episodes).map(r => r.key);
    sessionStorage.setItem("reviewOrder", JSON.stringify(order));
  }
  const ep = await api(`api/episode/${key}`);
  const row = ep.row;
  document.title = `review: ${row.name}`;
  document.getElementById("title").textContent = `${row.name} (${row.path})`;
  const verdict = document.getElementById("verdict");
  verdict.append(el("span", {class: row.status, text: row.status}), ` ${row.codes.concat(row.warning_codes)
    .join(" ")} · outcome ${row.outcome || "-"} · operator ${row.operator || "-"} · task ${row.task || "-"}`);
  const evidence = document.getElementById("evidence");
  const list = el("ul");
  for (const r of row.reasons.concat(row.warnings)) {
    const where = r.interval ? ` [${r.interval[0].toFixed(2)} s – ${r.interval[1].toFixed(2)} s]` : "";
    list.append(el("li", {}, el("span", {class: "code", text: r.code}), `${r.detail}${where} `,
      el("code", {text: JSON.stringify(r.numbers)})));
  }
  evidence.append(list);
  const status = document.getElementById("review-status");
  const history = document.getElementById("history");
  function showReviews(reviews) {
    const last = reviews.filter(r => r.verdict !== "note").at(-1);
    status.textContent = last ? `reviewed: ${last.verdict} (${last.reviewer}, ${last.time})` : "not reviewed";
    status.className = last ? last.verdict : "";
    document.body.dataset.review = last ? last.verdict : "";
    history.replaceChildren(...reviews.map(r => el("li", {text:
      `${r.time} ${r.reviewer}: ${r.verdict}${r.note ? " — " + r.note : ""}`})));
  }
  const reviews = row.reviews.slice();
  showReviews(reviews);

  const start = row.reasons.concat(row.warnings)
    .sort((a, b) => CODE_ORDER.indexOf(a.code) - CODE_ORDER.indexOf(b.code))
    .map(r => r.interval).find(i => i);
  const state = {time: 0, frame: -1, camera: null, playing: false, start: start ? start[0] : 0};
  window.review = state;

  async function record(verdict, note) {
    try {
      reviews.push(await api("api/review", {key, verdict, note: note || ""}));
      showReviews(reviews);
    } catch (err) {
      status.textContent = `${verdict} NOT recorded: ${err.message}`;
      status.className = "error";
    }
  }

  function go(step) {
    const i = order.indexOf(key) + step;
    if (i >= 0 && i < order.length) location.href = `episode.html?key=${order[i]}`;
  }

  const noteForm = document.getElementById("note-form");
  const noteInput = document.getElementById("note");
  noteForm.addEventListener("submit", e => {
    e.preventDefault();
    noteForm.hidden = true;
    if (noteInput.value) record("note", noteInput.value);
    noteInput.value = "";
  });

  let play = () => {};
  document.addEventListener("keydown", e => {
    if (e.target.tagName === "INPUT" || e.target.tagName === "SELECT" || e.ctrlKey || e.metaKey) return;
    if (e.key === "j") go(1);
    else if (e.key === "k") go(-1);
    else if (e.key === "c") record("confirm");
    else if (e.key === "o") record("overrule");
    else if (e.key === "n") { noteForm.hidden = false; noteInput.focus(); }
    else if (e.key === " ") play();
    else return;
    e.preventDefault();
  });

  if (ep.error) {
    const box = document.getElementById("error");
    box.hidden = false;
    box.textContent = ep.error;
    document.getElementById("player").hidden = true;
    document.body.dataset.ready = "1";
    return;
  }
  const mcap = `files/${row.path.split("/").map(encodeURIComponent).join("/")}/${encodeURIComponent(ep.mcap)}`;
  const bagUrl = new URL(mcap, location.href).href;
  document.getElementById("bag-link").href = mcap;
  const at = new Date(Number(BigInt(ep.t0_ns) / 1000000n) + state.start * 1000).toISOString();
  document.getElementById("foxglove").href = "https://app.foxglove.dev/view?ds=remote-file&ds.url=" +
    encodeURIComponent(bagUrl) + "&time=" + encodeURIComponent(at);

  const end = Math.max(ep.end_s, 1e-3);
  const spans = [];
  for (const [from, to] of ep.interventions) spans.push({from, to: to ?? end, fill: "rgba(60,120,255,0.15)"});
  for (const r of row.reasons.concat(row.warnings)) {
    if (r.interval) spans.push({from: r.interval[0], to: r.interval[1], fill: "rgba(220,0,0,0.25)"});
  }
  const seek = document.getElementById("seek");
  seek.max = end;
  const plots = [];
  const s = ep.series;
  ep.joints.forEach((joint, j) => plots.push(new Plot(`${joint}: state (solid) vs action (dashed), rad`, [
    {t: s.state.t, v: s.state.values[j], colour: COLOURS[j]},
    {t: s.action.t, v: s.action.values[j], colour: "#444", dash: true}], end, spans, setTime)));
  if (s.blend) plots.push(new Plot("blend weight α (human authority)", [
    {t: s.blend.t, v: s.blend.values[0], colour: "#000"}], end, spans, setTime));
  if (s.load) plots.push(new Plot("load (fraction of max torque), per joint",
    s.load.values.map((v, j) => ({t: s.load.t, v, colour: COLOURS[j]})), end, spans, setTime));
  const plotBox = document.getElementById("plots");
  for (const p of plots) plotBox.append(p.canvas);

  const cameraSelect = document.getElementById("camera");
  for (const cam of Object.keys(ep.cameras)) cameraSelect.append(el("option", {value: cam, text: cam}));
  state.camera = cameraSelect.value || null;
  cameraSelect.addEventListener("change", () => { state.camera = cameraSelect.value; state.frame = -1; setTime(state.time); });
  const img = document.getElementById("frame");
  // How long a seek took to show its frame (bench/ reads it): from the new src to the decoded image.
  img.addEventListener("load", () => {
    state.seekMs = performance.now() - state.requested;
    document.body.dataset.frame = img.dataset.index;
  });
  const clock = document.getElementById("clock");

  function setTime(t) {
    state.time = Math.min(Math.max(t, 0), end);
    seek.value = state.time;
    clock.textContent = `${state.time.toFixed(2)} / ${end.toFixed(2)} s`;
    if (state.camera) {
      const i = lastAtOrBefore(ep.cameras[state.camera], state.time);
      if (i !== state.frame) {
        state.frame = i;
        img.dataset.index = String(i);
        state.requested = performance.now();
        img.src = `api/episode/${key}/frame/${encodeURIComponent(state.camera)}/${i}`;
      }
    }
    for (const p of plots) { p.time = state.time; p.draw(); }
  }
  seek.addEventListener("input", () => setTime(Number(seek.value)));

  const playButton = document.getElementById("play");
  play = () => {
    state.playing = !state.playing;
    playButton.textContent = state.playing ? "pause" : "play";
    let last = performance.now();
    const tick = now => {
      if (!state.playing) return;
      setTime(state.time + (now - last) / 1000);
      last = now;
      if (state.time >= end) { state.playing = false; playButton.textContent = "play"; return; }
      requestAnimationFrame(tick);
    };
    if (state.playing) requestAnimationFrame(tick);
  };
  playButton.addEventListener("click", () => { play(); playButton.blur(); });
  setTime(state.start);
  document.body.dataset.ready = "1";
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.id === "list-page" ? listPage : episodePage;
  page().catch(err => {
    const box = el("div", {id: "fatal", class: "error", text: `the page could not load: ${err.message}`});
    document.body.prepend(box);
    document.body.dataset.ready = "1";
  });
});
