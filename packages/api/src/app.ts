/**
 * The operations API: REST endpoints over the admin functions (sql/admin), the dashboard
 * (static files in packages/api/public) and GET /metrics. Every mutating request needs
 * `Authorization: Bearer <API_TOKEN>`; every bad request gets a 4xx with a JSON message.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type pg from 'pg';
import { pino, type Logger } from 'pino';
import { z } from 'zod';
import { connect } from '@org/queue-client';
import { bearerMatches } from './auth.js';
import type { ApiConfig } from './config.js';
import { fromDatabaseError } from './http-errors.js';
import { renderApiMetrics } from './api-metrics.js';
import { PROMETHEUS_CONTENT_TYPE } from './prometheus.js';
import { Store } from './store.js';

export interface CreateApiOptions {
  /** Use this pool instead of opening one from databaseUrl (not closed with the app). */
  pool?: pg.Pool;
  /** Use this logger instead of a new pino logger at config.logLevel. */
  logger?: Logger;
}

export type ApiConfigInput = Pick<ApiConfig, 'databaseUrl' | 'apiToken'> & Partial<ApiConfig>;

const TASK_TYPE = /^[a-z][a-z0-9_]{0,62}$/;
export const TASK_STATES = ['scheduled', 'ready', 'running', 'retrying', 'succeeded', 'failed', 'abandoned', 'cancelled'] as const;

/** A query-string or path integer. */
const intString = (name: string, min: number, max: number) =>
  z
    .string()
    .regex(/^\d{1,18}$/, `${name} must be a whole number`)
    .transform(Number)
    .pipe(z.number().int().min(min, `${name} must be at least ${min}`).max(max, `${name} must be at most ${max}`));

const id = (name: string) => intString(name, 1, Number.MAX_SAFE_INTEGER);
const taskType = z.string().regex(TASK_TYPE, 'task_type must be a task type such as email or db_function');

const listQuery = z
  .object({
    task_type: taskType.optional(),
    state: z.enum(TASK_STATES, { error: `state must be one of ${TASK_STATES.join(', ')}` }).optional(),
    limit: intString('limit', 1, 500).optional(),
    before: id('before').optional(),
  })
  .strict();

const deadLetterQuery = z
  .object({ task_type: taskType.optional(), limit: intString('limit', 1, 500).optional(), before: id('before').optional() })
  .strict();

const newTask = z
  .object({
    task_type: taskType,
    payload: z.record(z.string(), z.unknown(), { error: 'payload must be a JSON object' }),
    scheduled_at: z.iso.datetime({ offset: true, error: 'scheduled_at must be an ISO 8601 date-time' }).optional(),
    priority: z.number().int('priority must be an integer').min(-1000).max(1000).optional(),
    resource_key: z.string().min(1).max(200).optional(),
    max_attempts: z.number().int('max_attempts must be an integer').min(1).max(100).optional(),
  })
  .strict();

const recoverBody = z
  .object({ dead_after_seconds: z.number().int().min(10).max(86_400).optional() })
  .strict()
  .optional();

const staggeredBody = z
  .object({
    task_type: taskType,
    payloads: z.array(z.record(z.string(), z.unknown())).min(1).max(10_000),
    batches: z.number().int('batches must be an integer').min(1).max(1000),
    start_at: z.iso.datetime({ offset: true, error: 'start_at must be an ISO 8601 date-time' }).optional(),
    period_seconds: z.number().int('period_seconds must be an integer').min(1).max(366 * 86_400).optional(),
    priority: z.number().int().min(-1000).max(1000).optional(),
  })
  .strict();

class BadRequest extends Error {
  readonly statusCode = 400;
}

/** Parses `value` with `schema`, or throws a 400 naming each bad field. */
function parse<T extends z.ZodType>(schema: T, value: unknown, where: string): z.output<T> {
  const result = schema.safeParse(value ?? {});
  if (result.success) return result.data;
  const problems = result.error.issues.map((issue) => {
    const path = issue.path.join('.');
    if (issue.code === 'unrecognized_keys') return `${where}: unknown field(s) ${issue.keys.join(', ')}`;
    return path ? `${where}.${path}: ${issue.message}` : `${where}: ${issue.message}`;
  });
  throw new BadRequest(problems.join('; '));
}

const PUBLIC_DIR = fileURLToPath(new URL('../public/', import.meta.url));
const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.ico': 'image/x-icon',
};
/** The dashboard may load nothing but itself: no CDN, no external fetch. */
const CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

