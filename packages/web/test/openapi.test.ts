// The OpenAPI document (GET /api/openapi.json): every route the app registers is described
// with its method (the routes are read from Fastify itself, not listed here), the document
// is well formed, and real answers of a real database (every described operation, called
// with real data) match the schema documented for their status, checked with Ajv.
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { recordWorkerHeartbeat } from '@org/queue-client';
import { createApi } from '../src/index.js';
import { routesOf } from '../src/app.js';

const TOKEN = 'test-token-0123456789abcdef';
const auth = { authorization: `Bearer ${TOKEN}` };
const PUBLIC_FILES = readdirSync(fileURLToPath(new URL('../public/', import.meta.url)), {
  recursive: true,
  encoding: 'utf8',
});

let db: TestDatabase;
let app: FastifyInstance;
// eslint-disable-next-line @typescript-eslint/no-explicit-any
let doc: any;
beforeAll(async () => {
  db = await createTestDatabase();
  app = createApi({ databaseUrl: db.url('api'), apiToken: TOKEN, logLevel: 'silent' });
  await app.ready();
  const res = await app.inject({ method: 'GET', url: '/api/openapi.json', headers: auth });
  expect(res.statusCode).toBe(200);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  doc = res.json();
});
afterAll(async () => {
  await app?.close();
  await db?.drop();
});

/** The app's routes as Fastify prints them: a tree of path segments with their methods. */
function registeredRoutes(): { method: string; path: string }[] {
  const routes: { method: string; path: string }[] = [];
  const stack: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const m = /^((?:│ {3}| {4})*)(?:├── |└── )(.*?)(?: \(([A-Z, ]+)\))?$/.exec(line);
    if (!m) continue;
    const depth = m[1].length / 4;
    const path = (depth > 0 ? stack[depth - 1] : '') + m[2];
    stack[depth] = path;
    for (const method of (m[3] ?? '').split(', ').filter((x) => x && x !== 'HEAD'))
      routes.push({ method: method.toLowerCase(), path });
  }
  return routes;
}

