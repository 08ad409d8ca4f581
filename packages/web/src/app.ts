/**
 * The web server: the operations REST API over the admin functions (sql/admin), the dashboard
 * (static files in packages/web/public) and GET /metrics. Every API route needs a credential
 * (auth.ts): a `read` user may read, an `operator` may also change; `openReads` lets GET
 * routes answer without one. Every change is recorded as a fact (admin.api_change) in its
 * own transaction. Every bad request gets a 4xx with a JSON message.
 */
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { extname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import type pg from 'pg';
import { createLogger, type Logger } from '@org/config';
import { z } from 'zod';
import { connect, isNestedDeeperThan, MAX_PAYLOAD_DEPTH } from '@org/queue-client';
import { allows, Credentials, type Level, type Principal } from './auth.js';
import { configuredUsers, type ApiConfig } from './config.js';
import { fromDatabaseError } from './http-errors.js';
import { registerMenuRoutes } from './menus-routes.js';
import { registerOpenApi } from './openapi.js';
import { renderApiMetrics } from './api-metrics.js';
import { recordedChange, Store, TASK_STATES, type ChangeMade } from './store.js';

export interface CreateApiOptions {
  /** Use this pool instead of opening one from databaseUrl (not closed with the app). */
  pool?: pg.Pool;
  /** Use this logger instead of a new pino logger at config.logLevel. */
  logger?: Logger;
}

export type ApiConfigInput = Pick<ApiConfig, 'databaseUrl'> & Partial<ApiConfig>;

/**
 * Who may call a route: `public` (anyone: probes, metrics, the dashboard's static files),
 * `read` or `operator`. Unset: `read` for GET and HEAD, `operator` for anything else. Set it
 * in a route's options: `app.get(url, { config: { access: 'public' } }, handler)`.
 */
export type Access = 'public' | Level;

declare module 'fastify' {
  interface FastifyContextConfig {
    access?: Access;
  }
  interface FastifyRequest {
    /** The user the request's credential names; null when none was needed or given (open reads). */
    apiUser: Principal | null;
  }
}

/** A route of the app, as registered. */
export interface RouteInfo {
  method: string;
  url: string;
  access: Access;
}

const ROUTES = new WeakMap<FastifyInstance, RouteInfo[]>();

/** Every route registered on an app made by createApi (HEAD routes Fastify adds left out). */
export function routesOf(app: FastifyInstance): RouteInfo[] {
  return [...(ROUTES.get(app) ?? [])];
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
const defaultAccess = (method: string): Level => (SAFE_METHODS.has(method) ? 'read' : 'operator');

/** A refusal with its status, raised inside a change so that its transaction rolls back. */
class Refused extends Error {
  constructor(
    readonly statusCode: number,
    readonly error: string,
    message: string,
  ) {
    super(message);
  }
}

/** Runs a change and records its fact in one transaction; returns the change's answer. */
export type Change = <T>(
  request: FastifyRequest,
  action: string,
  run: (store: Store) => Promise<ChangeMade<T>>,
) => Promise<T>;

const TASK_TYPE = /^[a-z][a-z0-9_]{0,62}$/;
/**
 * The task statuses of the role-based specification (its worker_tasks table), accepted as
 * `state` filters beside ours (admin.list_tasks): pending = scheduled, ready or retrying;
 * claimed = running, its run not started (no start mark) and its worker not silent;
 * completed = succeeded; stale = held by an expired lease or a silent
 * worker. failed, running and cancelled are ours already. Rows carry our own states.
 */
export const SPEC_TASK_STATUSES = ['pending', 'claimed', 'completed', 'stale'] as const;
const LIST_STATES = [...TASK_STATES, ...SPEC_TASK_STATUSES] as const;

/** A query-string or path integer. */
const intString = (name: string, min: number, max: number) =>
  z
    .string()
    .regex(/^\d{1,18}$/, `${name} must be a whole number`)
    .transform(Number)
    .pipe(z.number().int().min(min, `${name} must be at least ${min}`).max(max, `${name} must be at most ${max}`));

const id = (name: string) => intString(name, 1, Number.MAX_SAFE_INTEGER);
const taskType = z.string().regex(TASK_TYPE, 'task_type must be a task type such as email or db_function');

const isoTime = (name: string) =>
  z.iso.datetime({ offset: true, error: `${name} must be an ISO 8601 date-time with a time zone` });
const workerId = z.string().min(1, 'worker_id must not be empty').max(200, 'worker_id must be at most 200 characters');
const PAYLOAD_PATH = /^[A-Za-z0-9_-]{1,100}(\.[A-Za-z0-9_-]{1,100}){0,9}$/;

const listQuery = z
  .object({
    task_type: taskType.optional(),
    state: z.enum(LIST_STATES, { error: `state must be one of ${LIST_STATES.join(', ')}` }).optional(),
    limit: intString('limit', 1, 500).optional(),
    before: id('before').optional(),
    worker_id: workerId.optional(),
    resource_key: z.string().min(1).max(200, 'resource_key must be at most 200 characters').optional(),
    enqueued_from: isoTime('enqueued_from').optional(),
    enqueued_to: isoTime('enqueued_to').optional(),
    // A payload field: dot-separated keys (array elements by index), and its value as JSON
    // (a bare word is taken as a string).
    payload_path: z
      .string()
      .regex(PAYLOAD_PATH, 'payload_path must be 1 to 10 dot-separated keys of letters, digits, _ or -')
      .optional(),
    payload_value: z.string().max(1000, 'payload_value must be at most 1000 characters').optional(),
  })
  .strict()
  .refine((q) => (q.payload_path === undefined) === (q.payload_value === undefined), {
    message: 'payload_path and payload_value go together: give both or neither',
  });

/** A bulk action's target: a selection of task ids, or a filter with a limit. */
const selection = <F extends z.ZodRawShape>(filter: F, maxLimit: number) =>
  z
    .object({
      task_ids: z
        .array(z.number().int().positive('task_ids must be positive task ids'))
        .min(1, 'task_ids must name at least one task')
        .max(1000, 'task_ids must name at most 1000 tasks')
        .optional(),
      filter: z.object(filter).strict().optional(),
      limit: z.number().int('limit must be an integer').min(1).max(maxLimit).optional(),
      reason: z.string().max(500, 'reason must be at most 500 characters').optional(),
    })
    .strict()
    .refine((b) => (b.task_ids === undefined) !== (b.filter === undefined), {
      message: 'give either task_ids or filter (with limit)',
    })
    .refine((b) => b.filter === undefined || b.limit !== undefined, { message: 'a filter needs a limit' });

const cancelBody = selection(
  {
    task_type: taskType.optional(),
    state: z
      .enum(['waiting', 'scheduled', 'ready', 'retrying'], {
        error: 'state must be waiting, scheduled, ready or retrying',
      })
      .optional(),
  },
  1000,
);
const redriveBody = selection({ task_type: taskType.optional() }, 500);
const runNowBody = z
  .object({
    task_ids: z
      .array(z.number().int().positive('task_ids must be positive task ids'))
      .min(1, 'task_ids must name at least one task')
      .max(1000, 'task_ids must name at most 1000 tasks'),
  })
  .strict();
const pauseBody = z
  .object({ reason: z.string().max(500, 'reason must be at most 500 characters').optional() })
  .strict()
  .optional();
const timeoutBody = z
  .object({
    timeout_seconds: z
      .number()
      .min(0.001, 'timeout_seconds must be between 0.001 and 86400')
      .max(86400, 'timeout_seconds must be between 0.001 and 86400')
      .nullable(),
  })
  .strict();
// Flow limits (docs/flow-control.md, "Concurrency and rate limits"; sql/queues/limits.sql).
const limitScope = z.enum(['type', 'each_group', 'group'], {
  error: "scope must be 'type', 'each_group' or 'group'",
});
const limitGroupKey = z
  .string()
  .min(1, 'group_key must be 1 to 200 characters')
  .max(200, 'group_key must be 1 to 200 characters')
  .nullable()
  .optional();
const limitCount = (field: string) =>
  z
    .number(`${field} must be a number`)
    .int(`${field} must be a whole number`)
    .min(1, `${field} must be between 1 and 1000000`)
    .max(1_000_000, `${field} must be between 1 and 1000000`)
    .nullable()
    .optional();
const groupKeyForScope = {
  message: 'group_key is needed for scope group, and only for it',
  path: ['group_key'],
};
const limitBody = z
  .object({
    scope: limitScope,
    group_key: limitGroupKey,
    max_running: limitCount('max_running'),
    max_starts: limitCount('max_starts'),
    interval_ms: z
      .number('interval_ms must be a number')
      .int('interval_ms must be a whole number of milliseconds')
      .min(1, 'interval_ms must be between 1 and 86400000 (1 day)')
      .max(86_400_000, 'interval_ms must be between 1 and 86400000 (1 day)')
      .nullable()
      .optional(),
  })
  .strict()
  .refine((b) => (b.scope === 'group') === (b.group_key != null), groupKeyForScope)
  .refine((b) => b.max_running != null || b.max_starts != null, {
    message: 'set max_running, or max_starts with interval_ms (DELETE clears a limit)',
    path: ['max_running'],
  })
  .refine((b) => (b.max_starts == null) === (b.interval_ms == null), {
    message: 'max_starts and interval_ms go together',
    path: ['interval_ms'],
  });
const limitKeyQuery = z
  .object({ scope: limitScope, group_key: limitGroupKey })
  .strict()
  .refine((b) => (b.scope === 'group') === (b.group_key != null), groupKeyForScope);
/**
 * POST /api/throttles/clear: the throttle to clear, a task type's or a group key's
 * (docs/flow-control.md, "Provider back-pressure").
 */
const throttleClearBody = z
  .object({
    key_kind: z.enum(['task_type', 'group'], { error: "key_kind must be 'task_type' or 'group'" }),
    key: z
      .string()
      .min(1, 'key must be 1 to 200 characters, not blank')
      .max(200, 'key must be 1 to 200 characters, not blank')
      .refine((k) => k.trim() !== '', 'key must be 1 to 200 characters, not blank'),
  })
  .strict()
  .refine((b) => b.key_kind !== 'task_type' || TASK_TYPE.test(b.key), {
    message: 'task_type must be a task type such as email or db_function',
    path: ['key'],
  });
const scheduleName = z
  .string()
  .regex(/^[a-z][a-z0-9_.-]{0,99}$/, 'name must be a schedule name such as nightly.analytics');

/** A payload_value as JSON; anything that does not parse is a string. */
function jsonValue(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

const deadLetterQuery = z
  .object({
    task_type: taskType.optional(),
    limit: intString('limit', 1, 500).optional(),
    before: id('before').optional(),
  })
  .strict();

const newTask = z
  .object({
    task_type: taskType,
    payload: z.record(z.string(), z.unknown(), { error: 'payload must be a JSON object' }),
    scheduled_at: z.iso.datetime({ offset: true, error: 'scheduled_at must be an ISO 8601 date-time' }).optional(),
    priority: z.number().int('priority must be an integer').min(-1000).max(1000).optional(),
    resource_key: z.string().min(1).max(200).optional(),
    max_attempts: z.number().int('max_attempts must be an integer').min(1).max(100).optional(),
    // What flow limits count the task by within its type (sql/queues/limits.sql).
    group_key: z
      .string()
      .min(1, 'group_key must be 1 to 200 characters')
      .max(200, 'group_key must be 1 to 200 characters')
      .optional(),
    // The task's run timeout in place of its type's (sql/queues/timeouts.sql).
    timeout_ms: z
      .number('timeout_ms must be a number')
      .int('timeout_ms must be an integer')
      .min(1, 'timeout_ms must be between 1 and 86400000 (24 hours)')
      .max(86_400_000, 'timeout_ms must be between 1 and 86400000 (24 hours)')
      .optional(),
    // A unique task (sql/queues/unique.sql): at most one pending task per key.
    unique_key: z
      .string()
      .min(1, 'unique_key must be 1 to 200 characters')
      .max(200, 'unique_key must be 1 to 200 characters')
      .optional(),
    unique_policy: z
      .enum(['skip', 'replace', 'debounce'], { error: "unique_policy must be 'skip', 'replace' or 'debounce'" })
      .optional(),
    unique_period_seconds: z
      .number('unique_period_seconds must be a number')
      .min(0, 'unique_period_seconds must not be negative')
      .max(31_536_000, 'unique_period_seconds must be at most a year')
      .optional(),
    // Tasks this one waits for (sql/queues/dependencies.sql): existing task ids.
    depends_on: z
      .array(z.number().int('depends_on must hold task ids').positive('depends_on must hold task ids'), {
        error: 'depends_on must be an array of task ids',
      })
      .max(100, 'depends_on must name at most 100 tasks')
      .optional(),
  })
  .strict()
  .refine(
    (t) => t.unique_key !== undefined || (t.unique_policy === undefined && t.unique_period_seconds === undefined),
    {
      message: 'unique_policy and unique_period_seconds need a unique_key',
      path: ['unique_key'],
    },
  );

/**
 * The role-based specification's body for POST /api/tasks, the columns of its worker_tasks
 * table: role is the task type; dispensary_id is the store (payload.store_id) and the
 * resource key `store:<id>`, so one task per store runs at a time (the specification's
 * per-store locking); platform goes to payload.platform; scheduled_for is the scheduled
 * time; max_retries + 1 attempts; payload, when given, is the rest of the payload.
 */
const specTask = z
  .object({
    role: taskType,
    dispensary_id: z
      .number()
      .int('dispensary_id must be an integer')
      .positive('dispensary_id must be positive')
      .optional(),
    platform: z.string().min(1).max(20, 'platform must be at most 20 characters').optional(),
    priority: z.number().int('priority must be an integer').min(-1000).max(1000).optional(),
    scheduled_for: z.iso.datetime({ offset: true, error: 'scheduled_for must be an ISO 8601 date-time' }).optional(),
    max_retries: z.number().int('max_retries must be an integer').min(0).max(99).optional(),
    payload: z.record(z.string(), z.unknown(), { error: 'payload must be a JSON object' }).optional(),
  })
  .strict();

/** A POST /api/tasks body in either shape, as ours. */
function newTaskBody(body: unknown): z.output<typeof newTask> {
  if (body !== null && typeof body === 'object' && 'role' in body && !('task_type' in body)) {
    const spec = parse(specTask, body, 'body');
    return {
      task_type: spec.role,
      payload: {
        ...spec.payload,
        ...(spec.dispensary_id === undefined ? {} : { store_id: spec.dispensary_id }),
        ...(spec.platform === undefined ? {} : { platform: spec.platform }),
      },
      scheduled_at: spec.scheduled_for,
      priority: spec.priority,
      resource_key: spec.dispensary_id === undefined ? undefined : `store:${spec.dispensary_id}`,
      max_attempts: spec.max_retries === undefined ? undefined : spec.max_retries + 1,
    };
  }
  return parse(newTask, body, 'body');
}

/** dead_after_seconds, or the specification's threshold_minutes (1 to 1440); not both. */
const recoverBody = z
  .object({
    dead_after_seconds: z.number().int().min(10).max(86_400).optional(),
    threshold_minutes: z
      .number()
      .int('threshold_minutes must be an integer')
      .min(1, 'threshold_minutes must be at least 1')
      .max(1440, 'threshold_minutes must be at most 1440')
      .optional(),
  })
  .strict()
  .refine((b) => b.dead_after_seconds === undefined || b.threshold_minutes === undefined, {
    message: 'give dead_after_seconds or threshold_minutes, not both',
  })
  .optional();

const staggeredBody = z
  .object({
    task_type: taskType,
    payloads: z.array(z.record(z.string(), z.unknown())).min(1).max(10_000),
    batches: z.number().int('batches must be an integer').min(1).max(1000),
    start_at: z.iso.datetime({ offset: true, error: 'start_at must be an ISO 8601 date-time' }).optional(),
    period_seconds: z
      .number()
      .int('period_seconds must be an integer')
      .min(1)
      .max(366 * 86_400)
      .optional(),
    priority: z.number().int().min(-1000).max(1000).optional(),
  })
  .strict();

const emptyQuery = z.object({}).strict();
const emptyBody = z.object({}).strict().optional();
const taskIdParams = z.object({ id: id('task id') });
const taskTypeParams = z.object({ task_type: taskType });
const roleParams = z.object({ role: z.string().regex(TASK_TYPE, 'role must be a task type such as email') });
const workerIdParams = z.object({ worker_id: workerId });
const scheduleParams = z.object({ name: scheduleName });
const processName = z.string().regex(/^[a-z_]{1,60}$/, 'process must be a process name such as send_email');
const processParams = z.object({ process: processName });
const processRootParams = z.object({ process: processName, rootId: id('root id') });
const processRootsQuery = z
  .object({ limit: intString('limit', 1, 500).optional(), before: id('before').optional() })
  .strict();
const countsQuery = z.object({ window_seconds: intString('window_seconds', 60, 2_592_000).optional() }).strict();
const throughputQuery = z
  .object({
    window_seconds: intString('window_seconds', 60, 604_800).optional(),
    bucket_seconds: intString('bucket_seconds', 10, 604_800).optional(),
  })
  .strict();
const depthQuery = z
  .object({
    window_seconds: intString('window_seconds', 60, 86_400).optional(),
    bucket_seconds: intString('bucket_seconds', 10, 86_400).optional(),
  })
  .strict();
const schedulesQuery = z.object({ runs: intString('runs', 1, 20).optional() }).strict();
const auditQuery = z
  .object({
    task_id: id('task_id').optional(),
    limit: intString('limit', 1, 500).optional(),
    before: id('before').optional(),
  })
  .strict();

/**
 * Every request schema the routes parse with, for the OpenAPI document (openapi.ts). (The
 * redrive, resume and schedule handlers spell taskIdParams, taskTypeParams, scheduleParams
 * and emptyBody out inline: the same schemas.)
 */
/** PUT /api/schedules/:name: a schedule's definition (schedules.upsert_schedule). */
const scheduleBody = z
  .object({
    cron: z.string('cron must be a string'),
    task_type: taskType,
    payload: z.record(z.string(), z.unknown(), { error: 'payload must be a JSON object' }).optional(),
    priority: z.number().int('priority must be an integer').min(-1000).max(1000).optional(),
    missed_run_policy: z.string().optional(),
    time_zone: z.string('time_zone must be a string').optional(),
  })
  .strict();

const API_SCHEMAS = {
  listQuery,
  newTask,
  specTask,
  countsQuery,
  emptyQuery,
  roleParams,
  throughputQuery,
  recoverBody,
  staggeredBody,
  cancelBody,
  runNowBody,
  depthQuery,
  taskIdParams,
  deadLetterQuery,
  redriveBody,
  taskTypeParams,
  pauseBody,
  timeoutBody,
  limitBody,
  limitKeyQuery,
  throttleClearBody,
  emptyBody,
  workerIdParams,
  schedulesQuery,
  scheduleParams,
  scheduleBody,
  processParams,
  processRootsQuery,
  processRootParams,
  auditQuery,
};
export type ApiSchemas = typeof API_SCHEMAS;

class BadRequest extends Error {
  readonly statusCode = 400;
}

/**
 * How deep a request body may be nested: a task payload at the database's limit
 * (MAX_PAYLOAD_DEPTH) inside the deepest body that carries one (POST
 * /api/tasks/generate/staggered: body.payloads[i]). Deeper bodies are refused with 413
 * before any route reads them: serialising one again (JSON.stringify recurses) would run
 * out of stack.
 */
export const MAX_BODY_DEPTH = MAX_PAYLOAD_DEPTH + 2;

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
const CSP =
  "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

const PUBLIC = { config: { access: 'public' as const } };

export function createApi(configInput: ApiConfigInput, options: CreateApiOptions = {}): FastifyInstance {
  const config = { host: '127.0.0.1', port: 3000, logLevel: 'info', poolSize: 10, ...configInput };
  const logger =
    options.logger ??
    createLogger({
      service: 'queue-web',
      level: config.logLevel,
      ...(config.logFormat ? { format: config.logFormat } : {}),
    });
  // Typed as Fastify's base logger, so the app is a plain FastifyInstance (not one generic over pino's Logger).
  const loggerInstance: FastifyBaseLogger = logger;
  const credentials = new Credentials(configuredUsers(config));
  const openReads = config.openReads ?? false;
  const app: FastifyInstance = Fastify({
    loggerInstance,
    bodyLimit: 2 * 1024 * 1024,
    trustProxy: false,
    // A request id unique across restarts: the audit trail names it.
    genReqId: () => randomUUID(),
    // Logged once, when answered (below): the dashboard polls every few seconds.
    logController: new LogController({ disableRequestLogging: true }),
  });
  // One line per request, when it is answered: reads (the dashboard's polls) at debug,
  // changes at info, server errors at error; refusals log their own line (unauthorized,
  // forbidden, request_refused).
  app.addHook('onResponse', async (request, reply) => {
    const level =
      reply.statusCode >= 500 ? 'error' : request.method === 'GET' || request.method === 'HEAD' ? 'debug' : 'info';
    request.log[level](
      {
        event: 'request',
        method: request.method,
        url: request.url.split('?')[0],
        status: reply.statusCode,
        ms: Math.round(reply.elapsedTime),
      },
      `${request.method} ${request.url.split('?')[0]} ${reply.statusCode}`,
    );
  });
  const routes: RouteInfo[] = [];
  ROUTES.set(app, routes);
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) {
      if (method === 'HEAD') continue; // the HEAD twin Fastify adds to each GET
      routes.push({ method, url: route.url, access: route.config?.access ?? defaultAccess(method) });
    }
  });
  app.decorateRequest('apiUser', null);
  const pool =
    options.pool ??
    connect({ connectionString: config.databaseUrl, max: config.poolSize, applicationName: 'queue-web' });
  if (!options.pool) app.addHook('onClose', async () => pool.end());
  // Reads (every GET but readiness) go to the read replica when one is configured, so the
  // dashboard's searches and timelines do not load the database the workers claim from;
  // changes (`change`, below) always run on the primary, in a transaction with their fact.
  const readPool = config.readDatabaseUrl
    ? connect({ connectionString: config.readDatabaseUrl, max: config.poolSize, applicationName: 'queue-web-reads' })
    : undefined;
  if (readPool) app.addHook('onClose', async () => readPool.end());
  const store = new Store(readPool ?? pool);

  // Every route needs a credential unless it is public, or a read while reads are open; a
  // change needs an operator. A request that presents a credential must present a right one.
  app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
    reply.header('x-request-id', request.id);
    const access = request.routeOptions.config?.access ?? defaultAccess(request.method);
    if (access === 'public') return;
    const header = request.headers.authorization;
    if (header === undefined && access === 'read' && openReads) return;
    const user = credentials.authenticate(header);
    if (!user) {
      request.log.warn(
        { event: 'unauthorized', method: request.method, url: request.url.split('?')[0] },
        header === undefined ? 'no API credential' : 'wrong API credential',
      );
      return reply
        .code(401)
        .header('www-authenticate', 'Bearer realm="queue-web"')
        .send({
          error: 'unauthorized',
          message:
            header === undefined
              ? 'this request needs a credential: Authorization: Bearer <token> (or Basic with name:token)'
              : 'the credential was refused (unknown or wrong token): send Authorization: Bearer <token>',
        });
    }
    request.apiUser = user;
    if (!allows(user.level, access)) {
      request.log.warn(
        { event: 'forbidden', user: user.name, method: request.method, url: request.url.split('?')[0] },
        'API user may not make this request',
      );
      return reply.code(403).send({
        error: 'forbidden',
        message: `user ${user.name} has level ${user.level}; this request needs an ${access}`,
      });
    }
  });

  const change: Change = async (request, action, run) => {
    const user = request.apiUser;
    // The hook lets no change through without an operator; this keeps it so if a route says otherwise.
    if (!user || !allows(user.level, 'operator')) throw new Refused(403, 'forbidden', 'changes need an operator');
    return recordedChange(
      pool,
      {
        userName: user.name,
        userLevel: user.level,
        requestId: String(request.id),
        method: request.method,
        route: request.routeOptions.url ?? request.url.split('?')[0]!,
      },
      action,
      run,
    );
  };

  // Every JSON body, before any route sees it: JSON.parse does not recurse, the rest does.
  app.addHook('preValidation', async (request: FastifyRequest, reply: FastifyReply) => {
    if (typeof request.body === 'object' && request.body !== null && isNestedDeeperThan(request.body, MAX_BODY_DEPTH)) {
      return reply.code(413).send({
        error: 'too_large',
        message: `body is nested deeper than ${MAX_BODY_DEPTH} levels (a task payload may be nested ${MAX_PAYLOAD_DEPTH} levels deep)`,
      });
    }
  });

  app.setErrorHandler((error: unknown, request, reply) => {
    if (error instanceof Refused) {
      return reply.code(error.statusCode).send({ error: error.error, message: error.message });
    }
    if (error instanceof BadRequest) {
      return reply.code(400).send({ error: 'invalid_input', message: error.message });
    }
    const db = fromDatabaseError(error);
    if (db) {
      request.log.info(
        { event: 'request_refused', status: db.status, message: db.message },
        'database refused the request',
      );
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
    // Whether a value appears in any payload is the payload's content: operators only.
    if (q.payload_path !== undefined && !(request.apiUser && allows(request.apiUser.level, 'operator'))) {
      throw new Refused(403, 'forbidden', 'payload search by value (payload_path, payload_value) needs an operator');
    }
    const tasks = await store.listTasks({
      taskType: q.task_type,
      state: q.state,
      limit: q.limit,
      before: q.before,
      workerId: q.worker_id,
      resourceKey: q.resource_key,
      enqueuedFrom: q.enqueued_from,
      enqueuedTo: q.enqueued_to,
      payloadPath: q.payload_path?.split('.'),
      payloadValue: q.payload_value === undefined ? undefined : jsonValue(q.payload_value),
    });
    const limit = q.limit ?? 50;
    return { tasks, next_before: tasks.length === limit ? tasks[tasks.length - 1]!.task_id : null };
  });

  app.post('/api/tasks', async (request, reply) => {
    const body = newTaskBody(request.body);
    if (body.unique_key !== undefined) {
      const uniqueKey = body.unique_key;
      const answer = await change(request, 'create_task', async (tx) => {
        const made = await tx.createUniqueTask({ ...body, unique_key: uniqueKey });
        const { payload: _payload, ...input } = body;
        const taskIds = [made.task_id, ...(made.replaced_task_id ? [made.replaced_task_id] : [])];
        return { answer: made, taskIds, taskType: body.task_type, input };
      });
      request.log.info(
        { event: 'task_created', task_id: answer.task_id, task_type: body.task_type, outcome: answer.outcome },
        'unique task enqueued',
      );
      // 201 when a task was created (inserted, or replacing the pending one); 200 when skipped.
      return reply.code(answer.outcome === 'skipped' ? 200 : 201).send(answer);
    }
    const { task_id: taskId } = await change(request, 'create_task', async (tx) => {
      const id = await tx.createTask(body);
      const { payload: _payload, ...input } = body;
      return { answer: { task_id: id }, taskIds: [id], taskType: body.task_type, input };
    });
    request.log.info({ event: 'task_created', task_id: taskId, task_type: body.task_type }, 'task created');
    return reply.code(201).send({ task_id: taskId });
  });

  app.get('/api/tasks/counts', async (request) => {
    const q = parse(countsQuery, request.query, 'query');
    const counts = await store.counts(q.window_seconds);
    const byType: Record<string, Record<string, number>> = {};
    for (const c of counts) (byType[c.task_type] ??= {})[c.state] = c.count;
    return { window_seconds: q.window_seconds ?? 86_400, counts, by_type: byType };
  });

  app.get('/api/tasks/types', async () => ({ task_types: await store.taskTypes() }));

  app.get('/api/tasks/capacity', async (request) => {
    parse(emptyQuery, request.query, 'query');
    return { capacity: await store.capacity() };
  });

  app.get('/api/tasks/capacity/:role', async (request) => {
    const { role } = parse(roleParams, request.params, 'path');
    const [capacity] = await store.capacity(role);
    return capacity;
  });

  app.get('/api/tasks/throughput', async (request) => {
    const q = parse(throughputQuery, request.query, 'query');
    return {
      window_seconds: q.window_seconds ?? 3600,
      bucket_seconds: q.bucket_seconds ?? 60,
      buckets: await store.throughput(q.window_seconds, q.bucket_seconds),
    };
  });

  app.get('/api/tasks/stale', async () => ({ stale_leases: await store.staleLeases() }));

  app.post('/api/tasks/recover-stale', async (request) => {
    const body = parse(recoverBody, request.body ?? undefined, 'body');
    const deadAfterSeconds =
      body?.threshold_minutes === undefined ? body?.dead_after_seconds : body.threshold_minutes * 60;
    const { recovered } = await change(request, 'recover_stale_leases', async (tx) => {
      const leases = await tx.recoverStale(deadAfterSeconds);
      return { answer: { recovered: leases }, taskIds: leases.map((l) => l.task_id), input: body ?? {} };
    });
    request.log.info({ event: 'stale_recovered', count: recovered.length }, 'stale leases recovered');
    return { recovered };
  });

  // The seed's daily resync batch: one task per payload, spread over period_seconds
  // (default a day) in `batches` batches starting at start_at (default now).
  app.post('/api/tasks/generate/staggered', async (request, reply) => {
    const body = parse(staggeredBody, request.body, 'body');
    const answer = await change(request, 'generate_staggered_tasks', async (tx) => {
      const batches = await tx.generateStaggered({
        taskType: body.task_type,
        payloads: body.payloads,
        startAt: body.start_at ?? new Date().toISOString(),
        periodSeconds: body.period_seconds ?? 86_400,
        batches: body.batches,
        priority: body.priority,
      });
      const total = batches.reduce((sum, b) => sum + b.task_count, 0);
      const { payloads, ...input } = body;
      return {
        answer: { task_type: body.task_type, tasks: total, batches },
        taskType: body.task_type,
        input: { ...input, payload_count: payloads.length },
      };
    });
    request.log.info(
      { event: 'staggered_generated', task_type: body.task_type, tasks: answer.tasks, batches: answer.batches.length },
      'staggered batches generated',
    );
    return reply.code(201).send(answer);
  });

  registerMenuRoutes(app, { parse, change });
  // Bulk actions: a selection (task_ids) or a filter with a limit. Each answers per task.
  app.post('/api/tasks/cancel', async (request) => {
    const body = parse(cancelBody, request.body, 'body');
    const answer = await change(request, body.task_ids ? 'cancel_tasks' : 'cancel_tasks_matching', async (tx) => {
      const results = body.task_ids
        ? await tx.cancel(body.task_ids, body.reason)
        : await tx.cancelMatching({
            taskType: body.filter!.task_type,
            state: body.filter!.state,
            limit: body.limit!,
            reason: body.reason,
          });
      const cancelled = results.filter((r) => r.result === 'cancelled').length;
      return {
        answer: { cancelled, results },
        taskIds: results.map((r) => r.task_id),
        taskType: body.filter?.task_type,
        input: body,
      };
    });
    request.log.info(
      { event: 'tasks_cancelled', count: answer.cancelled, asked: answer.results.length },
      'tasks cancelled',
    );
    return answer;
  });

  app.post('/api/tasks/run-now', async (request) => {
    const body = parse(runNowBody, request.body, 'body');
    const answer = await change(request, 'run_tasks_now', async (tx) => {
      const results = await tx.runNow(body.task_ids);
      const runNow = results.filter((r) => r.result === 'run_now').length;
      return { answer: { run_now: runNow, results }, taskIds: results.map((r) => r.task_id), input: body };
    });
    request.log.info(
      { event: 'tasks_run_now', count: answer.run_now, asked: answer.results.length },
      'scheduled tasks run now',
    );
    return answer;
  });

  app.get('/api/tasks/depth', async (request) => {
    const q = parse(depthQuery, request.query, 'query');
    return {
      window_seconds: q.window_seconds ?? 3600,
      bucket_seconds: q.bucket_seconds ?? 60,
      buckets: await store.depth(q.window_seconds, q.bucket_seconds),
    };
  });

  // The overview's live part, polled every 5 s: pending work by type and state, pauses and
  // live workers per type (one read of the claim index).
  app.get('/api/overview/live', async (request) => {
    parse(emptyQuery, request.query, 'query');
    // replica_lag_seconds: how far behind the read replica is (null: reads go to the primary).
    const [queues, lag] = await Promise.all([store.queues(), readPool ? store.replicaLagSeconds() : null]);
    return { generated_at: new Date().toISOString(), queues, replica_lag_seconds: lag };
  });

  // Everything the overview shows, in one request (the page reads it every minute: its
  // windows read recent completions).
  app.get('/api/overview', async (request) => {
    parse(emptyQuery, request.query, 'query');
    const [counts, throughput, depth, capacity, queues] = await Promise.all([
      store.counts(),
      store.throughput(3600, 60),
      store.depth(3600, 60),
      store.capacity(),
      store.queues(),
    ]);
    return {
      generated_at: new Date().toISOString(),
      window_seconds: 86_400,
      counts,
      throughput,
      depth,
      capacity,
      queues,
    };
  });

  app.get('/api/tasks/:id', async (request) => {
    const { id: taskId } = parse(taskIdParams, request.params, 'path');
    return store.getTask(taskId);
  });

  // --- dead letters --------------------------------------------------------------------
  app.get('/api/history', async () => store.history());

  app.get('/api/dead-letters', async (request) => {
    const q = parse(deadLetterQuery, request.query, 'query');
    const deadLetters = await store.deadLetters({ taskType: q.task_type, limit: q.limit, before: q.before });
    const limit = q.limit ?? 50;
    return {
      dead_letters: deadLetters,
      next_before: deadLetters.length === limit ? deadLetters[deadLetters.length - 1]!.task_id : null,
    };
  });

  app.post('/api/dead-letters/:id/redrive', async (request, reply) => {
    const { id: taskId } = parse(z.object({ id: id('task id') }), request.params, 'path');
    const { new_task_id: newTaskId } = await change(request, 'redrive_task', async (tx) => {
      const made = await tx.redrive(taskId);
      return { answer: { task_id: taskId, new_task_id: made }, taskIds: [taskId, made], input: { task_id: taskId } };
    });
    request.log.info({ event: 'task_redriven', task_id: taskId, new_task_id: newTaskId }, 'dead letter redriven');
    return reply.code(201).send({ task_id: taskId, new_task_id: newTaskId });
  });

  app.post('/api/dead-letters/redrive', async (request) => {
    const body = parse(redriveBody, request.body, 'body');
    const answer = await change(request, body.task_ids ? 'redrive_tasks' : 'redrive_tasks_matching', async (tx) => {
      const results = body.task_ids
        ? await tx.redriveMany(body.task_ids)
        : await tx.redriveMatching({ taskType: body.filter!.task_type, limit: body.limit! });
      const redriven = results.filter((r) => r.result === 'redriven').length;
      return {
        answer: { redriven, results },
        taskIds: results.flatMap((r) => (r.new_task_id ? [r.task_id, r.new_task_id] : [r.task_id])),
        taskType: body.filter?.task_type,
        input: body,
      };
    });
    request.log.info(
      { event: 'tasks_redriven', count: answer.redriven, asked: answer.results.length },
      'dead letters redriven',
    );
    return answer;
  });

  // --- queue controls and workers ------------------------------------------------------
  app.get('/api/queues', async () => ({ queues: await store.queues() }));

  app.post('/api/queues/:task_type/pause', async (request) => {
    const { task_type } = parse(taskTypeParams, request.params, 'path');
    const body = parse(pauseBody, request.body ?? undefined, 'body');
    const answer = await change(request, 'pause_task_type', async (tx) => {
      const pauseId = await tx.pause(task_type, body?.reason);
      return { answer: { task_type, paused: true, pause_id: pauseId }, taskType: task_type, input: body ?? {} };
    });
    request.log.info({ event: 'task_type_paused', task_type, pause_id: answer.pause_id }, 'claiming paused');
    return answer;
  });

  // A task type's run timeout (docs/flow-control.md, "Run timeouts"); null clears it.
  app.post('/api/queues/:task_type/timeout', async (request) => {
    const { task_type } = parse(z.object({ task_type: taskType }), request.params, 'path');
    const body = parse(timeoutBody, request.body, 'body');
    const answer = await change(request, 'set_task_type_timeout', async (tx) => {
      await tx.setTimeout(task_type, body.timeout_seconds);
      return { answer: { task_type, timeout_seconds: body.timeout_seconds }, taskType: task_type, input: body };
    });
    request.log.info({ event: 'task_type_timeout_set', ...answer }, 'run timeout set');
    return answer;
  });

  // Flow limits per task type and group key (docs/flow-control.md, "Concurrency and rate limits").
  app.get('/api/limits', async () => ({ limits: await store.limits() }));

  app.put('/api/queues/:task_type/limits', async (request) => {
    const { task_type } = parse(z.object({ task_type: taskType }), request.params, 'path');
    const body = parse(limitBody, request.body, 'body');
    const answer = await change(request, 'set_task_limit', async (tx) => {
      await tx.setLimit({ task_type, ...body });
      const set = {
        task_type,
        scope: body.scope,
        group_key: body.group_key ?? null,
        max_running: body.max_running ?? null,
        max_starts: body.max_starts ?? null,
        interval_ms: body.interval_ms ?? null,
      };
      return { answer: set, taskType: task_type, input: body };
    });
    request.log.info({ event: 'task_limit_set', ...answer }, 'flow limit set');
    return answer;
  });

  app.delete('/api/queues/:task_type/limits', async (request) => {
    const { task_type } = parse(z.object({ task_type: taskType }), request.params, 'path');
    const query = parse(limitKeyQuery, request.query, 'query');
    const answer = await change(request, 'clear_task_limit', async (tx) => {
      const cleared = await tx.clearLimit(task_type, query.scope, query.group_key);
      return {
        answer: { task_type, scope: query.scope, group_key: query.group_key ?? null, cleared },
        taskType: task_type,
        input: query,
      };
    });
    request.log.info({ event: 'task_limit_cleared', ...answer }, 'flow limit cleared');
    return answer;
  });

  // Provider back-pressure (docs/flow-control.md): the throttles in force, and an
  // operator's clear of one (its tasks are claimed again at once).
  app.get('/api/throttles', async () => ({ throttles: await store.throttles() }));

  app.post('/api/throttles/clear', async (request) => {
    const body = parse(throttleClearBody, request.body, 'body');
    const answer = await change(request, 'clear_throttle', async (tx) => {
      const cleared = await tx.clearThrottle(body.key_kind, body.key);
      return {
        answer: { key_kind: body.key_kind, key: body.key, cleared },
        ...(body.key_kind === 'task_type' ? { taskType: body.key } : {}),
        input: body,
      };
    });
    request.log.info({ event: 'throttle_cleared', ...answer }, 'throttle cleared');
    return answer;
  });

  app.post('/api/queues/:task_type/resume', async (request) => {
    const { task_type } = parse(z.object({ task_type: taskType }), request.params, 'path');
    parse(z.object({}).strict().optional(), request.body ?? undefined, 'body');
    const answer = await change(request, 'resume_task_type', async (tx) => {
      const resumed = await tx.resume(task_type);
      return { answer: { task_type, paused: false, was_paused: resumed }, taskType: task_type };
    });
    request.log.info({ event: 'task_type_resumed', task_type, was_paused: answer.was_paused }, 'claiming resumed');
    return answer;
  });

  app.get('/api/workers', async () => ({ workers: await store.workers() }));

  app.post('/api/workers/:worker_id/recover-stale', async (request) => {
    const { worker_id } = parse(workerIdParams, request.params, 'path');
    const body = parse(recoverBody, request.body ?? undefined, 'body');
    const { recovered } = await change(request, 'recover_worker_leases', async (tx) => {
      const leases = await tx.recoverWorker(worker_id, body?.dead_after_seconds);
      return {
        answer: { worker_id, recovered: leases },
        taskIds: leases.map((l) => l.task_id),
        workerId: worker_id,
        input: body ?? {},
      };
    });
    request.log.info(
      { event: 'stale_recovered', worker_id, count: recovered.length },
      'stale leases of a worker recovered',
    );
    return { worker_id, recovered };
  });

  // --- schedules -----------------------------------------------------------------------
  app.get('/api/schedules', async (request) => {
    const q = parse(schedulesQuery, request.query, 'query');
    return { schedules: await store.schedules(q.runs) };
  });

  // Create or update a schedule (schedules.upsert_schedule): the cron is read on the wall
  // clock of time_zone (an IANA name, default UTC). A bad definition (an unknown zone, a
  // malformed cron) is 400 and writes nothing; a worker-only task type is 403.
  app.put('/api/schedules/:name', async (request) => {
    const { name } = parse(z.object({ name: scheduleName }), request.params, 'path');
    const body = parse(scheduleBody, request.body, 'body');
    const answer = await change(request, 'upsert_schedule', async (tx) => {
      const problem = await tx.upsertSchedule({ name, ...body, payload: body.payload ?? {} });
      // A refused definition changed nothing, so no fact (the transaction rolls back).
      if (problem) throw new BadRequest(problem);
      const { payload: _payload, ...input } = body;
      const schedule = (await tx.schedules(1)).find((s) => s.name === name);
      return { answer: { schedule }, scheduleName: name, taskType: body.task_type, input };
    });
    request.log.info({ event: 'schedule_upserted', name, time_zone: body.time_zone ?? 'UTC' }, 'schedule upserted');
    return answer;
  });

  for (const [action, enabled] of [
    ['enable', true],
    ['disable', false],
  ] as const) {
    app.post(`/api/schedules/:name/${action}`, async (request) => {
      const { name } = parse(z.object({ name: scheduleName }), request.params, 'path');
      parse(z.object({}).strict().optional(), request.body ?? undefined, 'body');
      const answer = await change(request, `${action}_schedule`, async (tx) => {
        const problem = await tx.setScheduleEnabled(name, enabled);
        // No such schedule: nothing changed, so no fact (the transaction rolls back).
        if (problem) throw new Refused(404, 'not_found', problem);
        return { answer: { name, enabled }, scheduleName: name };
      });
      request.log.info({ event: enabled ? 'schedule_enabled' : 'schedule_disabled', name }, `schedule ${action}d`);
      return answer;
    });
  }

  // --- who is asking, and the audit trail -------------------------------------------------
  // The dashboard asks this first: 200 with the user (null: an anonymous reader while reads
  // are open), 401 when it must log in.
  app.get('/api/session', (request) => {
    parse(emptyQuery, request.query, 'query');
    return Promise.resolve({
      user: request.apiUser?.name ?? null,
      level: request.apiUser?.level ?? null,
      can_change: Boolean(request.apiUser && allows(request.apiUser.level, 'operator')),
      open_reads: openReads,
    });
  });

  app.get('/api/audit', async (request) => {
    const q = parse(auditQuery, request.query, 'query');
    const changes = await store.apiChanges({ taskId: q.task_id, limit: q.limit, before: q.before });
    const limit = q.limit ?? 50;
    return {
      changes,
      next_before: changes.length === limit ? changes[changes.length - 1]!.api_change_id : null,
    };
  });

  // --- processes -----------------------------------------------------------------------
  app.get('/api/processes', async () => ({ processes: await store.processes() }));

  app.get('/api/processes/:process', async (request) => {
    const { process } = parse(processParams, request.params, 'path');
    const q = parse(processRootsQuery, request.query, 'query');
    return { process, roots: await store.processRootsRanked(process, q.limit, q.before) };
  });

  app.get('/api/processes/:process/:rootId', async (request) => {
    const p = parse(processRootParams, request.params, 'path');
    const [tree, timeline] = await Promise.all([
      store.processTree(p.process, p.rootId),
      store.processTimeline(p.process, p.rootId),
    ]);
    return { process: p.process, root_id: p.rootId, tree, timeline };
  });

  // --- monitoring ----------------------------------------------------------------------
  // Public: Prometheus scrapes it without a credential; it holds counts per task type and
  // durations, no payload, id or user (docs/operations.md, "Credentials").
  app.get('/metrics', PUBLIC, async (_request, reply) => {
    const { text, contentType } = await renderApiMetrics(store);
    return reply.header('content-type', contentType).send(text);
  });
  app.get('/healthz', PUBLIC, () => Promise.resolve({ ok: true }));
  app.get('/readyz', PUBLIC, async () => {
    // Ready when the primary answers (changes need it), and the replica too if reads go there.
    await Promise.all([new Store(pool).taskTypes(), readPool ? store.taskTypes() : null]);
    return { ok: true };
  });

  // The OpenAPI 3.1 document of every route above (openapi.ts).
  registerOpenApi(
    app,
    API_SCHEMAS,
    (method, url) => routesOf(app).find((r) => r.method === method && r.url === url)?.access,
  );

  // --- dashboard -----------------------------------------------------------------------
  // Every file of public/ and its folders (the dashboard's modules are in lib/ and pages/),
  // read once at start; each is a route of its own, so no path from a request reaches the disk.
  const files = new Map<string, { body: Buffer; type: string }>();
  for (const path of readdirSync(PUBLIC_DIR, { recursive: true, encoding: 'utf8' })) {
    const type = CONTENT_TYPES[extname(path)];
    if (type) files.set(path.split(sep).join('/'), { body: readFileSync(join(PUBLIC_DIR, path)), type });
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
  // The dashboard's files hold no data: they load without a credential and show the login.
  if (files.has('index.html')) app.get('/', PUBLIC, serve('index.html'));
  for (const name of files.keys()) app.get(`/${name}`, PUBLIC, serve(name));

  return app;
}
