// The jobs list: a row per job, its bar fed by the job's event stream while it runs.

import { api, followJob } from "./api.js";
import { POLL_MS, STATES, TERMINAL, bar, fmtAge, fmtDuration, fmtInt, h, jobDuration, progressTotals, setBar, show, showError, stateBadge } from "./dom.js";


// Browsers allow 6 HTTP/1.1 connections per host and every EventSource holds one open, so only
// this many jobs get a live stream; the rest are refreshed by the list's polling.
const MAX_STREAMS = 4;

export function jobsView(stateFilter) {
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
      if (!page.items.length) tbody.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No jobs yet. Submit one on the Submit page, with `spillway submit spec.yaml`, or POST /jobs.")));
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