/** A schema of the document, its references to components made absolute (the document is added to Ajv as 'doc'). */
const standalone = (schema: object): object =>
  JSON.parse(JSON.stringify(schema).replace(/"\$ref":"#\//g, '"$ref":"doc#/'));

const openApiPath = (path: string) => path.replace(/:(\w+)/g, '{$1}');
const described = (method: string, path: string) => Boolean(doc.paths[openApiPath(path)]?.[method]);

describe('the OpenAPI document', () => {
  it('describes every route the app registers, with its method (dashboard files aside), and nothing else', () => {
    const routes = registeredRoutes();
    // The parse reads what Fastify has: every route it finds exists, and there are many.
    expect(routes.length).toBeGreaterThan(40);
    for (const r of routes) expect(app.hasRoute({ method: r.method.toUpperCase(), url: r.path })).toBe(true);
    const api = routes.filter(
      (r) => !(r.method === 'get' && (r.path === '/' || PUBLIC_FILES.includes(r.path.slice(1)))),
    );
    expect(api.length).toBeGreaterThanOrEqual(35);
    for (const r of api) expect(described(r.method, r.path), `${r.method.toUpperCase()} ${r.path}`).toBe(true);
    // And the document describes no route the app does not have.
    const documented = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.keys(ops as object).map((method) => `${method} ${path}`),
    );
    expect(documented.sort()).toEqual(api.map((r) => `${r.method} ${openApiPath(r.path)}`).sort());
  });

  it('is OpenAPI 3.1 with valid JSON Schema 2020-12 for every parameter, body and answer', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.info.title).toBeTruthy();
    const ajv = new Ajv2020({ strict: false, validateFormats: false });
    ajv.addSchema({ $id: 'doc', ...doc });
    let schemas = 0;
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops as Record<string, Record<string, never>>)) {
        const where = `${method} ${path}`;
        expect(op.operationId, where).toMatch(/^[a-zA-Z]+$/);
        // Path parameters are exactly the path's {names}.
        const inPath = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
        const params = (op.parameters ?? []) as { in: string; name: string; schema: object }[];
        expect(
          params
            .filter((p) => p.in === 'path')
            .map((p) => p.name)
            .sort(),
          where,
        ).toEqual(inPath);
        const all: object[] = [
          ...params.map((p) => p.schema),
          ...Object.values((op.requestBody as { content?: Record<string, { schema: object }> })?.content ?? {}).map(
            (c) => c.schema,
          ),
          ...Object.values(op.responses as Record<string, { content?: Record<string, { schema: object }> }>).flatMap(
            (r) => Object.values(r.content ?? {}).map((c) => c.schema),
          ),
        ];
        for (const schema of all) {
          expect(() => ajv.compile(standalone(schema)), where).not.toThrow();
          schemas++;
        }
      }
    }
    expect(schemas).toBeGreaterThan(100);
    const operations = Object.values(doc.paths).flatMap((ops) => Object.values(ops as object));
    // Who may call each operation is the app's own access level for the route.
    for (const r of routesOf(app)) {
      const op = doc.paths[openApiPath(r.url)]?.[r.method.toLowerCase()];
      if (op) expect(op['x-access'], `${r.method} ${r.url}`).toBe(r.access);
    }
    expect(operations.filter((op) => op['x-access'] !== 'public').every((op) => op.security.length > 0)).toBe(true);
  });

  it('real answers match the schema documented for their status, for every operation', async () => {
    // Real data: tasks of several types and states, a claimed one, a dead letter, a worker.
    const enqueue = async (body: object) => {
      const res = await app.inject({ method: 'POST', url: '/api/tasks', payload: body, headers: auth });
      expect(res.statusCode, res.body).toBe(201);
      return res.json().task_id as number;
    };
    const first = await enqueue({ task_type: 'store_discovery', payload: { store: 'a', n: 1 } });
    const dead = await enqueue({ task_type: 'product_discovery', payload: { store: 'b' }, priority: 5 });
    const later = await enqueue({
      task_type: 'store_discovery',
      payload: { store: 'c' },
      scheduled_at: new Date(Date.now() + 3_600_000).toISOString(),
    });
    const cancelMe = await enqueue({ task_type: 'store_discovery', payload: { store: 'd' }, resource_key: 'r1' });
    const worker = db.pool('worker');
    await recordWorkerHeartbeat(worker, 'w-openapi', ['store_discovery', 'product_discovery'], 1000);
    await worker.query('select task_id from queues.claim_tasks($1, 1, $2, 60)', ['w-openapi', ['product_discovery']]);
    await db.query(`select queues.complete_task($1, null, 'failed')`, [dead]);
    const schedule = (await db.query<{ name: string }>('select name from schedules.schedule order by name limit 1'))
      .rows[0]?.name;
    // A provider throttle in force (a worker met a 429).
    await worker.query(
      `select * from queues.record_throttle('task_type', 'email', null, 600, 'HTTP 429', 'w-openapi')`,
    );
    // A process run (send_email), its supervisor run once as the worker would.
    const processName = 'send_email';
    const root = Number(
      (
        await db
          .pool('app')
          .query<{ id: string }>(
            `select send_email_task_id as id from comms.send_email('from@example.com', 'to@example.com', 'Hi', '<p>hi</p>')`,
          )
      ).rows[0].id,
    );
    const supervisor = await worker.query<{ task_id: string; payload: Record<string, unknown>; task_lease_id: string }>(
      `select task_id, payload, task_lease_id from queues.claim_tasks('w-p', 10, '{db_function}', 60)`,
    );
    for (const t of supervisor.rows) {
      await worker.query('select internal.run_function($1, $2)', [t.payload.db_function, t.payload]);
      await worker.query('select queues.complete_task($1, $2, null)', [t.task_id, t.task_lease_id]);
    }

    /** What to send to each operation: path values, query and body. */
    const calls: Record<string, { path?: Record<string, string | number>; query?: string; body?: unknown }[]> = {
      'get /api/tasks': [
        {},
        { query: 'task_type=store_discovery&limit=2' },
        { query: 'payload_path=store&payload_value=a' },
      ],
      'post /api/tasks': [
        { body: { task_type: 'store_discovery', payload: { store: 'e' } } },
        { body: { payload: 1 } },
        { body: { task_type: 'store_discovery', payload: { store: 'u' }, unique_key: 'openapi-u' } },
        { body: { task_type: 'store_discovery', payload: { store: 'u' }, unique_key: 'openapi-u' } },
      ],
      'get /api/tasks/counts': [{}, { query: 'window_seconds=600' }],
      'get /api/tasks/types': [{}],
      'get /api/tasks/capacity': [{}],
      'get /api/tasks/capacity/{role}': [{ path: { role: 'store_discovery' } }],
      'get /api/tasks/throughput': [{ query: 'window_seconds=3600&bucket_seconds=60' }],
      'get /api/tasks/stale': [{}],
      'post /api/tasks/recover-stale': [{ body: {} }],
      'post /api/tasks/generate/staggered': [
        { body: { task_type: 'store_discovery', payloads: [{ s: 1 }, { s: 2 }], batches: 2 } },
      ],
      'post /api/tasks/generate/resync': [{ body: { batches: 2, date: '2026-01-05' } }],
      'post /api/tasks/generate/discovery': [{ body: {} }],
      'post /api/tasks/cancel': [{ body: { task_ids: [cancelMe, 999_999] } }],
      'post /api/tasks/run-now': [{ body: { task_ids: [later] } }],
      'get /api/tasks/depth': [{}],
      'get /api/overview/live': [{}],
      'get /api/overview': [{}],
      'get /api/tasks/{id}': [{ path: { id: first } }, { path: { id: dead } }, { path: { id: 999_999 } }],
      'get /api/history': [{}],
      'get /api/dead-letters': [{}],
      'post /api/dead-letters/{id}/redrive': [{ path: { id: dead } }, { path: { id: first } }],
      'post /api/dead-letters/redrive': [{ body: { filter: { task_type: 'product_discovery' }, limit: 5 } }],
      'get /api/queues': [{}],
      'post /api/queues/{task_type}/pause': [{ path: { task_type: 'store_discovery' }, body: { reason: 'openapi' } }],
      'post /api/queues/{task_type}/resume': [{ path: { task_type: 'store_discovery' } }],
      'post /api/queues/{task_type}/timeout': [
        { path: { task_type: 'store_discovery' }, body: { timeout_seconds: 60 } },
      ],
      'put /api/queues/{task_type}/limits': [
        { path: { task_type: 'store_discovery' }, body: { scope: 'each_group', max_running: 3 } },
        { path: { task_type: 'store_discovery' }, body: { scope: 'type', max_running: 0 } },
      ],
      'get /api/limits': [{}],
      'delete /api/queues/{task_type}/limits': [
        { path: { task_type: 'store_discovery' }, query: 'scope=each_group' },
        { path: { task_type: 'no_such_type' }, query: 'scope=type' },
      ],
      'get /api/throttles': [{}],
      'post /api/throttles/clear': [
        { body: { key_kind: 'task_type', key: 'store_discovery' } },
        { body: { key_kind: 'task_type', key: 'email' } },
      ],
      'get /api/workers': [{}],
      'post /api/workers/{worker_id}/recover-stale': [{ path: { worker_id: 'w-openapi' }, body: {} }],
      'get /api/schedules': [{ query: 'runs=2' }],
      'post /api/schedules/{name}/enable': [{ path: { name: schedule ?? 'none' } }, { path: { name: 'no.such' } }],
      'post /api/schedules/{name}/disable': [{ path: { name: schedule ?? 'none' } }],
      'put /api/schedules/{name}': [
        {
          path: { name: 'openapi.nightly' },
          body: { cron: '30 2 * * *', task_type: 'store_discovery', time_zone: 'Europe/Berlin' },
        },
        {
          path: { name: 'openapi.bad' },
          body: { cron: '30 2 * * *', task_type: 'store_discovery', time_zone: 'Mars/Olympus' },
        },
      ],
      'get /api/processes': [{}],
      'get /api/processes/{process}': [{ path: { process: processName } }],
      'get /api/processes/{process}/{rootId}': [
        { path: { process: processName, rootId: root } },
        { path: { process: processName, rootId: 999_999 } },
      ],
      'get /api/session': [{}],
      'get /api/audit': [{}, { query: `task_id=${first}&limit=5` }],
      'get /api/openapi.json': [{}],
      'get /metrics': [{}],
      'get /healthz': [{}],
      'get /readyz': [{}],
    };

    const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
    ajv.addSchema({ $id: 'doc', ...doc });
    const statuses: string[] = [];
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops as Record<string, { responses: Record<string, never> }>)) {
        const key = `${method} ${path}`;
        expect(calls[key], `a call for ${key}`).toBeDefined();
        for (const call of calls[key]) {
          const url =
            path.replace(/\{(\w+)\}/g, (_m, name: string) => encodeURIComponent(String(call.path![name]))) +
            (call.query ? `?${call.query}` : '');
          const res = await app.inject({
            method: method.toUpperCase() as 'GET',
            url,
            headers: auth,
            ...(call.body === undefined ? {} : { payload: call.body as object }),
          });
          const documented = op.responses[String(res.statusCode)] as
            { content: Record<string, { schema: object }> } | undefined;
          expect(
            documented,
            `${key} answered ${res.statusCode}, which is documented: ${res.body.slice(0, 300)}`,
          ).toBeDefined();
          const [type, media] = Object.entries(documented!.content)[0];
          expect(res.headers['content-type'], key).toContain(type.split(';')[0]);
          statuses.push(`${key} ${res.statusCode}`);
          if (!type.startsWith('application/json')) continue;
          const validate = ajv.compile(standalone(media.schema));
          const body: unknown = res.json();
          expect(
            validate(body),
            `${key} ${res.statusCode}: ${ajv.errorsText(validate.errors)}\n${res.body.slice(0, 500)}`,
          ).toBe(true);
        }
      }
    }
    // Successes of every kind, and documented failures (400, 404) too.
    expect(statuses.filter((s) => / 20[01]$/.test(s)).length).toBeGreaterThanOrEqual(36);
    expect(statuses.some((s) => / 400$/.test(s))).toBe(true);
    expect(statuses.some((s) => / 404$/.test(s))).toBe(true);
  });
});
