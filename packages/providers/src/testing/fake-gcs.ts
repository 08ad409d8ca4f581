// A fake of Google Cloud Storage: enough of the JSON API for the SDK's `file.exists()` and
// `file.getMetadata()`, and DELETE on V4 signed URLs (XML API path `/<bucket>/<object>`).
import { createHash, createPublicKey, verify, type KeyObject } from 'node:crypto';
import { startHttpFake, type FakeServer, type RecordedRequest, type Reply } from './http-fake.js';

export interface FakeGcsOptions {
  /**
   * The service account's public key (PEM or KeyObject). When set, DELETEs on signed URLs
   * must carry a valid V4 signature (`GOOG4-RSA-SHA256`), else 403 SignatureDoesNotMatch.
   */
  publicKey?: string | KeyObject;
  /**
   * The clock signed URLs are checked against, in milliseconds (default Date.now): a test
   * moves it to use a URL after its expiry without waiting.
   */
  now?: () => number;
}

/** `url` is the endpoint: `new Storage({ apiEndpoint: fake.url })`, files-service's GCS_API_ENDPOINT. */
export interface FakeGcs extends FakeServer {
  /** Adds (or replaces) an object. */
  put(bucket: string, objectKey: string, content?: string): void;
  /** Whether the object exists. */
  has(bucket: string, objectKey: string): boolean;
  /** Every object as `<bucket>/<object_key>`, sorted. */
  list(): string[];
}

const SIGNED_PARAMS = [
  'X-Goog-Algorithm',
  'X-Goog-Credential',
  'X-Goog-Date',
  'X-Goog-Expires',
  'X-Goog-SignedHeaders',
  'X-Goog-Signature',
] as const;

function xmlError(status: number, code: string, message: string): Reply {
  return {
    status,
    headers: { 'content-type': 'application/xml; charset=UTF-8' },
    body: `<?xml version='1.0' encoding='UTF-8'?><Error><Code>${code}</Code><Message>${message}</Message></Error>`,
  };
}

function jsonError(status: number, message: string, reason: string): Reply {
  return { status, body: { error: { code: status, message, errors: [{ message, domain: 'global', reason }] } } };
}

const strictEncode = (s: string) =>
  encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

/** Checks a V4 signed request; returns the error reply, or undefined when it is valid. */
function checkSignedUrl(req: RecordedRequest, publicKey: KeyObject | undefined, now: () => number): Reply | undefined {
  const q = req.query;
  const missing = SIGNED_PARAMS.filter((p) => !q[p]);
  if (missing.length > 0) return xmlError(403, 'AccessDenied', `Anonymous caller: missing ${missing.join(', ')}`);
  if (q['X-Goog-Algorithm'] !== 'GOOG4-RSA-SHA256')
    return xmlError(400, 'InvalidArgument', 'Unsupported X-Goog-Algorithm');
  const date = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(q['X-Goog-Date'] ?? '');
  const expires = Number(q['X-Goog-Expires']);
  if (!date || !Number.isInteger(expires)) return xmlError(400, 'InvalidArgument', 'Bad X-Goog-Date or X-Goog-Expires');
  const [, y, mo, d, h, mi, s] = date;
  const signedAt = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s));
  if (now() > signedAt + expires * 1000)
    return xmlError(400, 'ExpiredToken', 'Invalid argument. The signed URL has expired.');
  if (!publicKey) return undefined;

  const signedHeaders = (q['X-Goog-SignedHeaders'] ?? '').split(';');
  const headerLines = signedHeaders.map((name) => {
    let value = String(req.headers[name] ?? '');
    if (name === 'host') value = value.replace(/:\d+$/, ''); // the SDK signs the hostname only
    return `${name}:${value.trim().replace(/\s{2,}/g, ' ')}\n`;
  });
  const canonicalQuery = Object.entries(q)
    .filter(([k]) => k !== 'X-Goog-Signature')
    .map(([k, v]) => [strictEncode(k), strictEncode(v)] as const)
    .sort((a, b) => (a[0] < b[0] ? -1 : 1))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
  const canonicalRequest = [
    req.method,
    req.path,
    canonicalQuery,
    headerLines.join(''),
    signedHeaders.join(';'),
    'UNSIGNED-PAYLOAD',
  ].join('\n');
  const credential = q['X-Goog-Credential'] ?? '';
  const scope = credential.slice(credential.indexOf('/') + 1);
  const stringToSign = [
    'GOOG4-RSA-SHA256',
    q['X-Goog-Date'],
    scope,
    createHash('sha256').update(canonicalRequest).digest('hex'),
  ].join('\n');
  const ok = verify(
    'RSA-SHA256',
    Buffer.from(stringToSign),
    publicKey,
    Buffer.from(q['X-Goog-Signature'] ?? '', 'hex'),
  );
  return ok
    ? undefined
    : xmlError(
        403,
        'SignatureDoesNotMatch',
        'The request signature we calculated does not match the signature you provided.',
      );
}

