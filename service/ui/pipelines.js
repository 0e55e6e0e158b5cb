// Scheduled pipelines (REST: /pipelines): each one's schedule, next run and recent runs; one
// pipeline's run history, with a manual run for a logical date and a backfill of a range.

import { ApiError, api } from "./api.js";
import { POLL_MS, facts, fmtDuration, fmtInt, h, parseTime, section, show, showError, stateBadge, table } from "./dom.js";

// Runs shown as badges per pipeline on the list: like Airflow's recent-runs strip.
const RECENT_RUNS = 8;
const HISTORY_RUNS = 50;

const pipelinePath = (name) => `/pipelines/${encodeURIComponent(name)}`;

// "2026-05-01 02:30" in the pipeline's zone (logical dates are read there), or the browser's own.
function fmtInZone(text, timeZone) {
  const t = parseTime(text);
  if (!t) return "—";
  const parts = new Intl.DateTimeFormat("en-CA", { timeZone, year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", hourCycle: "h23" })
    .formatToParts(t).reduce((acc, p) => ({ ...acc, [p.type]: p.value }), {});
  return `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}`;
}

// The value a datetime-local input takes for "now" in the pipeline's zone (the API reads a time
// without an offset in that zone).
function nowInZone(timeZone) {
  return fmtInZone(new Date().toISOString(), timeZone).replace(" ", "T");
}

function runDuration(run) {
  const start = parseTime(run.started_at);
  const end = parseTime(run.finished_at);
  return start && end ? fmtDuration((end - start) / 1000) : "—";
}

// ---------------------------------------------------------------- the list

export function pipelinesView() {
  let closed = false;

  async function refresh() {
    try {
      const list = await api("/pipelines");
      const recent = await Promise.all(list.items.map((p) => api(`${pipelinePath(p.name)}/runs?limit=${RECENT_RUNS}`).catch(() => null)));
      if (closed) return;
      const rows = list.items.map((p, i) => [
        h("a", { href: `#/pipelines/${encodeURIComponent(p.name)}` }, p.name),
        h("code", {}, p.schedule), p.timezone,
        p.paused ? h("span", { class: "state state-paused" }, "paused") : fmtInZone(p.next_run_at, p.timezone),
        h("td", { class: "runs-strip" }, recent[i] ? runStrip(recent[i].items) : "—"),
        h("td", { class: "num" }, recent[i] ? fmtInt(recent[i].total) : "—"),
        h("td", { class: "num" }, String(p.version)),
      ]);
      show(
        h("div", { class: "toolbar" }, h("h1", {}, "Pipelines"), h("span", { class: "muted" }, `${fmtInt(list.items.length)} pipeline${list.items.length === 1 ? "" : "s"}`)),
        list.items.length
          ? h("div", { class: "card flush" }, table(["Name", "Schedule", "Zone", "Next run", "Recent runs (newest left)", "Runs", "Version"], rows, { id: "pipelines" }))
          : h("p", { class: "muted", id: "pipelines" }, "No pipelines yet. Create one with `spillway pipelines create pipeline.yaml` or POST /pipelines."));
      showError("");
    } catch (err) {
      if (!closed) showError(`Could not load pipelines: ${err.message}`);
    }
  }

  refresh();
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, POLL_MS * 2.5);
  return () => { closed = true; clearInterval(timer); };
}

function runStrip(runs) {
  if (!runs.length) return h("span", { class: "muted" }, "no runs yet");
  return runs.map((run) => h("span", { class: `run-dot state-${run.state.toLowerCase()}`, "data-state": run.state,
    title: `${run.logical_date} · ${run.state} · ${run.trigger}` }));
}

// ---------------------------------------------------------------- one pipeline

export function pipelineDetailView(name) {
  let closed = false;
  let pipeline = null;
  const runsSlot = h("div", { id: "runs-slot" });

  async function load() {
    try {
      pipeline = await api(pipelinePath(name));
      if (closed) return;
      render();
      await refreshRuns();
    } catch (err) {
      showError(`Could not load pipeline ${name}: ${err.message}`);
    }
  }

  function render() {
    const p = pipeline;
    show(
      h("p", {}, h("a", { href: "#/pipelines" }, "← all pipelines")),
      h("div", { class: "toolbar" }, h("h1", {}, p.name), p.paused ? h("span", { class: "state state-paused", id: "paused" }, "paused") : null, pauseButton(p)),
      section("Schedule", h("div", { id: "pipeline-facts" }, facts([
        ["Schedule", h("code", {}, p.schedule)], ["Time zone", p.timezone],
        ["Next run", p.paused ? "none while paused" : `${fmtInZone(p.next_run_at, p.timezone)} (${p.timezone})`],
        ["Catch-up", p.catchup], ["Max active runs", String(p.max_active_runs)],
        ["Retries", p.retries ? `${p.retries}, backoff ${fmtDuration(p.retry_backoff_s)} doubling` : "none"],
        ["Version", String(p.version)], p.owner ? ["Owner", p.owner] : null,
      ]))),
      h("div", { class: "actions" }, triggerForm(p), backfillForm(p)),
      runsSlot,
      section("Spec template", h("p", { class: "muted" }, "Rendered for each run's logical date ({{ ds }}, {{ params.* }})."),
        h("pre", { class: "spec", id: "pipeline-spec" }, JSON.stringify(p.spec, null, 2))));
  }

  async function refreshRuns() {
    try {
      const page = await api(`${pipelinePath(name)}/runs?limit=${HISTORY_RUNS}`);
      if (closed) return;
      const tz = pipeline.timezone;
      const rows = page.items.map((run) => [
        h("td", { class: "nowrap" }, fmtInZone(run.logical_date, tz)), stateBadge(run.state), run.trigger,
        h("td", { class: "attempts" }, run.attempts.length ? run.attempts.map((a) => attemptLink(a)) : "—"),
        h("td", { class: "nowrap" }, fmtInZone(run.started_at, tz)), h("td", { class: "num" }, runDuration(run)),
        h("span", { class: "reason" }, run.reason || ""), run.result_location ? h("code", {}, run.result_location) : "",
      ]);
      const count = page.total > page.items.length ? `newest ${page.items.length} of ${fmtInt(page.total)}` : `${fmtInt(page.total)}`;
      runsSlot.replaceChildren(section(`Runs (${count})`,
        page.items.length
          ? table([`Logical date (${tz})`, "State", "Trigger", "Jobs", `Started (${tz})`, "Duration", "Reason", "Result"], rows, { id: "runs" })
          : h("p", { class: "muted", id: "runs" }, "No runs yet.")));
      for (const [i, tr] of [...runsSlot.querySelectorAll("#runs tbody tr")].entries()) tr.dataset.logicalDate = page.items[i].logical_date;
      showError("");
    } catch (err) {
      if (!closed) showError(`Could not load the runs: ${err.message}`);
    }
  }

  // Pausing starts no more runs (those in flight finish); resuming runs from the next firing on.
  function pauseButton(p) {
    const button = h("button", { type: "button", id: "pause-toggle" }, p.paused ? "Resume" : "Pause");
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        pipeline = await api(`${pipelinePath(p.name)}/${p.paused ? "resume" : "pause"}`, { method: "POST" });
        if (closed) return;
        render();
        await refreshRuns();
      } catch (err) {
        showError(`Could not ${p.paused ? "resume" : "pause"} ${p.name}: ${err.message}`);
        button.disabled = false;
      }
    });
    return button;
  }

  function attemptLink(attempt) {
    const label = `#${attempt.attempt} ${attempt.state}`;
    return h("span", { class: "attempt", title: attempt.error || "" },
      attempt.job_id ? h("a", { href: `#/jobs/${encodeURIComponent(attempt.job_id)}` }, label) : label);
  }

  // A small form: inputs, a button, and a line for the API's answer (or its error) beside them.
  function actionForm(id, title, inputs, button, send) {
    const note = h("p", { class: "form-note", id: `${id}-note` });
    const submit = h("button", { type: "submit" }, button);
    const form = h("form", { class: "card action", id }, h("h2", {}, title), h("div", { class: "fields" }, inputs, submit), note);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      submit.disabled = true;
      note.className = "form-note";
      note.textContent = "…";
      try {
        note.textContent = await send();
        await refreshRuns();
      } catch (err) {
        note.className = "form-note form-error";
        note.textContent = err instanceof ApiError && err.detail ? `${err.status} ${err.detail.code}: ${err.detail.message}` : err.message;
      } finally {
        submit.disabled = false;
      }
    });
    return form;
  }

  function dateInput(id, label, value) {
    return h("label", {}, label, h("input", { type: "datetime-local", id, value, required: true, step: 60 }));
  }

  function triggerForm(p) {
    return actionForm("trigger-form", "Run now", dateInput("trigger-date", "Logical date", nowInZone(p.timezone)), "Trigger run", async () => {
      const run = await api(`${pipelinePath(p.name)}/runs`, { method: "POST", json: { logical_date: document.getElementById("trigger-date").value } });
      return `Run ${run.id} ${run.state} for ${fmtInZone(run.logical_date, p.timezone)}.`;
    });
  }

  function backfillForm(p) {
    return actionForm("backfill-form", "Backfill", [dateInput("backfill-start", "From", ""), dateInput("backfill-end", "To", nowInZone(p.timezone))], "Backfill range", async () => {
      const body = { start: document.getElementById("backfill-start").value, end: document.getElementById("backfill-end").value };
      const result = await api(`${pipelinePath(p.name)}/backfill`, { method: "POST", json: body });
      const parts = [`${result.created.length} run${result.created.length === 1 ? "" : "s"} queued`, `${result.existing.length} already there`];
      if (result.not_ended.length) parts.push(`${result.not_ended.length} not ended yet (left to the schedule)`);
      return `${parts.join(", ")}.`;
    });
  }

  load();
  const timer = setInterval(() => { if (!document.hidden && pipeline) refreshRuns(); }, POLL_MS);
  return () => { closed = true; clearInterval(timer); };
}
