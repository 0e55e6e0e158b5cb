// Spillway's page for people: a small client of the REST API (the same one the SDK and CLI use).
// No framework and no build step, so the service can serve it as is with no network at all.
// Everything from the API is put into the page as text (textContent), never as HTML: job names,
// specs and error messages are user input.
"use strict";

const STATES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"];
const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
const POLL_MS = 2000;
// Browsers allow 6 HTTP/1.1 connections per host and every EventSource holds one open, so only
// this many jobs get a live stream; the rest are refreshed by the list's polling.
const MAX_STREAMS = 4;
const TOKEN_KEY = "spillway.token";

// ---------------------------------------------------------------- API and auth

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

async function api(path, options = {}) {
  const headers = { Accept: "application/json", ...(options.headers || {}) };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  const response = await fetch(path, { ...options, headers });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const error = body && body.error;
    const hint = response.status === 401 ? " (set a token at the top right)" : "";
    throw new Error((error ? `${error.code}: ${error.message}` : `HTTP ${response.status} for ${path}`) + hint);
  }
  return body;
}

// EventSource cannot send an Authorization header, so the token travels as ?token=; the server
// accepts it on /events only and redacts it from its access log (service/auth.py).
function followJob(id, { onProgress, onEnd }) {
  const query = token() ? `?token=${encodeURIComponent(token())}` : "";
  const source = new EventSource(`/jobs/${encodeURIComponent(id)}/events${query}`);
  source.addEventListener("progress", (e) => onProgress(JSON.parse(e.data)));
  source.addEventListener("end", (e) => {
    source.close(); // otherwise EventSource reconnects when the server ends the stream
    onEnd(JSON.parse(e.data));
  });
  return source;
}

// ---------------------------------------------------------------- DOM and formatting

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined && child !== false) el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

// Replace the page's content; like h(), skips null/false so optional sections can be written inline.
function show(...children) {
  document.getElementById("view").replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

function showError(message) {
  const alert = document.getElementById("alert");
  alert.textContent = message;
  alert.hidden = !message;
}

function parseTime(text) {
  if (!text) return null;
  return new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(text) ? text : `${text}Z`); // the API's times are UTC
}

