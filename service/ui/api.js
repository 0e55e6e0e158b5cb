// The REST API and its token: the page is a client of the same API as the SDK and the CLI.

export const TOKEN_KEY = "spillway.token";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

// A refused request: the API's stable error (code, message, field) and the HTTP status, so a
// form can put the message beside the field it names.
export class ApiError extends Error {
  constructor(status, detail, path) {
    const hint = status === 401 ? " (set a token at the top right)" : "";
    super((detail ? `${detail.code}: ${detail.message}` : `HTTP ${status} for ${path}`) + hint);
    this.status = status;
    this.detail = detail || null;
  }
}

// options.json is sent as a JSON body; other options go to fetch() as they are.
export async function api(path, options = {}) {
  const { json, ...rest } = options;
  const headers = { Accept: "application/json", ...(rest.headers || {}) };
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    rest.body = JSON.stringify(json);
  }
  if (token()) headers.Authorization = `Bearer ${token()}`;
  const response = await fetch(path, { ...rest, headers });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, body && body.error, path);
  return body;
}

// EventSource cannot send an Authorization header, so the token travels as ?token=; the server
// accepts it on /events only and redacts it from its access log (service/auth.py).
export function followJob(id, { onProgress, onEnd }) {
  const query = token() ? `?token=${encodeURIComponent(token())}` : "";
  const source = new EventSource(`/jobs/${encodeURIComponent(id)}/events${query}`);
  source.addEventListener("progress", (e) => onProgress(JSON.parse(e.data)));
  source.addEventListener("end", (e) => {
    source.close(); // otherwise EventSource reconnects when the server ends the stream
    onEnd(JSON.parse(e.data));
  });
  return source;
}
