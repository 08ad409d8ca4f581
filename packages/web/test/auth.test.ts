// Credentials and the audit trail, against a real test database as the API role. The
// routes are enumerated from the app (routesOf), not listed by hand: every non-public route
// refuses a request without a credential (401), a read user may read every GET route and
// gets 403 on every change route, an operator's change leaves exactly one fact naming it
// (admin.api_change) and a refused change leaves none. The API database user cannot
// update, delete or insert audit facts except through admin.record_api_change.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { ConfigError, createApi, loadApiConfig, routesOf, type RouteInfo } from '../src/index.js';
import { enqueueAsOwner } from './support/worker-only.js';

const OPERATOR = { name: 'olga', level: 'operator' as const, token: 'olga-token-0123456789abcdef' };
const READER = { name: 'rita', level: 'read' as const, token: 'rita-token-0123456789abcdef' };
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const basic = (name: string, token: string) => ({
  authorization: `Basic ${Buffer.from(`${name}:${token}`).toString('base64')}`,
});
const AS_OPERATOR = bearer(OPERATOR.token);
const AS_READER = bearer(READER.token);

let db: TestDatabase;
let app: FastifyInstance;
let openApp: FastifyInstance;
beforeAll(async () => {
  db = await createTestDatabase();
  app = createApi({ databaseUrl: db.url('api'), users: [OPERATOR, READER], logLevel: 'silent' });
  openApp = createApi({ databaseUrl: db.url('api'), users: [OPERATOR, READER], openReads: true, logLevel: 'silent' });
  await Promise.all([app.ready(), openApp.ready()]);
});
afterAll(async () => {
  await app?.close();
  await openApp?.close();
  await db?.drop();
});

async function reset(): Promise<void> {
  await db.query('delete from queues.worker');
  for (const t of ['queues.task_type_resumed', 'queues.task_type_paused', 'queues.task', 'admin.api_change']) {
    await db.query(`alter table ${t} disable trigger forbid_update`);
    await db.query(`truncate ${t} cascade`);
    await db.query(`alter table ${t} enable trigger forbid_update`);
  }
}

/** Everything a change could touch, to show that nothing did. */
async function snapshot() {
  const { rows } = await db.query(`select
    (select count(*)::int from queues.task) as tasks, (select count(*)::int from queues.task_end) as completed,
    (select count(*)::int from queues.task_type_paused) as paused, (select count(*)::int from queues.task_type_resumed) as resumed,
    (select count(*)::int from queues.task_run_now) as run_now, (select count(*)::int from queues.task_lease_revocation) as revoked,
    (select count(*)::int from queues.task_redriven) as redriven,
    (select count(*)::int from schedules.schedule_version) as schedule_versions,
    (select count(*)::int from admin.api_change) as audit_facts`);
  return rows[0];
}

async function facts() {
  const { rows } = await db.query<{
    user_name: string;
    user_level: string;
    method: string;
    route: string;
    request_id: string;
    action: string;
    task_ids: string[];
    task_type: string | null;
    schedule_name: string | null;
    worker_id: string | null;
    answer: unknown;
  }>('select * from admin.api_change order by api_change_id');
  return rows;
}

/** A task that failed for good (a dead letter). */
async function deadLetter(): Promise<number> {
  // One attempt: a failure then ends it (the default retries it).
  const id = await enqueueAsOwner(db, { task_type: 'store_discovery', payload: {}, max_attempts: 1 });
  await db.query(`select queues.complete_task($1, null, 'failed')`, [id]);
  return id;
}

interface Fixture {
  task: number;
  scheduled: number;
  dead: number;
  dead2: number;
  /** A send_email process's root. */
  root: number;
}

/** Rows every route can act on: tasks, dead letters, a schedule, a stale worker. */
async function fixture(): Promise<Fixture> {
  const task = await enqueueAsOwner(db, { task_type: 'store_discovery', payload: { email: 'a@example.com' } });
  const scheduled = await enqueueAsOwner(db, {
    task_type: 'store_discovery',
    payload: {},
    scheduled_at: new Date(Date.now() + 3_600_000).toISOString(),
  });
  const dead = await deadLetter();
  const dead2 = await deadLetter();
  await db.query(
    `select * from schedules.upsert_schedule('nightly.report', '0 2 * * *', 'analytics_refresh', '{}'::jsonb)`,
  );
  await db.pool('worker').query(`select queues.record_worker_heartbeat('w-stale', '{store_discovery}')`);
  await db.query(`update queues.worker set last_seen_at = now() - interval '1 hour'`);
  const { rows } = await db
    .pool('app')
    .query(`select * from comms.send_email('a@example.com', 'b@example.com', 'Hi', '<p>hi</p>')`);
  return { task, scheduled, dead, dead2, root: Number(rows[0].send_email_task_id) };
}