function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  const m = Math.floor(seconds / 60);
  if (m < 60) return `${m} min ${Math.floor(seconds % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function fmtAge(text) {
  const t = parseTime(text);
  return t ? `${fmtDuration(Math.max(0, (Date.now() - t) / 1000))} ago` : "—";
}

function jobDuration(job) {
  const start = parseTime(job.started_at);
  if (!start) return null;
  const end = parseTime(job.finished_at) || (TERMINAL.has(job.state) ? parseTime(job.updated_at) : new Date());
  return (end - start) / 1000;
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

const fmtInt = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US"));
const fmtTime = (text) => (parseTime(text) ? parseTime(text).toLocaleString() : "—");
const stateBadge = (state) => h("span", { class: `state state-${state.toLowerCase()}`, "data-state": state }, state);

// Overall: the Dask engine's distinct tasks (a fused task counts in each of its stages, once here);
// whole stages finished when the stages count in different units (a Polars read's MiB beside
// 1-of-1 steps); otherwise the stages' counts summed. As JobProgress.done/total in jobs/status.py.
function progressTotals(progress) {
  if (progress && progress.tasks_total !== null && progress.tasks_total !== undefined) {
    return { done: progress.tasks_done || 0, total: progress.tasks_total };
  }
  const stages = (progress && progress.stages) || [];
  if (new Set(stages.map((s) => s.unit || null)).size > 1) {
    return { done: stages.filter((s) => s.total && s.done >= s.total).length, total: stages.length };
  }
  return { done: stages.reduce((a, s) => a + s.done, 0), total: stages.reduce((a, s) => a + s.total, 0) };
}

// The service's estimate (elapsed × left ÷ done); nothing once the job has stopped.
function etaText(progress, state) {
  const eta = progress && progress.eta_s;
  if (TERMINAL.has(state) || eta === null || eta === undefined || eta <= 0) return "";
  return eta < 90 ? `about ${Math.max(1, Math.round(eta))} s left` : `about ${Math.round(eta / 60)} min left`;
}

// Arrow's large_string and string_view (how Polars and tpchgen lay strings out) read as string.
const shownType = (type) => type.replace(/\blarge_(string|binary|list)\b/g, "$1").replace(/\bstring_view\b/g, "string").replace(/\butf8\b/g, "string");

// A bar is a role=progressbar element whose aria-valuenow is the whole percent, so screen readers
// (and the browser test) read the same number that the width shows.
function bar(label) {
  return h("div", { class: "bar", role: "progressbar", "aria-label": label, "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": 0 },
    h("div", { class: "fill" }), h("span", { class: "bar-text" }));
}

function setBar(el, value, max, text) {
  const pct = max > 0 ? Math.min(100, Math.floor((100 * value) / max)) : 0; // floor: 100 only when complete
  el.setAttribute("aria-valuenow", pct);
  // The width is exact (with a sliver for anything above zero, e.g. 70 MiB of 12 GiB); the number is floored.
  el.querySelector(".fill").style.width = max > 0 && value > 0 ? `${Math.max(0.5, Math.min(100, (100 * value) / max)).toFixed(1)}%` : "0%";
  el.querySelector(".bar-text").textContent = text === undefined ? `${pct}%` : text;
  el.classList.toggle("high", pct >= 85);
  return el;
}

function memoryBar(label, used, limit, extra = "") {
  if (!limit) return h("span", {}, `${fmtBytes(used)} (no limit)`);
  return setBar(bar(label), used || 0, limit, `${fmtBytes(used)} / ${fmtBytes(limit)}${extra}`);
}

// ---------------------------------------------------------------- jobs list

function jobsView(stateFilter) {
  const rows = new Map(); // job id → {job, tr, cells}
  const streams = new Map(); // job id → EventSource
  let closed = false;
  const select = h("select", { id: "state-filter", "aria-label": "Filter by state", onchange: (e) => {
    location.hash = e.target.value ? `#/jobs?state=${e.target.value}` : "#/jobs";
  } }, h("option", { value: "" }, "all states"), STATES.map((s) => h("option", { value: s, selected: s === stateFilter }, s)));
  const count = h("span", { class: "muted" });
  const tbody = h("tbody");
  show(
    h("div", { class: "toolbar" }, h("h1", {}, "Jobs"), h("label", {}, "State ", select), count),
    h("table", { id: "jobs", class: "grid" },
      h("thead", {}, h("tr", {}, ["Name", "State", "Age", "Duration", "Progress", "Id"].map((c) => h("th", { class: c === "Duration" ? "num" : null }, c)))), tbody));

  function render(entry) {
    const { job, cells } = entry;
    cells.state.replaceChildren(stateBadge(job.state));
    cells.age.textContent = fmtAge(job.created_at);
    cells.duration.textContent = fmtDuration(jobDuration(job));
    const { done, total } = progressTotals(job.progress);
    setBar(cells.bar, done, total, total ? `${Math.floor((100 * done) / total)}% · ${fmtInt(done)}/${fmtInt(total)}` : job.state === "PENDING" ? "queued" : "—");
    entry.tr.dataset.state = job.state;
  }

  function upsert(job) {
    let entry = rows.get(job.id);
    if (streams.get(job.id)?.readyState === EventSource.CLOSED) streams.delete(job.id); // failed: poll, then retry below
    if (!entry) {
      const cells = { state: h("td"), age: h("td"), duration: h("td", { class: "num" }), bar: bar(`progress of ${job.name}`) };
      const link = h("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, job.name);
      const tr = h("tr", { "data-job-id": job.id }, h("td", {}, link), cells.state, cells.age, cells.duration, h("td", { class: "progress" }, cells.bar), h("td", {}, h("code", {}, job.id.slice(0, 8))));
      entry = { job, tr, cells };
      rows.set(job.id, entry);
    } else if (streams.has(job.id) && !TERMINAL.has(job.state)) {
      // While a stream is open it is the fresher source of state and progress; a list answer
      // that left the server before the last event must not move the bar backwards.
      job = { ...job, state: entry.job.state, progress: entry.job.progress };
    }
    entry.job = job;
    render(entry);
    if (!TERMINAL.has(job.state) && !streams.has(job.id) && streams.size < MAX_STREAMS) openStream(job.id);
    return entry.tr;
  }

  function openStream(id) {
    const update = (event) => {
      const entry = rows.get(id);
      if (!entry) return;
      entry.job = { ...entry.job, state: event.state, progress: event.progress, error: event.error };
      render(entry);
    };
    streams.set(id, followJob(id, {
      onProgress: update,
      onEnd: (event) => { streams.delete(id); update(event); refresh(); }, // refresh: finished_at, duration
    }));
  }

  async function refresh() {
    try {
      const query = new URLSearchParams({ limit: "100" });
      if (stateFilter) query.set("state", stateFilter);
      const page = await api(`/jobs?${query}`);
      if (closed) return; // the user moved on while this was in flight: open no streams
      const seen = new Set(page.items.map((j) => j.id));
      for (const [id, entry] of rows) {
        if (!seen.has(id)) { rows.delete(id); streams.get(id)?.close(); streams.delete(id); }
      }
      tbody.replaceChildren(...page.items.map(upsert)); // re-appends existing rows: newest first
      if (!page.items.length) tbody.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No jobs yet. Submit one with `spillway submit spec.yaml` or POST /jobs.")));
      count.textContent = `${fmtInt(page.total)} job${page.total === 1 ? "" : "s"}${page.total > page.items.length ? `, newest ${page.items.length} shown` : ""}`;
      showError("");
    } catch (err) {
      showError(`Could not load jobs: ${err.message}`);
    }
  }

  refresh();
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, POLL_MS);
  return () => { closed = true; clearInterval(timer); for (const s of streams.values()) s.close(); };
}

