// What a job left behind, beside its detail page: its log (service events, the engine chosen, a
// failed job's traceback, workers' warnings) and the first rows of its output.

import { api } from "./api.js";
import { fmtInt, h, shownType } from "./dom.js";

const PREVIEW_ROWS = 20;

// The log's lines as the service wrote them: a traceback is one multi-line entry (cluster/job_logs.py),
// a worker's line starts with [its address], a service event with its time.
function logKind(line) {
  if (line.startsWith("Traceback") || /\n\s+File "/.test(line)) return "traceback";
  if (line.startsWith("[")) return "worker";
  if (/^\S+ engine: /.test(line)) return "engine";
  return "event";
}

// Fills `slot` with the job's log; the button reloads it (a running job's log grows).
export async function showLogs(slot, jobId) {
  const refresh = h("button", { type: "button", id: "refresh-logs", onclick: () => showLogs(slot, jobId) }, "Refresh");
  const frame = (...body) => h("section", { class: "card", id: "logs" }, h("div", { class: "card-head" }, h("h2", {}, "Log"), refresh), ...body);
  try {
    const logs = await api(`/jobs/${encodeURIComponent(jobId)}/logs`);
    const lines = logs.lines.map((line) => h("div", { class: `log-line log-${logKind(line)}` }, line));
    slot.replaceChildren(frame(lines.length ? h("pre", { class: "log", id: "job-logs" }, lines) : h("p", { class: "muted" }, "Nothing logged yet.")));
  } catch (err) {
    slot.replaceChildren(frame(h("p", { class: "form-error" }, `Could not load the log: ${err.message}`)));
  }
}

// Fills `slot` with the first rows of a SUCCEEDED job's output, read by the service through the
// manifest (GET /jobs/{id}/result); values JSON cannot hold arrive as text and are shown as such.
export async function showPreview(slot, jobId) {
  try {
    const preview = await api(`/jobs/${encodeURIComponent(jobId)}/result?head=${PREVIEW_ROWS}`);
    const head = h("tr", {}, preview.columns.map((c) => h("th", { title: c.type }, c.name, h("span", { class: "type" }, shownType(c.type)))));
    const rows = preview.rows.map((row) => h("tr", {}, row.map((value) => cell(value))));
    const shown = `${fmtInt(preview.rows.length)} of ${fmtInt(preview.total_rows)} rows`;
    slot.replaceChildren(h("section", { class: "card", id: "preview" }, h("h2", {}, "First rows"),
      h("p", { class: "muted", id: "preview-count" }, `${shown}, read through the manifest's files in order.`),
      h("div", { class: "scroll" }, h("table", { class: "grid preview", id: "preview-rows" }, h("thead", {}, head), h("tbody", {}, rows)))));
  } catch (err) {
    slot.replaceChildren(h("section", { class: "card", id: "preview" }, h("h2", {}, "First rows"), h("p", { class: "form-error" }, `Could not read the output: ${err.message}`)));
  }
}

function cell(value) {
  if (value === null) return h("td", { class: "null" }, "null");
  if (typeof value === "number") return h("td", { class: "num" }, String(value));
  return h("td", {}, typeof value === "object" ? JSON.stringify(value) : String(value));
}