/** A route's URL with its parameters filled from the fixture. */
function fill(route: RouteInfo, f: Fixture): string {
  const values: Record<string, string> = {
    id: String(route.url.startsWith('/api/dead-letters') ? f.dead : f.task),
    role: 'store_discovery',
    task_type: 'store_discovery',
    worker_id: 'w-stale',
    name: 'nightly.report',
    process: 'send_email',
    rootId: String(f.root),
  };
  // Routes whose change is named in the query string.
  const queries: Record<string, string> = { 'DELETE /api/queues/:task_type/limits': '?scope=type' };
  const path = route.url.replace(/:([A-Za-z_]+)/g, (_m, name: string) => {
    expect(values, `a value for :${name} in ${route.url}`).toHaveProperty(name);
    return values[name];
  });
  return path + (queries[`${route.method} ${route.url}`] ?? '');
}

/** A valid body for each change route, by route; a change route missing here fails the test. */
function bodyFor(route: RouteInfo, f: Fixture): unknown {
  const bodies: Record<string, unknown> = {
    'POST /api/tasks': { task_type: 'store_discovery', payload: { n: 1 } },
    'POST /api/tasks/recover-stale': { dead_after_seconds: 10 },
    'POST /api/tasks/generate/staggered': { task_type: 'store_discovery', payloads: [{ a: 1 }, { a: 2 }], batches: 2 },
    'POST /api/tasks/generate/resync': { batches: 2 },
    'POST /api/tasks/generate/discovery': {},
    'POST /api/tasks/cancel': { task_ids: [f.task], reason: 'audit test' },
    'POST /api/tasks/run-now': { task_ids: [f.scheduled] },
    'POST /api/dead-letters/:id/redrive': undefined,
    'POST /api/dead-letters/redrive': { task_ids: [f.dead2] },
    'POST /api/queues/:task_type/pause': { reason: 'audit test' },
    'POST /api/queues/:task_type/resume': {},
    'POST /api/queues/:task_type/timeout': { timeout_seconds: 30 },
    'POST /api/throttles/clear': { key_kind: 'task_type', key: 'store_discovery' },
    'PUT /api/queues/:task_type/limits': { scope: 'type', max_running: 5 },
    'DELETE /api/queues/:task_type/limits': undefined,
    'POST /api/workers/:worker_id/recover-stale': { dead_after_seconds: 10 },
    'POST /api/schedules/:name/enable': {},
    'POST /api/schedules/:name/disable': {},
    'PUT /api/schedules/:name': { cron: '0 3 * * *', task_type: 'analytics_refresh', time_zone: 'Europe/Berlin' },
  };
  const key = `${route.method} ${route.url}`;
  expect(bodies, `a test body for the change route ${key}`).toHaveProperty([key]);
  return bodies[key];
}

const send = (
  target: FastifyInstance,
  route: RouteInfo,
  url: string,
  headers: Record<string, string>,
  body?: unknown,
) => target.inject({ method: route.method as 'GET', url, headers, payload: body as never });

const apiRoutes = () => routesOf(app).filter((r) => r.access !== 'public');
const readRoutes = () => apiRoutes().filter((r) => r.method === 'GET');
const changeRoutes = () => apiRoutes().filter((r) => r.method !== 'GET');