// ---------------------------------------------------------------- one job

function dashboardLinks(link) {
  if (!link) return null;
  const base = link.replace(/\/status\/?$/, "").replace(/\/$/, "");
  const pages = [["Status", "/status"], ["Task stream", "/tasks"], ["Progress", "/individual-progress"], ["Workers", "/workers"]];
  return h("p", { class: "dashboard" }, "Dask dashboard: ",
    pages.map(([name, path], i) => [i ? " · " : "", h("a", { href: base + path, target: "_blank", rel: "noopener" }, name)]));
}

function table(headers, rows, attrs = {}) {
  const body = rows.map((cells) => cells.map((c) => (c instanceof Node && c.tagName === "TD" ? c : h("td", {}, c))));
  // A column of numbers is right-aligned, and so is its header.
  const numeric = headers.map((_, i) => body.length > 0 && body.every((cells) => cells[i].classList.contains("num")));
  return h("table", { class: "grid", ...attrs },
    h("thead", {}, h("tr", {}, headers.map((c, i) => h("th", { class: numeric[i] ? "num" : null }, c)))),
    h("tbody", {}, body.map((cells) => h("tr", {}, cells))));
}

const num = (text) => h("td", { class: "num" }, text);
const section = (title, ...body) => h("section", { class: "card" }, h("h2", {}, title), ...body);
const facts = (pairs) => h("dl", { class: "facts" }, pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));