const JSON_OBJECT = /^\/storage\/v1\/b\/([^/]+)\/o\/([^/]+)$/;

/**
 * Starts a fake GCS on 127.0.0.1 (random port). Objects live in memory; add them with `put`.
 * - `GET /storage/v1/b/:bucket/o/:object` (JSON API, what `file.exists()` asks) → 200
 *   metadata or 404.
 * - `DELETE /:bucket/:object` with V4 signed-URL parameters → 204, or 404 NoSuchKey when
 *   the object is not there; unsigned → 403; expired → 400; bad signature (with
 *   `publicKey`) → 403.
 * - `failNext(n, status = 503, message?)`: the next n DELETEs answer that status (XML error).
 */
export async function startFakeGcs(options: FakeGcsOptions = {}): Promise<FakeGcs> {
  const publicKey =
    options.publicKey === undefined
      ? undefined
      : typeof options.publicKey === 'string'
        ? createPublicKey(options.publicKey)
        : options.publicKey;
  const objects = new Map<string, string>();
  const id = (bucket: string, key: string) => `${bucket}/${key}`;

  const server = await startHttpFake(
    (req, takeFailure) => {
      const json = JSON_OBJECT.exec(req.path);
      if (json && req.method === 'GET') {
        const bucket = decodeURIComponent(json[1] ?? '');
        const name = decodeURIComponent(json[2] ?? '');
        const content = objects.get(id(bucket, name));
        if (content === undefined) return jsonError(404, `No such object: ${bucket}/${name}`, 'notFound');
        return {
          status: 200,
          body: {
            kind: 'storage#object',
            id: `${bucket}/${name}/1`,
            name,
            bucket,
            size: String(Buffer.byteLength(content)),
            generation: '1',
          },
        };
      }
      if (req.method === 'DELETE' && !req.path.startsWith('/storage/')) {
        const parts = req.path.split('/').slice(1);
        const bucket = decodeURIComponent(parts[0] ?? '');
        const name = parts.slice(1).map(decodeURIComponent).join('/');
        if (!bucket || !name) return xmlError(400, 'InvalidArgument', 'DELETE needs /<bucket>/<object>');
        const bad = checkSignedUrl(req, publicKey, options.now ?? Date.now);
        if (bad) return bad;
        const failure = takeFailure();
        if (failure)
          return xmlError(failure.status, 'InternalError', failure.message ?? `fake failure (HTTP ${failure.status})`);
        if (!objects.delete(id(bucket, name))) return xmlError(404, 'NoSuchKey', 'The specified key does not exist.');
        return { status: 204 };
      }
      return jsonError(404, `fake GCS has no route ${req.method} ${req.path}`, 'notFound');
    },
    () => objects.clear(),
  );
  const failNext = server.failNext.bind(server);
  return Object.assign(server, {
    failNext: (n: number, status = 503, message?: string) => failNext(n, status, message),
    put(bucket: string, objectKey: string, content = '') {
      objects.set(id(bucket, objectKey), content);
    },
    has: (bucket: string, objectKey: string) => objects.has(id(bucket, objectKey)),
    list: () => [...objects.keys()].sort(),
  });
}
