// One job: state, progress per stage, resources, error, result manifest and spec.

import { api, followJob } from "./api.js";
import { showLogs, showPreview } from "./job_output.js";
import { DRAFT_KEY } from "./submit.js";
import {
  POLL_MS, TERMINAL, bar, dashboardLinks, etaText, facts, fmtAge, fmtBytes, fmtDuration, fmtInt, fmtTime, h, jobDuration, num,
  progressTotals, section, setBar, show, showError, shownType, stateBadge, table,
} from "./dom.js";


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

export // The submit page opens on this job's spec, as JSON (the page has no YAML writer; the form reads both).
function editAsNew(job) {
  sessionStorage.setItem(DRAFT_KEY, JSON.stringify(job.spec, (k, v) => (v === null ? undefined : v), 2));
  location.hash = "#/submit";
}

export function jobDetailView(id) {
  let stream = null;
  let timer = null;
  let closed = false;

  function render(job) {
    const previewSlot = job.state === "SUCCEEDED" && job.result ? h("div", { id: "preview-slot" }) : null;
    const logsSlot = h("div", { id: "logs-slot" });
    const header = h("div", { class: "toolbar" },
      h("h1", {}, job.name), h("span", { id: "job-state" }, stateBadge(job.state)),
      TERMINAL.has(job.state) ? null : cancelButton(job, (j) => { stop(); render(j); }),
      h("button", { type: "button", id: "edit-spec", onclick: () => editAsNew(job) }, "Edit as a new job"));
    show(
      h("p", {}, h("a", { href: "#/jobs" }, "← all jobs")),
      header, dashboardLinks(job.links && job.links.dashboard), errorSection(job.error),
      section("Job", h("div", { id: "job-facts" }, jobFacts(job))),
      h("div", { id: "progress-slot", "data-state": job.state }, stagesSection(job.progress, job.state)), resourcesSection(job.resources), resultSection(job.result),
      previewSlot, logsSlot,
      section("Spec", h("p", { class: "muted" }, "As stored, with unset (null) fields left out."),
        h("pre", { class: "spec", id: "job-spec" }, JSON.stringify(job.spec, (k, v) => (v === null ? undefined : v), 2))));
    if (previewSlot) showPreview(previewSlot, job.id);
    showLogs(logsSlot, job.id);
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