function stagesSection(progress, state) {
  const { done, total } = progressTotals(progress);
  // Dask-engine stages count tasks; a Polars job's read stages count MiB read (progress.note says so).
  const counted = (progress.stages || []).some((s) => s.unit) ? "" : " tasks";
  const eta = etaText(progress, state);
  const overall = setBar(bar("overall progress"), done, total,
    total ? `${Math.floor((100 * done) / total)}% · ${fmtInt(done)}/${fmtInt(total)}${counted}${eta ? ` · ${eta}` : ""}` : "no tasks yet");
  overall.id = "overall-progress";
  if (eta) overall.dataset.eta = String(progress.eta_s);
  const stages = (progress.stages || []).map((s) =>
    h("li", { "data-stage": s.name }, h("code", {}, s.name),
      setBar(bar(`stage ${s.name}`), s.done, s.total, `${fmtInt(s.done)}/${fmtInt(s.total)}${s.unit ? ` ${s.unit}` : ""}`)));
  const perWorker = Object.entries(progress.tasks_per_worker || {});
  const engine = progress.engine;
  return section("Progress",
    engine ? h("p", { id: "engine" }, h("strong", {}, `${engine.engine} on ${engine.device}`), ` — ${engine.reason}`) : null,
    overall, h("ul", { class: "stages", id: "stages" }, stages),
    progress.note ? h("p", { class: "note", id: "progress-note" }, progress.note) : null,
    perWorker.length ? h("details", {}, h("summary", {}, "Tasks per worker"), table(["Worker", "Tasks"], perWorker.map(([w, n]) => [w, num(fmtInt(n))]))) : null);
}

function resourcesSection(r) {
  if (!r) return null;
  const perWorker = Object.entries(r.peak_device_memory_per_worker || {});
  return h("section", { class: "card", id: "resources" }, h("h2", {}, "GPU memory"),
    facts([["Peak device memory", fmtBytes(r.peak_device_memory_bytes)], ["Spilled to host", fmtBytes(r.spilled_to_host_bytes)],
      ["Samples", fmtInt(r.samples)], ["Measured by", r.method]]),
    perWorker.length ? table(["Worker", "Peak device memory"], perWorker.map(([w, b]) => [w, num(fmtBytes(b))])) : null);
}

function errorSection(error) {
  if (!error) return null;
  return h("section", { class: "card error", id: "job-error" }, h("h2", {}, "Error"),
    facts([["Code", h("code", {}, error.code)], error.field ? ["Field", h("code", {}, error.field)] : null]), h("pre", {}, error.message));
}

function resultSection(result) {
  if (!result) return null;
  const files = result.files.map((f) => [h("code", {}, f.path), num(fmtBytes(f.size_bytes)), num(fmtInt(f.rows))]);
  files.push([h("strong", {}, `${fmtInt(result.files.length)} file${result.files.length === 1 ? "" : "s"}`), num(fmtBytes(result.total_bytes)), num(fmtInt(result.total_rows))]);
  return h("section", { class: "card", id: "result" }, h("h2", {}, "Result"),
    facts([["Location", h("code", {}, result.location)], ["Format", result.format],
      ["Total rows", h("span", { id: "total-rows" }, fmtInt(result.total_rows))], ["Total size", fmtBytes(result.total_bytes)],
      result.partition_on.length ? ["Partitioned on", result.partition_on.join(", ")] : null]),
    h("h3", {}, "Files"), table(["Path", "Size", "Rows"], files, { id: "result-files" }),
    h("h3", {}, "Schema"), table(["Column", "Type"], result.columns.map((c) => [h("code", {}, c.name), h("span", { title: c.type }, shownType(c.type))]), { id: "result-schema" }));
}

function jobFacts(job) {
  return facts([["Id", h("code", {}, job.id)], ["Backend", job.backend], ["Created", `${fmtTime(job.created_at)} (${fmtAge(job.created_at)})`],
    ["Started", fmtTime(job.started_at)], ["Finished", fmtTime(job.finished_at)], ["Duration", fmtDuration(jobDuration(job))]]);
}

