// What the web server logs per request: one line when it is answered, reads (the
// dashboard polls every few seconds) at debug and changes at info, so the info log of an
// open dashboard holds its changes, not its polls.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createLogger } from '@org/config';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { createApi } from '../src/index.js';

const TOKEN = 'request-logs-token-0123456789';
const auth = { authorization: `Bearer ${TOKEN}` };

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

/** The request lines an API at `level` logs for a poll, then a change. */
async function requestLines(level: string): Promise<{ level: string; method: string; url: string; status: number }[]> {
  const lines: string[] = [];
  const logger = createLogger({
    service: 'queue-web',
    level,
    format: 'json',
    destination: { write: (l: string) => void lines.push(l) },
  });
  const app = createApi({ databaseUrl: db.url('api'), apiToken: TOKEN }, { logger });
  try {
    expect((await app.inject({ method: 'GET', url: '/api/overview/live', headers: auth })).statusCode).toBe(200);
    const pause = await app.inject({
      method: 'POST',
      url: '/api/queues/store_discovery/pause',
      headers: auth,
      payload: { reason: 'logs' },
    });
    expect(pause.statusCode).toBe(200);
    await app.inject({ method: 'POST', url: '/api/queues/store_discovery/resume', headers: auth, payload: {} });
  } finally {
    await app.close();
  }
  return lines
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l.event === 'request')
    .map((l) => ({ level: String(l.level), method: String(l.method), url: String(l.url), status: Number(l.status) }));
}

it('at info: the changes, one line each; the poll is not there', async () => {
  expect(await requestLines('info')).toEqual([
    { level: 'info', method: 'POST', url: '/api/queues/store_discovery/pause', status: 200 },
    { level: 'info', method: 'POST', url: '/api/queues/store_discovery/resume', status: 200 },
  ]);
});

it('at debug: the poll too', async () => {
  expect((await requestLines('debug')).map((l) => `${l.level} ${l.method} ${l.url}`)).toEqual([
    'debug GET /api/overview/live',
    'info POST /api/queues/store_discovery/pause',
    'info POST /api/queues/store_discovery/resume',
  ]);
});
