// Spillway's page for people: a small client of the REST API (the same one the SDK and CLI use).
// No framework and no build step, so the service can serve it as is with no network at all.
// Everything from the API is put into the page as text (textContent), never as HTML: job names,
// specs and error messages are user input. Plain ES modules, one per page, loaded from /ui/static/.

import { TOKEN_KEY, token } from "./api.js";
import { clusterView } from "./cluster.js";
import { showError } from "./dom.js";
import { jobDetailView } from "./job.js";
import { jobsView } from "./jobs.js";
import { pipelineDetailView, pipelinesView } from "./pipelines.js";
import { submitView } from "./submit.js";

const PAGES = new Set(["jobs", "pipelines", "submit", "cluster"]);

// ---------------------------------------------------------------- router and token form

let leaveView = null;

function route() {
  if (leaveView) leaveView(); // close this view's streams and timers before the next one opens its own
  showError("");
  const [path, query] = (location.hash || "#/jobs").slice(1).split("?");
  const parts = path.split("/").filter(Boolean);
  const page = PAGES.has(parts[0]) ? parts[0] : "jobs";
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === page);
  const name = parts[1] ? decodeURIComponent(parts[1]) : null;
  if (page === "jobs" && name) leaveView = jobDetailView(name);
  else if (page === "pipelines") leaveView = name ? pipelineDetailView(name) : pipelinesView();
  else if (page === "submit") leaveView = submitView();
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
