// @ts-check
// The API client: this tab's credential (a token, with a user name or without, kept in
// sessionStorage only) and the requests that carry it. It touches no element of the page,
// so it is loaded by the dashboard and the API reference page alike.

const TOKEN_KEY = 'queue-api-token';
const USER_KEY = 'queue-api-user';

/** This tab's token, or null. */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/**
 * Keeps a credential for this tab: a token, with a user name or without.
 * @param {string} tokenValue
 * @param {string} [name]
 */
export function remember(tokenValue, name) {
  sessionStorage.setItem(TOKEN_KEY, tokenValue);
  if (name) sessionStorage.setItem(USER_KEY, name);
  else sessionStorage.removeItem(USER_KEY);
}

/** Forgets this tab's credential. */
export function forget() {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(USER_KEY);
}

/** The Authorization header for the credential of this tab: Basic with a name, else Bearer; null without one. */
export function authorization() {
  const t = token();
  if (!t) return null;
  const name = sessionStorage.getItem(USER_KEY);
  if (!name) return `Bearer ${t}`;
  const bytes = new TextEncoder().encode(`${name}:${t}`);
  return `Basic ${btoa(String.fromCharCode(...bytes))}`;
}

/** @type {() => void} */
let refused = () => {};
/**
 * What to do when the API refuses this tab's current credential (401) on a request other
 * than GET /api/session, once it is forgotten: the dashboard shows its login.
 * @param {() => void} handler
 */
export function onRefused(handler) {
  refused = handler;
}

/** An answer of the API other than 2xx: its message, and the HTTP status. */
export class ApiError extends Error {
  /**
   * @param {string} message
   * @param {number} status
   */
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

/**
 * A request to the API with this tab's credential; the parsed JSON answer (text when it is
 * not JSON). Throws an ApiError for an answer other than 2xx.
 * @param {string} path from the server's root, e.g. '/api/tasks'
 * @param {RequestInit & { headers?: Record<string, string> }} [options]
 * @returns {Promise<any>} the answer as the API documents it (GET /api/openapi.json)
 */
export async function api(path, options = {}) {
  const auth = authorization();
  const headers = { ...(options.headers ?? {}), ...(auth ? { authorization: auth } : {}) };
  // Relative to the page (no leading slash), so the dashboard works under a path prefix
  // behind a reverse proxy (https://host/queue/ serving this server's /).
  const res = await fetch(path.replace(/^\//, ''), { ...options, headers });
  /** @type {any} */
  const body = res.headers.get('content-type')?.includes('json') ? await res.json() : await res.text();
  // The credential was refused (or is needed): back to the login. Only when it is still this
  // tab's: a request sent before a log in (or with the credential before) may be answered
  // after it, and the new credential is not the one refused.
  if (res.status === 401 && path !== '/api/session' && auth === authorization()) {
    forget();
    refused();
  }
  if (!res.ok) throw new ApiError(body?.message ?? `HTTP ${res.status}`, res.status);
  return body;
}

/**
 * A change: POST with a JSON body.
 * @param {string} path
 * @param {unknown} [body]
 */
export function mutate(path, body) {
  return api(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body ?? {}),
  });
}
