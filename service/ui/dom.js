// Building the page (always as text, never as HTML) and formatting the API's numbers and times.

import { token } from "./api.js";

export const STATES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"];
export const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
export const POLL_MS = 2000;

export function h(tag, attrs = {}, ...children) {
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
export function show(...children) {
  document.getElementById("view").replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

export function showError(message) {
  const alert = document.getElementById("alert");
  alert.textContent = message;
  alert.hidden = !message;
}

export function parseTime(text) {
  if (!text) return null;
  return new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(text) ? text : `${text}Z`); // the API's times are UTC
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  const m = Math.floor(seconds / 60);
  if (m < 60) return `${m} min ${Math.floor(seconds % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function fmtAge(text) {
  const t = parseTime(text);
  return t ? `${fmtDuration(Math.max(0, (Date.now() - t) / 1000))} ago` : "—";
}

export function jobDuration(job) {
  const start = parseTime(job.started_at);
  if (!start) return null;
  const end = parseTime(job.finished_at) || (TERMINAL.has(job.state) ? parseTime(job.updated_at) : new Date());
  return (end - start) / 1000;
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

export const fmtInt = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US"));
export const fmtTime = (text) => (parseTime(text) ? parseTime(text).toLocaleString() : "—");
export const stateBadge = (state) => h("span", { class: `state state-${state.toLowerCase()}`, "data-state": state }, state);

// Overall: the Dask engine's distinct tasks (a fused task counts in each of its stages, once here);
// whole stages finished when the stages count in different units (a Polars read's MiB beside
// 1-of-1 steps); otherwise the stages' counts summed. As JobProgress.done/total in jobs/status.py.
export function progressTotals(progress) {
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
export function etaText(progress, state) {
  const eta = progress && progress.eta_s;
  if (TERMINAL.has(state) || eta === null || eta === undefined || eta <= 0) return "";
  return eta < 90 ? `about ${Math.max(1, Math.round(eta))} s left` : `about ${Math.round(eta / 60)} min left`;
}

// Arrow's large_string and string_view (how Polars and tpchgen lay strings out) read as string.
export const shownType = (type) => type.replace(/\blarge_(string|binary|list)\b/g, "$1").replace(/\bstring_view\b/g, "string").replace(/\butf8\b/g, "string");

// A bar is a role=progressbar element whose aria-valuenow is the whole percent, so screen readers
// (and the browser test) read the same number that the width shows.
export function bar(label) {
  return h("div", { class: "bar", role: "progressbar", "aria-label": label, "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": 0 },
    h("div", { class: "fill" }), h("span", { class: "bar-text" }));
}

export function setBar(el, value, max, text) {
  const pct = max > 0 ? Math.min(100, Math.floor((100 * value) / max)) : 0; // floor: 100 only when complete
  el.setAttribute("aria-valuenow", pct);
  // The width is exact (with a sliver for anything above zero, e.g. 70 MiB of 12 GiB); the number is floored.
  el.querySelector(".fill").style.width = max > 0 && value > 0 ? `${Math.max(0.5, Math.min(100, (100 * value) / max)).toFixed(1)}%` : "0%";
  el.querySelector(".bar-text").textContent = text === undefined ? `${pct}%` : text;
  el.classList.toggle("high", pct >= 85);
  return el;
}

export function memoryBar(label, used, limit, extra = "") {
  if (!limit) return h("span", {}, `${fmtBytes(used)} (no limit)`);
  return setBar(bar(label), used || 0, limit, `${fmtBytes(used)} / ${fmtBytes(limit)}${extra}`);
}

export function table(headers, rows, attrs = {}) {
  const body = rows.map((cells) => cells.map((c) => (c instanceof Node && c.tagName === "TD" ? c : h("td", {}, c))));
  // A column of numbers is right-aligned, and so is its header.
  const numeric = headers.map((_, i) => body.length > 0 && body.every((cells) => cells[i].classList.contains("num")));
  return h("table", { class: "grid", ...attrs },
    h("thead", {}, h("tr", {}, headers.map((c, i) => h("th", { class: numeric[i] ? "num" : null }, c)))),
    h("tbody", {}, body.map((cells) => h("tr", {}, cells))));
}

export const num = (text) => h("td", { class: "num" }, text);
export const section = (title, ...body) => h("section", { class: "card" }, h("h2", {}, title), ...body);
export const facts = (pairs) => h("dl", { class: "facts" }, pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));

export function dashboardLinks(link) {
  if (!link) return null;
  const base = link.replace(/\/status\/?$/, "").replace(/\/$/, "");
  const pages = [["Status", "/status"], ["Task stream", "/tasks"], ["Progress", "/individual-progress"], ["Workers", "/workers"]];
  // The service's dashboard proxy takes the token once as ?token= (it answers with a cookie for
  // /dashboard and a redirect without it); only ever sent to this page's own origin.
  const sameOrigin = new URL(base, window.location.href).origin === window.location.origin;
  const query = sameOrigin && token() ? `?token=${encodeURIComponent(token())}` : "";
  return h("p", { class: "dashboard" }, "Dask dashboard: ",
    pages.map(([name, path], i) => [i ? " · " : "",
      h("a", { href: base + path + query, target: "_blank", rel: "noopener noreferrer", referrerpolicy: "no-referrer" }, name)]));
}
