// Paste or edit a job spec (YAML or JSON), validate it and submit it. The text goes to the
// service as typed (POST /specs:parse reads it as the CLI reads spec files: the browser has no
// YAML 1.2 parser), then to POST /jobs:validate or POST /jobs, so every refusal is the API's own;
// it is shown next to the line that holds the field it names.

import { ApiError, api } from "./api.js";
import { fmtBytes, fmtInt, h, section, show, table } from "./dom.js";
import { lineOfField, lineOfSyntaxError } from "./spec_lines.js";

export const DRAFT_KEY = "spillway.draft";

const EXAMPLE = `# A job spec, as in examples/ (YAML or JSON). Paths are read by the service.
name: revenue_by_region
source: {format: parquet, path: var/demo/data/sales/*.parquet}
steps:
  - op: filter
    expr: "amount > 0 and region != 'test'"
  - op: groupby
    by: [region]
    aggs:
      revenue: {func: sum, column: amount}
  - {op: sort, by: [revenue], descending: true}
sink: {path: var/demo/out/revenue_ui, mode: overwrite}
`;

// A text that starts with "{" is JSON (as a .json file is for the CLI); anything else is YAML.
const mediaType = (text) => (text.trimStart().startsWith("{") ? "application/json" : "application/yaml");

export function submitView() {
  const text = h("textarea", { id: "spec-text", class: "spec-editor", rows: 22, spellcheck: "false", "aria-label": "Job spec (YAML or JSON)" });
  text.value = sessionStorage.getItem(DRAFT_KEY) || EXAMPLE;
  text.addEventListener("input", () => sessionStorage.setItem(DRAFT_KEY, text.value)); // survives moving to another page
  const validate = h("button", { type: "button", id: "validate-spec" }, "Validate");
  const submit = h("button", { type: "button", id: "submit-spec", class: "primary" }, "Submit job");
  const outcome = h("div", { id: "spec-outcome" });
  show(
    h("div", { class: "toolbar" }, h("h1", {}, "Submit a job")),
    h("section", { class: "card" },
      h("p", { class: "muted" }, "YAML or JSON, as `spillway submit` reads a spec file. Validate runs every check of a submit against the sources and says which engine would run it; nothing is stored."),
      text, h("div", { class: "toolbar" }, validate, submit, h("span", { class: "muted", id: "spec-busy" }))),
    outcome);

  async function run(button, action) {
    validate.disabled = submit.disabled = true;
    document.getElementById("spec-busy").textContent = button === validate ? "validating…" : "submitting…";
    try {
      outcome.replaceChildren(await action(text.value));
    } catch (err) {
      outcome.replaceChildren(...problem(err, text));
    } finally {
      validate.disabled = submit.disabled = false;
      document.getElementById("spec-busy").textContent = "";
    }
  }

  validate.addEventListener("click", () => run(validate, async (value) => {
    const { spec, lines } = await parse(value);
    return withLines(lines, () => api("/jobs:validate", { method: "POST", json: spec }).then(report));
  }));
  submit.addEventListener("click", () => run(submit, async (value) => {
    const { spec, lines } = await parse(value);
    const accepted = await withLines(lines, () => api("/jobs", { method: "POST", json: spec }));
    return section("Submitted", h("p", { id: "submitted" }, `Job ${accepted.id} is ${accepted.state}. `,
      h("a", { href: `#/jobs/${encodeURIComponent(accepted.id)}`, id: "submitted-link" }, "Follow it →")));
  }));
  return () => {};
}

// A parse error is placed by the line its message names; the spec's own errors by their field.
async function parse(text) {
  try {
    return await api("/specs:parse", { method: "POST", body: text, headers: { "Content-Type": mediaType(text) } });
  } catch (err) {
    if (err instanceof ApiError && err.detail) err.where = lineOfSyntaxError(err.detail.message);
    throw err;
  }
}

async function withLines(lines, request) {
  try {
    return await request();
  } catch (err) {
    if (err instanceof ApiError && err.detail) err.where = lineOfField(err.detail.field, lines);
    throw err;
  }
}

function report(r) {
  const engine = r.engine;
  return h("section", { class: "card ok", id: "validation-report" }, h("h2", {}, "Valid"),
    h("p", { id: "report-engine" }, "Would run on ", h("strong", {}, `${engine.engine} on ${engine.device}`), ` — ${engine.reason}`),
    h("p", { class: "muted" }, `Passed: ${r.checks.join(", ")}.`),
    h("h3", {}, "Inputs"), table(["Field", "Path", "Files", "Size"], r.inputs.map((i) => [h("code", {}, i.field), h("code", {}, i.path), h("td", { class: "num" }, fmtInt(i.files)), h("td", { class: "num" }, fmtBytes(i.bytes))]), { id: "report-inputs" }),
    h("h3", {}, "Output columns"), table(["Column", "Kind"], Object.entries(r.columns).map(([name, kind]) => [h("code", {}, name), kind]), { id: "report-columns" }));
}

// The error card, and the text with the error under its line (and that line selected in the editor).
function problem(err, editor) {
  const detail = err instanceof ApiError ? err.detail : null;
  if (!detail) return [h("section", { class: "card error", id: "spec-error" }, h("h2", {}, "Error"), h("pre", {}, err.message))];
  const where = err.where;
  const place = where
    ? `line ${where.line}${where.column ? `, column ${where.column}` : ""}${where.exact ? "" : ` (nearest field in the text: ${where.field})`}`
    : detail.field ? "no line: the field is not written in the text" : null;
  const card = h("section", { class: "card error", id: "spec-error", "data-status": err.status },
    h("h2", {}, `Refused (${err.status})`),
    h("dl", { class: "facts" }, h("dt", {}, "Code"), h("dd", {}, h("code", {}, detail.code)),
      detail.field ? [h("dt", {}, "Field"), h("dd", {}, h("code", { id: "error-field" }, detail.field))] : null,
      place ? [h("dt", {}, "Where"), h("dd", { id: "error-where" }, place)] : null),
    h("pre", { id: "error-message" }, detail.message));
  if (!where) return [card];
  selectLine(editor, where.line);
  return [card, annotated(editor.value, where.line, `${detail.code}: ${detail.message}`)];
}

function annotated(text, line, message) {
  const items = text.split("\n").map((content, i) => h("li", { class: i + 1 === line ? "bad" : null, "data-line": i + 1 }, content || " "));
  if (line >= 1 && line <= items.length) items.splice(line, 0, h("li", { class: "error-note", id: "error-note", role: "note" }, `↑ ${message}`));
  const list = h("ol", { class: "spec-lines", id: "spec-annotated" }, items);
  requestAnimationFrame(() => list.querySelector(".bad")?.scrollIntoView({ block: "nearest" }));
  return section("In the text", list);
}

function selectLine(editor, line) {
  const starts = [0];
  for (let i = 0; i < editor.value.length; i++) if (editor.value[i] === "\n") starts.push(i + 1);
  if (line < 1 || line > starts.length) return;
  const end = line < starts.length ? starts[line] - 1 : editor.value.length;
  editor.setSelectionRange(starts[line - 1], end);
}
