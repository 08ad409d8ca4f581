// The dashboard's API client (public/lib/api-client.js) in Node, with this tab's
// sessionStorage and fetch stood in for: a 401 forgets the credential and shows the login
// only when the refused request carried the credential the tab holds now. Many requests
// sent with an old credential (or none) and refused after a new log in leave it alone.
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import { api, ApiError, authorization, onRefused, remember, token } from '../public/lib/api-client.js';

/** Requests sent and not answered yet: answer(status) answers them all at once. */
let pending: { auth: string | null; answer: (status: number) => void }[] = [];
let refusals = 0;

beforeEach(() => {
  const store = new Map<string, string>();
  vi.stubGlobal('sessionStorage', {
    getItem: (k: string) => store.get(k) ?? null,
    setItem: (k: string, v: string) => void store.set(k, v),
    removeItem: (k: string) => void store.delete(k),
  });
  vi.stubGlobal('fetch', (_url: string, init: { headers: Record<string, string> }) => {
    return new Promise<Response>((resolve) => {
      pending.push({
        auth: init.headers.authorization ?? null,
        answer: (status) =>
          resolve(
            new Response(JSON.stringify(status === 200 ? { ok: true } : { message: 'refused' }), {
              status,
              headers: { 'content-type': 'application/json' },
            }),
          ),
      });
    });
  });
  pending = [];
  refusals = 0;
  onRefused(() => refusals++);
});

afterEach(() => {
  vi.unstubAllGlobals();
});

/** Sends `n` reads with the credential of now; each settles to its status, or the error's. */
const send = (n: number) =>
  Array.from({ length: n }, () =>
    api('/api/queues').then(
      () => 200,
      (error: unknown) => (error instanceof ApiError ? error.status : -1),
    ),
  );

it('a 401 to requests sent with the credential the tab still holds forgets it and shows the login', async () => {
  remember('reader-token');
  const answers = send(20);
  expect(pending.map((p) => p.auth)).toEqual(Array(20).fill('Bearer reader-token'));
  for (const p of pending) p.answer(401);
  expect(await Promise.all(answers)).toEqual(Array(20).fill(401));
  expect(token()).toBeNull();
  expect(refusals).toBeGreaterThan(0);
});

it('a 401 to requests sent before a log in (with no credential, or another) keeps the new one', async () => {
  const answers = send(10); // not logged in yet
  remember('reader-token');
  answers.push(...send(10)); // as the reader
  remember('operator-token', 'olga'); // the operator logs in while those are under way
  const auth = authorization();
  for (const p of pending) p.answer(401);
  expect(await Promise.all(answers)).toEqual(Array(20).fill(401));
  expect(token()).toBe('operator-token');
  expect(authorization()).toBe(auth);
  expect(refusals).toBe(0);
  // And the operator's own refused request still logs out.
  const mine = send(1);
  pending.at(-1)!.answer(401);
  expect(await Promise.all(mine)).toEqual([401]);
  expect(token()).toBeNull();
  expect(refusals).toBe(1);
});