describe('credentials', () => {
  beforeEach(reset);

  it('lists the routes; only probes, metrics and the dashboard files are public', () => {
    const routes = routesOf(app);
    expect(routes.length).toBeGreaterThan(30);
    const open = routes.filter((r) => r.access === 'public').map((r) => r.url);
    for (const url of open)
      expect(url).toMatch(/^\/(healthz|readyz|metrics|((lib|pages)\/)?[a-z-]*(\.(js|css|html))?)$/);
    expect(changeRoutes().every((r) => r.access === 'operator')).toBe(true);
    expect(readRoutes().every((r) => r.access === 'read')).toBe(true);
    expect(changeRoutes().length).toBeGreaterThanOrEqual(14);
  });

  it('every API route answers 401 without a credential, with a JSON message and WWW-Authenticate', async () => {
    const f = await fixture();
    const before = await snapshot();
    for (const route of apiRoutes()) {
      const url = fill(route, f);
      for (const headers of [{}, bearer('x'), bearer(OPERATOR.token.replace(/.$/, 'X'))]) {
        const res = await send(app, route, url, headers, route.method === 'GET' ? undefined : bodyFor(route, f));
        expect(res.statusCode, `${route.method} ${url} ${JSON.stringify(headers)}`).toBe(401);
        expect(res.headers['www-authenticate']).toBe('Bearer realm="queue-web"');
        expect(res.json()).toMatchObject({ error: 'unauthorized', message: expect.stringMatching(/Bearer/) });
      }
    }
    // Unknown paths too: nothing is said about what exists without a credential.
    expect((await app.inject({ method: 'GET', url: '/api/nope' })).statusCode).toBe(401);
    expect(await snapshot()).toEqual(before);
  });

  it('a wrong token of the same length is refused (401), as is a right token under another name', async () => {
    const sameLength = OPERATOR.token.slice(0, -1) + (OPERATOR.token.endsWith('f') ? 'e' : 'f');
    expect(sameLength).toHaveLength(OPERATOR.token.length);
    for (const headers of [
      bearer(sameLength),
      basic(OPERATOR.name, sameLength),
      basic(READER.name, OPERATOR.token),
      basic('nobody', OPERATOR.token),
      { authorization: `Basic ${OPERATOR.token}` },
      { authorization: 'Token abc' },
    ]) {
      const res = await app.inject({ method: 'GET', url: '/api/tasks', headers });
      expect(res.statusCode, JSON.stringify(headers)).toBe(401);
    }
    const basicOk = await app.inject({ method: 'GET', url: '/api/session', headers: basic('olga', OPERATOR.token) });
    expect(basicOk.json()).toEqual({ user: 'olga', level: 'operator', can_change: true, open_reads: false });
  });

  it('a read user reads every GET route (200) and gets 403 on every change route, changing nothing', async () => {
    const f = await fixture();
    for (const route of readRoutes()) {
      const url = fill(route, f);
      const res = await send(app, route, url, AS_READER);
      expect(res.statusCode, `${url}: ${res.body}`).toBe(200);
    }
    const before = await snapshot();
    for (const route of changeRoutes()) {
      const url = fill(route, f);
      const res = await send(app, route, url, AS_READER, bodyFor(route, f));
      expect(res.statusCode, `${route.method} ${url}`).toBe(403);
      expect(res.json()).toEqual({
        error: 'forbidden',
        message: 'user rita has level read; this request needs an operator',
      });
    }
    expect(await snapshot()).toEqual(before);
    expect((await app.inject({ method: 'GET', url: '/api/session', headers: AS_READER })).json()).toEqual({
      user: 'rita',
      level: 'read',
      can_change: false,
      open_reads: false,
    });
  });

  it('payload search by value is for operators only, also when reads are open', async () => {
    const f = await fixture();
    const url = '/api/tasks?payload_path=email&payload_value=a@example.com';
    const reader = await app.inject({ method: 'GET', url, headers: AS_READER });
    expect(reader.statusCode).toBe(403);
    expect(reader.json().message).toMatch(/payload search by value .* needs an operator/);
    const anonymous = await openApp.inject({ method: 'GET', url });
    expect(anonymous.statusCode).toBe(403);
    expect((await openApp.inject({ method: 'GET', url, headers: AS_READER })).statusCode).toBe(403);
    const operator = await app.inject({ method: 'GET', url, headers: AS_OPERATOR });
    expect(operator.statusCode).toBe(200);
    expect(operator.json().tasks.map((t: { task_id: number }) => t.task_id)).toEqual([f.task]);
    // Other filters stay readable.
    expect((await app.inject({ method: 'GET', url: '/api/tasks?state=ready', headers: AS_READER })).statusCode).toBe(
      200,
    );
  });

  it('open reads: GET routes answer without a credential; changes and wrong credentials still do not', async () => {
    const f = await fixture();
    for (const route of readRoutes()) {
      const res = await send(openApp, route, fill(route, f), {});
      expect(res.statusCode, route.url).toBe(200);
    }
    const before = await snapshot();
    for (const route of changeRoutes()) {
      const res = await send(openApp, route, fill(route, f), {}, bodyFor(route, f));
      expect(res.statusCode, route.url).toBe(401);
    }
    expect(await snapshot()).toEqual(before);
    expect(
      (await openApp.inject({ method: 'GET', url: '/api/tasks', headers: bearer('wrong-token-0123456789') }))
        .statusCode,
    ).toBe(401);
    expect((await openApp.inject({ method: 'GET', url: '/api/session' })).json()).toEqual({
      user: null,
      level: null,
      can_change: false,
      open_reads: true,
    });
  });
});