function cancelButton(job, onCancelled) {
  // Two clicks (the first arms it for a few seconds) instead of confirm(): no modal dialog, and
  // one stray click never throws away a long job.
  let armed = null;
  const button = h("button", { id: "cancel-job", class: "danger", type: "button" }, "Cancel job");
  button.addEventListener("click", async () => {
    if (!armed) {
      button.textContent = "Click again to cancel";
      button.classList.add("armed");
      armed = setTimeout(() => { armed = null; button.textContent = "Cancel job"; button.classList.remove("armed"); }, 4000);
      return;
    }
    clearTimeout(armed);
    button.disabled = true;
    button.textContent = "Cancelling…";
    try {
      onCancelled(await api(`/jobs/${encodeURIComponent(job.id)}/cancel`, { method: "POST" }));
    } catch (err) {
      showError(`Could not cancel: ${err.message}`);
      button.disabled = false;
      button.textContent = "Cancel job";
      armed = null;
    }
  });
  return button;
}

function jobDetailView(id) {
  let stream = null;
  let timer = null;
  let closed = false;

  function render(job) {
    const header = h("div", { class: "toolbar" },
      h("h1", {}, job.name), h("span", { id: "job-state" }, stateBadge(job.state)),
      TERMINAL.has(job.state) ? null : cancelButton(job, (j) => { stop(); render(j); }));
    show(
      h("p", {}, h("a", { href: "#/jobs" }, "← all jobs")),
      header, dashboardLinks(job.links && job.links.dashboard), errorSection(job.error),
      section("Job", h("div", { id: "job-facts" }, jobFacts(job))),
      h("div", { id: "progress-slot", "data-state": job.state }, stagesSection(job.progress, job.state)), resourcesSection(job.resources), resultSection(job.result),
      section("Spec", h("p", { class: "muted" }, "As stored, with unset (null) fields left out."),
        h("pre", { class: "spec", id: "job-spec" }, JSON.stringify(job.spec, (k, v) => (v === null ? undefined : v), 2))));
  }

  function showProgress(progress, state) {
    const slot = document.getElementById("progress-slot");
    const wasOpen = slot.querySelector("details")?.open; // keep "tasks per worker" open across updates
    slot.dataset.state = state; // a cancelled or failed job's bars change colour (style.css)
    slot.replaceChildren(stagesSection(progress, state));
    if (wasOpen) slot.querySelector("details").open = true;
  }

  function stop() {
    if (stream) stream.close();
    clearInterval(timer);
    stream = null;
    timer = null;
  }

  async function load() {
    try {
      const job = await api(`/jobs/${encodeURIComponent(id)}`);
      if (closed) return;
      render(job);
      showError("");
      if (TERMINAL.has(job.state)) { stop(); return; }
      if (!stream) {
        stream = followJob(id, {
          onProgress: (event) => {
            showProgress(event.progress, event.state);
            document.getElementById("job-state").replaceChildren(stateBadge(event.state));
          },
          onEnd: () => { stream = null; load(); }, // the full view: result, error, finished_at
        });
      }
      // The stream carries only state and progress; the poll keeps timestamps fresh, and carries
      // progress too if the stream has failed for good (EventSource retries network errors itself).
      if (!timer) timer = setInterval(() => { if (!document.hidden) poll(); }, POLL_MS);
    } catch (err) {
      showError(`Could not load job ${id}: ${err.message}`);
    }
  }

  async function poll() {
    const job = await api(`/jobs/${encodeURIComponent(id)}`).catch(() => null);
    if (!job || closed) return;
    if (TERMINAL.has(job.state)) { stop(); render(job); return; } // in case the stream's "end" never comes
    // Not the whole page: re-rendering would replace the cancel button under the user's pointer.
    document.getElementById("job-facts")?.replaceChildren(jobFacts(job));
    if (!stream || stream.readyState === EventSource.CLOSED) {
      showProgress(job.progress, job.state);
      document.getElementById("job-state").replaceChildren(stateBadge(job.state));
    }
  }

  load();
  return () => { closed = true; stop(); };
}

