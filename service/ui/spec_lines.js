// Where in the typed text an API error belongs. The service's POST /specs:parse answers the line
// of every field path it read (`steps[2].expr` → 8); an error names a field in the same words.
// A field that is not written in the text itself (a default, or a part deeper than the text
// goes, like `sources.orders.sql`'s own line) goes to its nearest written ancestor, and says so.

// `steps[2].aggs.revenue.expr` → `steps[2].aggs.revenue` → `steps[2].aggs` → `steps[2]` → `steps`.
function parent(path) {
  const cut = Math.max(path.lastIndexOf("."), path.lastIndexOf("["));
  return cut > 0 ? path.slice(0, cut) : "";
}

// {line, field, exact} for an error's field, or null when the text holds no part of it.
export function lineOfField(field, lines) {
  if (!field || !lines) return null;
  for (let path = field; path; path = parent(path)) {
    if (Object.prototype.hasOwnProperty.call(lines, path)) return { line: lines[path], field: path, exact: path === field };
  }
  return null;
}

// A syntax error's message starts "line N, column M:" (service/spec_text.py).
export function lineOfSyntaxError(message) {
  const match = /^line (\d+)(?:, column (\d+))?:/.exec(message || "");
  return match ? { line: Number(match[1]), column: match[2] ? Number(match[2]) : null, field: null, exact: true } : null;
}