export function createApi(configInput: ApiConfigInput, options: CreateApiOptions = {}): FastifyInstance {
  const config = { host: '127.0.0.1', port: 3000, logLevel: 'info', poolSize: 10, ...configInput } as ApiConfig;
  const logger =
    options.logger ??
    pino({
      level: config.logLevel,
      base: { service: 'queue-api' },
      redact: { paths: ['req.headers.authorization', 'headers.authorization'], censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    });
  const app: FastifyInstance = Fastify({ loggerInstance: logger as FastifyBaseLogger, bodyLimit: 2 * 1024 * 1024, trustProxy: false });
  const pool = options.pool ?? connect({ connectionString: config.databaseUrl, max: config.poolSize, applicationName: 'queue-api' });
  if (!options.pool) app.addHook('onClose', async () => pool.end());
  const store = new Store(pool);

  // Every mutating request needs the token; reads are open (bind to a private interface).
  app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
    if (request.method === 'GET' || request.method === 'HEAD' || request.method === 'OPTIONS') return;
    if (!bearerMatches(request.headers.authorization, config.apiToken)) {
      request.log.warn({ event: 'unauthorized', method: request.method, url: request.url }, 'missing or wrong API token');
      return reply
        .code(401)
        .header('www-authenticate', 'Bearer realm="queue-api"')
        .send({ error: 'unauthorized', message: 'Authorization: Bearer <API_TOKEN> is required for this request' });
    }
  });

  app.setErrorHandler((error: unknown, request, reply) => {
    if (error instanceof BadRequest) {
      return reply.code(400).send({ error: 'invalid_input', message: error.message });
    }
    const db = fromDatabaseError(error);
    if (db) {
      request.log.info({ event: 'request_refused', status: db.status, message: db.message }, 'database refused the request');
      return reply.code(db.status).send({ error: db.error, message: db.message });
    }
    const statusCode = (error as { statusCode?: unknown }).statusCode;
    if ((error as { code?: unknown }).code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
      return reply.code(415).send({
        error: 'bad_request',
        message: `unsupported content-type ${JSON.stringify(request.headers['content-type'] ?? '')}; send application/json`,
      });
    }
    if (typeof statusCode === 'number' && statusCode >= 400 && statusCode < 500) {
      return reply.code(statusCode).send({ error: 'bad_request', message: (error as Error).message });
    }
    request.log.error({ err: error }, 'request failed');
    return reply.code(500).send({ error: 'internal', message: 'internal error; see the API log' });
  });
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send({ error: 'not_found', message: `no route ${request.method} ${request.url.split('?')[0]}` }),
  );

  // --- tasks ---------------------------------------------------------------------------
  app.get('/api/tasks', async (request) => {
    const q = parse(listQuery, request.query, 'query');
    const tasks = await store.listTasks({ taskType: q.task_type, state: q.state, limit: q.limit, before: q.before });
    const limit = q.limit ?? 50;
    return { tasks, next_before: tasks.length === limit ? tasks[tasks.length - 1]!.task_id : null };
  });

  app.post('/api/tasks', async (request, reply) => {
    const body = parse(newTask, request.body, 'body');
    const taskId = await store.createTask(body);
    request.log.info({ event: 'task_created', task_id: taskId, task_type: body.task_type }, 'task created');
    return reply.code(201).send({ task_id: taskId });
  });

  app.get('/api/tasks/counts', async (request) => {
    const q = parse(z.object({ window_seconds: intString('window_seconds', 60, 2_592_000).optional() }).strict(), request.query, 'query');
    const counts = await store.counts(q.window_seconds);
    const byType: Record<string, Record<string, number>> = {};
    for (const c of counts) (byType[c.task_type] ??= {})[c.state] = c.count;
    return { window_seconds: q.window_seconds ?? 86_400, counts, by_type: byType };
  });

  app.get('/api/tasks/types', async () => ({ task_types: await store.taskTypes() }));

  app.get('/api/tasks/capacity', async (request) => {
    parse(z.object({}).strict(), request.query, 'query');
    return { capacity: await store.capacity() };
  });

  app.get('/api/tasks/capacity/:role', async (request) => {
    const { role } = parse(z.object({ role: z.string().regex(TASK_TYPE, 'role must be a task type such as email') }), request.params, 'path');
    const [capacity] = await store.capacity(role);
    return capacity;
  });

  app.get('/api/tasks/throughput', async (request) => {
    const q = parse(
      z.object({ window_seconds: intString('window_seconds', 60, 604_800).optional(), bucket_seconds: intString('bucket_seconds', 10, 604_800).optional() }).strict(),
      request.query,
      'query',
    );
    return {
      window_seconds: q.window_seconds ?? 3600,
      bucket_seconds: q.bucket_seconds ?? 60,
      buckets: await store.throughput(q.window_seconds, q.bucket_seconds),
    };
  });

  app.get('/api/tasks/stale', async () => ({ stale_leases: await store.staleLeases() }));

  app.post('/api/tasks/recover-stale', async (request) => {
    const body = parse(recoverBody, request.body ?? undefined, 'body');
    const recovered = await store.recoverStale(body?.dead_after_seconds);
    request.log.info({ event: 'stale_recovered', count: recovered.length }, 'stale leases recovered');
    return { recovered };
  });

  // The seed's daily resync batch: one task per payload, spread over period_seconds
  // (default a day) in `batches` batches starting at start_at (default now).
  app.post('/api/tasks/generate/staggered', async (request, reply) => {
    const body = parse(staggeredBody, request.body, 'body');
    const batches = await store.generateStaggered({
      taskType: body.task_type,
      payloads: body.payloads,
      startAt: body.start_at ?? new Date().toISOString(),
      periodSeconds: body.period_seconds ?? 86_400,
      batches: body.batches,
      priority: body.priority,
    });
    const total = batches.reduce((sum, b) => sum + b.task_count, 0);
    request.log.info({ event: 'staggered_generated', task_type: body.task_type, tasks: total, batches: batches.length }, 'staggered batches generated');
    return reply.code(201).send({ task_type: body.task_type, tasks: total, batches });
  });

  app.get('/api/tasks/:id', async (request) => {
    const { id: taskId } = parse(z.object({ id: id('task id') }), request.params, 'path');
    return store.getTask(taskId);
  });

  // --- dead letters --------------------------------------------------------------------
  app.get('/api/history', async () => store.history());

  app.get('/api/dead-letters', async (request) => {
    const q = parse(deadLetterQuery, request.query, 'query');
    const deadLetters = await store.deadLetters({ taskType: q.task_type, limit: q.limit, before: q.before });
    const limit = q.limit ?? 50;
    return { dead_letters: deadLetters, next_before: deadLetters.length === limit ? deadLetters[deadLetters.length - 1]!.task_id : null };
  });

  app.post('/api/dead-letters/:id/redrive', async (request, reply) => {
    const { id: taskId } = parse(z.object({ id: id('task id') }), request.params, 'path');
    const newTaskId = await store.redrive(taskId);
    request.log.info({ event: 'task_redriven', task_id: taskId, new_task_id: newTaskId }, 'dead letter redriven');
    return reply.code(201).send({ task_id: taskId, new_task_id: newTaskId });
  });

  // --- processes -----------------------------------------------------------------------
  app.get('/api/processes', async () => ({ processes: await store.processes() }));

  app.get('/api/processes/:process', async (request) => {
    const { process } = parse(z.object({ process: z.string().regex(/^[a-z_]{1,60}$/, 'process must be a process name such as send_email') }), request.params, 'path');
    const q = parse(z.object({ limit: intString('limit', 1, 500).optional(), before: id('before').optional() }).strict(), request.query, 'query');
    return { process, roots: await store.processRoots(process, q.limit, q.before) };
  });

  app.get('/api/processes/:process/:rootId', async (request) => {
    const p = parse(
      z.object({ process: z.string().regex(/^[a-z_]{1,60}$/, 'process must be a process name such as send_email'), rootId: id('root id') }),
      request.params,
      'path',
    );
    return { process: p.process, root_id: p.rootId, timeline: await store.processTimeline(p.process, p.rootId) };
  });

  // --- monitoring ----------------------------------------------------------------------
  app.get('/metrics', async (_request, reply) => {
    const text = await renderApiMetrics(store);
    return reply.header('content-type', PROMETHEUS_CONTENT_TYPE).send(text);
  });
  app.get('/healthz', async () => ({ ok: true }));
  app.get('/readyz', async () => {
    await store.taskTypes();
    return { ok: true };
  });

  // --- dashboard -----------------------------------------------------------------------
  const files = new Map<string, { body: Buffer; type: string }>();
  for (const name of readdirSync(PUBLIC_DIR)) {
    const type = CONTENT_TYPES[extname(name)];
    if (type) files.set(name, { body: readFileSync(join(PUBLIC_DIR, name)), type });
  }
  const serve = (name: string) => async (_request: FastifyRequest, reply: FastifyReply) => {
    const file = files.get(name)!;
    return reply
      .header('content-type', file.type)
      .header('content-security-policy', CSP)
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
      .header('cache-control', 'no-cache')
      .send(file.body);
  };
  if (files.has('index.html')) app.get('/', serve('index.html'));
  for (const name of files.keys()) app.get(`/${name}`, serve(name));

  return app;
}