// ---------------------------------------------------------------- cluster

function clusterView() {
  async function refresh() {
    try {
      const c = await api("/cluster");
      const gpus = c.workers.some((w) => w.gpu);
      const headers = ["Worker", "Threads", "Executing", "Host memory", "Spilled to disk"].concat(gpus ? ["GPU", "Device memory", "Spilled to host"] : []);
      const workers = [...c.workers].sort((a, b) => a.name.localeCompare(b.name, "en", { numeric: true })); // stable order between refreshes
      const rows = workers.map((w) => {
        const cells = [h("span", { title: w.address }, w.name), num(w.threads), num(w.tasks_processing),
          h("td", { class: "progress" }, memoryBar(`host memory of ${w.name}`, w.memory_used, w.memory_limit)), num(fmtBytes(w.spilled_to_disk_bytes))];
        if (gpus) {
          const g = w.gpu || {};
          const limit = g.device_memory_limit || g.memory_total;
          const extra = g.device_memory_limit && g.memory_total ? ` limit (${fmtBytes(g.memory_total)} total)` : "";
          const gpuName = g.name ? `${g.name}${g.index !== null && g.index !== undefined ? ` #${g.index}` : ""}` : "—";
          cells.push(h("td", { class: "nowrap" }, gpuName),
            h("td", { class: "progress" }, memoryBar(`device memory of ${w.name}`, g.memory_used, limit, extra)), num(fmtBytes(g.spilled_to_host_bytes)));
        }
        return cells;
      });
      const used = c.workers.reduce((a, w) => a + w.memory_used, 0);
      show(
        h("div", { class: "toolbar" }, h("h1", {}, "Cluster"), h("span", { class: "muted" }, `refreshed ${new Date().toLocaleTimeString()}`)),
        dashboardLinks(c.dashboard_link),
        section("Summary", facts([["Backend", h("strong", { id: "cluster-backend" }, c.backend)], ["Kind", c.kind], ["Protocol", h("span", { id: "cluster-protocol" }, c.protocol)],
          ["Scheduler", h("code", {}, c.scheduler_address)], ["Workers", fmtInt(c.workers.length)], ["Threads", fmtInt(c.total_threads)],
          ["Host memory", memoryBar("host memory of the cluster", used, c.total_memory_limit)]])),
        section("Workers", table(headers, rows, { id: "workers" }), gpus ? null : h("p", { class: "muted" }, "No GPUs: jobs run on the CPU with pandas.")));
      showError("");
    } catch (err) {
      showError(`Could not load the cluster: ${err.message}`);
    }
  }
  refresh();
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, POLL_MS);
  return () => clearInterval(timer);
}

// ---------------------------------------------------------------- router and token form

let leaveView = null;

function route() {
  if (leaveView) leaveView(); // close this view's streams and timers before the next one opens its own
  showError("");
  const [path, query] = (location.hash || "#/jobs").slice(1).split("?");
  const parts = path.split("/").filter(Boolean);
  const page = parts[0] === "cluster" ? "cluster" : "jobs";
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === page);
  if (page === "jobs" && parts[1]) leaveView = jobDetailView(decodeURIComponent(parts[1]));
  else if (page === "cluster") leaveView = clusterView();
  else leaveView = jobsView(new URLSearchParams(query || "").get("state") || "");
}

function setupToken() {
  const input = document.getElementById("token");
  const state = document.getElementById("token-state");
  input.value = token();
  state.textContent = token() ? "set" : "";
  document.getElementById("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    if (input.value.trim()) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    else sessionStorage.removeItem(TOKEN_KEY);
    state.textContent = token() ? "saved" : "cleared";
    route(); // reopen streams so they carry the new token
  });
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => { setupToken(); route(); });
