// The REST API: JSON in and out, the session cookie sent by the browser,
// the CSRF token added to every change.  Errors become ApiError with the
// server's message and the field it names.
let csrf = null;

export class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code;
    this.field = e.field;
  }
}

export function setCsrf(token) { csrf = token; }

export async function api(method, path, body, opts = {}) {
  const headers = {};
  if (body !== undefined && !(body instanceof Blob)) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && csrf) headers['X-CSRF-Token'] = csrf;
  const r = await fetch(path, {
    method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : body instanceof Blob ? body : JSON.stringify(body),
  });
  if (opts.text) {
    const t = await r.text();
    if (!r.ok) throw new ApiError(r.status, safeJson(t));
    return t;
  }
  const data = r.status === 204 ? null : safeJson(await r.text());
  if (!r.ok) {
    if (r.status === 401 && !opts.quiet) window.dispatchEvent(new CustomEvent('privai:signed-out'));
    // the server refuses everything else while the password is one-time
    if (r.status === 403 && data && data.error && data.error.code === 'password_change_required')
      window.dispatchEvent(new CustomEvent('privai:password-change-required'));
    throw new ApiError(r.status, data);
  }
  return data;
}

// A streamed completion (server-sent events): onEvent gets each event's
// JSON as it arrives; resolves when the stream says [DONE].  A refusal
// before the stream starts is an ApiError like any other.
export async function apiStream(path, body, onEvent, signal) {
  const headers = { 'Content-Type': 'application/json' };
  if (csrf) headers['X-CSRF-Token'] = csrf;
  const r = await fetch(path, { method: 'POST', headers, credentials: 'same-origin', body: JSON.stringify(body), signal });
  if (!r.ok) {
    if (r.status === 401) window.dispatchEvent(new CustomEvent('privai:signed-out'));
    throw new ApiError(r.status, safeJson(await r.text()));
  }
  const reader = r.body.getReader(), dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const data = buf.slice(0, cut).split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n');
      buf = buf.slice(cut + 2);
      if (data === '[DONE]') return;
      if (data) onEvent(JSON.parse(data));
    }
  }
  throw new ApiError(502, { error: { message: 'the stream ended before the answer was complete' } });
}

function safeJson(t) {
  try { return t ? JSON.parse(t) : null; } catch { return null; }
}

// An upload with progress (fetch has none): resolves with the JSON reply;
// a dropped connection rejects with status 0.
export function upload(path, file, onProgress, method = 'POST') {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open(method, path);
    if (csrf) x.setRequestHeader('X-CSRF-Token', csrf);
    x.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded, e.total); };
    x.onload = () => {
      const data = safeJson(x.responseText);
      if (x.status >= 200 && x.status < 300) resolve(data); else reject(new ApiError(x.status, data));
    };
    x.onerror = () => reject(new ApiError(0, { error: { message: 'the upload was interrupted' } }));
    x.send(file);
  });
}