describe('audit trail', () => {
  beforeEach(reset);

  it('each change route, made by an operator, leaves exactly one fact naming the user, the request and what changed', async () => {
    const f = await fixture();
    for (const route of changeRoutes()) {
      const url = fill(route, f);
      const before = (await facts()).length;
      const res = await send(app, route, url, AS_OPERATOR, bodyFor(route, f));
      expect(res.statusCode, `${route.method} ${url}: ${res.body}`).toBeLessThan(300);
      const after = await facts();
      expect(after.length, `${route.method} ${route.url} leaves one fact`).toBe(before + 1);
      const fact = after[after.length - 1];
      expect(fact).toMatchObject({
        user_name: 'olga',
        user_level: 'operator',
        method: route.method,
        route: route.url,
        request_id: res.headers['x-request-id'],
      });
      expect(fact.answer, route.url).toEqual(res.json());
    }
    const all = await facts();
    const byRoute = (url: string) => all.find((x) => x.route === url)!;
    expect(byRoute('/api/tasks/cancel')).toMatchObject({ action: 'cancel_tasks', task_ids: [String(f.task)] });
    expect(byRoute('/api/tasks/run-now')).toMatchObject({ action: 'run_tasks_now', task_ids: [String(f.scheduled)] });
    expect(byRoute('/api/dead-letters/:id/redrive').task_ids).toContain(String(f.dead));
    expect(byRoute('/api/dead-letters/:id/redrive').task_ids).toHaveLength(2);
    expect(byRoute('/api/queues/:task_type/pause')).toMatchObject({
      action: 'pause_task_type',
      task_type: 'store_discovery',
    });
    expect(byRoute('/api/schedules/:name/disable')).toMatchObject({
      action: 'disable_schedule',
      schedule_name: 'nightly.report',
    });
    expect(byRoute('/api/workers/:worker_id/recover-stale')).toMatchObject({ worker_id: 'w-stale' });
    expect(byRoute('/api/schedules/:name')).toMatchObject({
      action: 'upsert_schedule',
      schedule_name: 'nightly.report',
    });
    // The request ids are unique.
    expect(new Set(all.map((x) => x.request_id)).size).toBe(all.length);
  });

  it('a refused change (4xx) leaves no fact', async () => {
    const f = await fixture();
    const before = await snapshot();
    for (const [url, body, status] of [
      ['/api/queues/no_such_type/pause', {}, 400],
      ['/api/schedules/no.such.schedule/enable', {}, 404],
      [`/api/dead-letters/${f.task}/redrive`, undefined, 400],
      ['/api/tasks', { task_type: 'email', payload: {} }, 403],
      ['/api/tasks/cancel', { task_ids: [] }, 400],
    ] as const) {
      const res = await app.inject({ method: 'POST', url, headers: AS_OPERATOR, payload: body as never });
      expect(res.statusCode, `${url}: ${res.body}`).toBe(status);
    }
    expect(await snapshot()).toEqual(before);
  });

  it('no change without its fact: when the fact cannot be written, the change rolls back', async () => {
    const f = await fixture();
    const before = await snapshot();
    await db.query(`revoke execute on function admin.record_api_change(
      text, text, text, text, text, text, bigint[], text, text, text, jsonb, jsonb) from "${db.dbUsers.api}"`);
    try {
      for (const [url, body] of [
        ['/api/tasks/cancel', { task_ids: [f.task] }],
        ['/api/queues/store_discovery/pause', {}],
        ['/api/tasks', { task_type: 'store_discovery', payload: {} }],
        [`/api/dead-letters/${f.dead}/redrive`, undefined],
      ] as const) {
        const res = await app.inject({ method: 'POST', url, headers: AS_OPERATOR, payload: body as never });
        expect(res.statusCode, `${url}: ${res.body}`).toBe(403);
        expect(res.json().message).toMatch(/record_api_change/);
      }
    } finally {
      await db.query(`grant execute on function admin.record_api_change(
        text, text, text, text, text, text, bigint[], text, text, text, jsonb, jsonb) to "${db.dbUsers.api}"`);
    }
    expect(await snapshot()).toEqual(before);
  });

  it('concurrent changes of one task: each request leaves its own fact with its own answer, and one cancelled it', async () => {
    const f = await fixture();
    const results = await Promise.all(
      Array.from({ length: 20 }, () =>
        app.inject({
          method: 'POST',
          url: '/api/tasks/cancel',
          headers: AS_OPERATOR,
          payload: { task_ids: [f.task] },
        }),
      ),
    );
    expect(results.map((r) => r.statusCode)).toEqual(Array(20).fill(200));
    const all = await facts();
    expect(all).toHaveLength(20);
    expect(new Set(all.map((x) => x.request_id))).toEqual(new Set(results.map((r) => r.headers['x-request-id'])));
    // Each fact holds its own request's answer.
    const byRequest = new Map(results.map((r) => [r.headers['x-request-id'], r.json()]));
    for (const fact of all) expect(fact.answer).toEqual(byRequest.get(fact.request_id));
    const outcomes = all.map((x) => (x.answer as { results: { result: string }[] }).results[0].result);
    expect(outcomes.filter((o) => o === 'cancelled')).toHaveLength(1);
    const { rows } = await db.query<{ n: number }>(
      `select count(*)::int as n from queues.task_end where task_id = $1 and outcome = 'cancelled'`,
      [f.task],
    );
    expect(rows[0].n).toBe(1);
  });

  it('GET /api/audit lists the changes newest first, and those of one task', async () => {
    const f = await fixture();
    const cancel = await app.inject({
      method: 'POST',
      url: '/api/tasks/cancel',
      headers: AS_OPERATOR,
      payload: { task_ids: [f.task], reason: 'not needed' },
    });
    expect(cancel.statusCode).toBe(200);
    const pause = await app.inject({
      method: 'POST',
      url: '/api/queues/store_discovery/pause',
      headers: AS_OPERATOR,
      payload: {},
    });
    expect(pause.statusCode).toBe(200);
    const all = await app.inject({ method: 'GET', url: '/api/audit', headers: AS_READER });
    expect(all.statusCode).toBe(200);
    expect(all.json().changes.map((c: { action: string }) => c.action)).toEqual(['pause_task_type', 'cancel_tasks']);
    const one = (await app.inject({ method: 'GET', url: `/api/audit?task_id=${f.task}`, headers: AS_READER })).json();
    expect(one.changes).toHaveLength(1);
    expect(one.changes[0]).toMatchObject({
      user_name: 'olga',
      action: 'cancel_tasks',
      route: '/api/tasks/cancel',
      task_ids: [f.task],
      input: { task_ids: [f.task], reason: 'not needed' },
      answer: { cancelled: 1, results: [{ task_id: f.task, result: 'cancelled' }] },
    });
    const paged = (await app.inject({ method: 'GET', url: '/api/audit?limit=1', headers: AS_READER })).json();
    expect(paged.changes).toHaveLength(1);
    const next = (
      await app.inject({ method: 'GET', url: `/api/audit?limit=1&before=${paged.next_before}`, headers: AS_READER })
    ).json();
    expect(next.changes[0].action).toBe('cancel_tasks');
    expect((await app.inject({ method: 'GET', url: '/api/audit?task_id=x', headers: AS_READER })).statusCode).toBe(400);
  });

  it('the API database user cannot update, delete or insert facts, and nobody may update one', async () => {
    const f = await fixture();
    await app.inject({
      method: 'POST',
      url: '/api/tasks/cancel',
      headers: AS_OPERATOR,
      payload: { task_ids: [f.task] },
    });
    const api = db.pool('api');
    for (const sql of [
      `update admin.api_change set user_name = 'mallory'`,
      'delete from admin.api_change',
      'truncate admin.api_change',
      `insert into admin.api_change (user_name, user_level, request_id, method, route, action, answer)
         values ('mallory', 'operator', 'r', 'POST', '/x', 'x', '{}')`,
      'select * from admin.api_change',
    ])
      await expect(api.query(sql), sql).rejects.toMatchObject({ code: '42501' });
    // The owner's update is refused by the append-only trigger.
    await expect(db.query(`update admin.api_change set user_name = 'mallory'`)).rejects.toMatchObject({
      code: '55000',
    });
    expect((await facts()).map((x) => x.user_name)).toEqual(['olga']);
  });

  it('admin.record_api_change refuses bad input with the conventions SQLSTATEs', async () => {
    const api = db.pool('api');
    const call = (args: unknown[]) =>
      api.query(
        'select admin.record_api_change($1, $2, $3, $4, $5, $6, $7::bigint[], $8, $9, $10, $11::jsonb, $12::jsonb)',
        args,
      );
    const ok = ['olga', 'operator', 'req-1', 'POST', '/api/x', 'do_x', [1, 1, 2], null, null, null, '{}', '{}'];
    const { rows } = await call(ok);
    expect(rows).toHaveLength(1);
    expect((await facts())[0].task_ids).toEqual(['1', '2']);
    for (const [index, value, code] of [
      [0, null, '22004'],
      [1, 'admin', '22023'],
      [3, 'GET', '22023'],
      [5, 'Drop Table', '22023'],
      [6, [1, null], '22004'],
      [10, '[]', '22023'],
      [11, null, '22004'],
    ] as const) {
      const args = [...ok];
      args[index] = value as never;
      await expect(call(args), `argument ${index}`).rejects.toMatchObject({ code });
    }
  });
});

