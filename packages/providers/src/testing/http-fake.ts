// The shared part of the fake servers: a node:http server on 127.0.0.1 with a random port
// that records every request and can be told to fail the next n requests.
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request as the fake server received it. */
export interface RecordedRequest {
  method: string;
  /** Path and query string as sent, e.g. `/emails` or `/b/o?X-Goog-Signature=...`. */
  url: string;
  /** Path without the query string. */
  path: string;
  /** Query parameters (first value of each). */
  query: Record<string, string>;
  /** Lower-cased header names, as node:http gives them. */
  headers: IncomingHttpHeaders;
  /** The raw body. */
  body: string;
  /** The body parsed as JSON (when it is JSON) or as a form (form-encoded), else undefined. */
  json?: unknown;
  form?: Record<string, string>;
  /** The status the fake answered with. */
  status?: number;
  /** Which connection carried the request: 1 for the server's first, 2 for its second, and so on. */
  connection: number;
}

/** What every fake server returns. */
export interface FakeServer {
  /** `http://127.0.0.1:<port>`, no trailing slash. */
  url: string;
  /** Every request received, oldest first. */
  requests: RecordedRequest[];
  /**
   * Answer the next `n` requests (that reach a known route) with `status` (default 500)
   * and an error body in the fake's own format, without doing anything.
   */
  failNext(n: number, status?: number, message?: string): void;
  /**
   * Answer the next `n` requests (that reach a known route) with HTTP 429 and the fake's
   * rate-limit error, with `Retry-After: <retryAfterSeconds>` when given, doing nothing.
   */
  throttleNext(n: number, retryAfterSeconds?: number, message?: string): void;
  /**
   * Withhold the answers of the requests that arrive from now on (they are recorded and
   * acted on, as a provider that has done the work but not yet answered) until
   * `release()`. Tests kill a worker while its provider call is in flight this way.
   */
  hold(): void;
  /** Send the withheld answers (to whoever is still listening) and answer at once again. */
  release(): void;
  /** Forget recorded requests and pending failures. */
  reset(): void;
  close(): Promise<void>;
}

export interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export interface FailSpec {
  status: number;
  message: string | undefined;
  /** Headers of the answer (a 429's Retry-After). */
  headers?: Record<string, string>;
}

/**
 * Starts a fake. `handle` gets each recorded request and `takeFailure`, which it calls once
 * it has matched a route: it returns (and consumes) the pending failure, if any, for the
 * handler to answer in the fake's error format.
 */
export async function startHttpFake(
  handle: (req: RecordedRequest, takeFailure: () => FailSpec | undefined) => Reply,
  extraReset?: () => void,
): Promise<FakeServer> {
  const requests: RecordedRequest[] = [];
  let failures: FailSpec[] = [];
  let holding = false;
  const held: (() => void)[] = [];
  // Connections are kept alive between requests, as the real APIs keep them, so a
  // client's pool reuses them; each gets a number for RecordedRequest.connection.
  const connections = new WeakMap<object, number>();
  let connectionCount = 0;

  const server = createServer((req, res) => {
    let connection = connections.get(req.socket);
    if (connection === undefined) connections.set(req.socket, (connection = ++connectionCount));
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const u = new URL(req.url ?? '/', 'http://fake.invalid');
      const recorded: RecordedRequest = {
        method: req.method ?? 'GET',
        url: req.url ?? '/',
        path: u.pathname,
        query: Object.fromEntries(u.searchParams),
        headers: req.headers,
        body,
        connection,
      };
      const type = String(req.headers['content-type'] ?? '');
      if (type.includes('json') && body) {
        try {
          recorded.json = JSON.parse(body);
        } catch {
          // left undefined: the handler answers 400
        }
      } else if (type.includes('x-www-form-urlencoded')) {
        recorded.form = Object.fromEntries(new URLSearchParams(body));
      }
      requests.push(recorded);
      let reply: Reply;
      try {
        reply = handle(recorded, () => failures.shift());
      } catch (err) {
        reply = { status: 500, body: { message: `fake server error: ${(err as Error).message}` } };
      }
      recorded.status = reply.status;
      if (holding) held.push(() => send(res, reply));
      else send(res, reply);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    failNext(n, status = 500, message) {
      for (let i = 0; i < n; i++) failures.push({ status, message });
    },
    throttleNext(n, retryAfterSeconds, message) {
      const headers = retryAfterSeconds === undefined ? undefined : { 'retry-after': String(retryAfterSeconds) };
      for (let i = 0; i < n; i++) failures.push({ status: 429, message, ...(headers ? { headers } : {}) });
    },
    hold() {
      holding = true;
    },
    release() {
      holding = false;
      for (const answer of held.splice(0)) answer();
    },
    reset() {
      requests.length = 0;
      failures = [];
      holding = false;
      held.length = 0;
      extraReset?.();
    },
    close() {
      return new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((err) => (err ? reject(err) : resolve()));
      });
    },
  };
}

function send(res: ServerResponse, reply: Reply): void {
  const headers: Record<string, string> = { ...reply.headers };
  if (reply.body === undefined) {
    res.writeHead(reply.status, headers).end();
  } else if (typeof reply.body === 'string') {
    res.writeHead(reply.status, { 'content-type': 'text/plain', ...headers }).end(reply.body);
  } else {
    res.writeHead(reply.status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(reply.body));
  }
}

/** Basic auth credentials of a request, if any. */
export function basicAuth(req: RecordedRequest): { username: string; password: string } | undefined {
  const h = req.headers.authorization;
  if (!h?.startsWith('Basic ')) return undefined;
  const decoded = Buffer.from(h.slice(6), 'base64').toString('utf8');
  const i = decoded.indexOf(':');
  if (i < 0) return undefined;
  return { username: decoded.slice(0, i), password: decoded.slice(i + 1) };
}