describe('configuration of users', () => {
  it('API_USERS, API_USERS_FILE and API_TOKEN together; API_OPEN_READS', () => {
    const dir = mkdtempSync(join(tmpdir(), 'api-users-'));
    try {
      const file = join(dir, 'users');
      writeFileSync(file, `# operators\nolga:operator:${OPERATOR.token}\n\n`);
      const config = loadApiConfig({
        DATABASE_URL: 'postgres://u@h/db',
        API_TOKEN: 'legacy-token-0123456789',
        API_USERS: `rita:read:${READER.token}, bob:read:bob-token:with:colons-0123`,
        API_USERS_FILE: file,
        API_OPEN_READS: 'true',
      });
      expect(config.users).toEqual([READER, { name: 'bob', level: 'read', token: 'bob-token:with:colons-0123' }]);
      expect(config.usersFile).toEqual([OPERATOR]);
      expect(config.openReads).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    [{}, /API_TOKEN, API_USERS or API_USERS_FILE: is required/],
    [{ API_USERS: 'olga:admin:0123456789abcdef0' }, /^API_USERS: entry 1 \(olga\): level must be read or operator$/],
    [{ API_USERS: 'olga:read:short' }, /^API_USERS: entry 1 \(olga\): token must be 16/],
    [{ API_USERS: 'olga' }, /^API_USERS: entry 1: must be name:level:token$/],
    [
      { API_USERS: `a:read:${READER.token},b:operator:${READER.token}` },
      /^API_USERS: user b has the token of another user$/,
    ],
    [{ API_USERS: `a:read:${READER.token},a:operator:${OPERATOR.token}` }, /^API_USERS: user a is defined twice$/],
    [{ API_USERS_FILE: '/nonexistent/users' }, /^API_USERS_FILE: cannot be read \(ENOENT\)/],
    [{ API_TOKEN: OPERATOR.token, API_OPEN_READS: 'yes' }, /^API_OPEN_READS: must be true or false/],
  ])('refuses %j', (env, problem) => {
    try {
      loadApiConfig({ DATABASE_URL: 'postgres://u@h/db', ...env });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).problems).toContainEqual(expect.stringMatching(problem));
      // Tokens are never echoed.
      expect((error as ConfigError).message).not.toContain(READER.token);
    }
  });
});
