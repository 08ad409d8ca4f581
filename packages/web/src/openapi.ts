/**
 * The OpenAPI 3.1 document of the web server, served at GET /api/openapi.json and shown by
 * the dashboard's reference page (public/api.html). Generated from the zod schemas the
 * routes parse their input with (app.ts, menus-routes.ts) and the schemas of their answers
 * (api-responses.ts), with zod's own JSON Schema output (z.toJSONSchema, draft 2020-12,
 * the dialect of OpenAPI 3.1). test/openapi.test.ts checks that every route the app
 * registers is described here and that real answers match their documented schemas.
 */
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { ApiSchemas } from './app.js';
import { errorBody, responses } from './api-responses.js';
import { discoveryBody, resyncBody } from './menus-routes.js';

type Method = 'get' | 'post' | 'put' | 'delete';

interface Answer {
  description: string;
  schema?: z.ZodType;
  /** Not JSON: the content type of a text answer. */
  text?: string;
}

/** One operation: a route of the app and what it takes and answers. */
export interface Operation {
  method: Method;
  /** The path as the app registers it (`:name` parameters). */
  path: string;
  summary: string;
  tag: string;
  /** Changes something: needs the operator's credential. */
  change?: boolean;
  params?: z.ZodType;
  query?: z.ZodType;
  body?: z.ZodType;
  answers: Record<number, Answer>;
}

const ok = (schema: z.ZodType, description = 'OK'): Record<number, Answer> => ({ 200: { description, schema } });
const created = (schema: z.ZodType, description = 'Created'): Record<number, Answer> => ({
  201: { description, schema },
});

/** The operations, in the order the reference page shows them. */
export function operations(s: ApiSchemas): Operation[] {
  const t = 'tasks';
  return [
    {
      method: 'get',
      path: '/api/tasks',
      tag: t,
      summary: 'List tasks, newest first, by type, state, worker, resource key, enqueue time or a payload field',
      query: s.listQuery,
      answers: ok(responses.taskList),
    },
    {
      method: 'post',
      path: '/api/tasks',
      tag: t,
      change: true,
      summary:
        "Enqueue a task; with a unique_key, at most one pending task per key (skip, replace or debounce); with depends_on, a task that waits for those tasks (fan-in); or the role-based specification's body (role, dispensary_id, ...)",
      body: z.union([s.newTask, s.specTask]),
      answers: {
        201: {
          description: 'Created (with a unique_key: inserted, or replacing the pending task)',
          schema: z.union([responses.taskCreated, responses.uniqueTask]),
        },
        200: { description: 'Skipped: a task with the unique_key is pending; its id', schema: responses.uniqueTask },
      },
    },
    {
      method: 'get',
      path: '/api/tasks/counts',
      tag: t,
      summary: 'Tasks by type and state (completed ones within the window)',
      query: s.countsQuery,
      answers: ok(responses.counts),
    },
    {
      method: 'get',
      path: '/api/tasks/types',
      tag: t,
      summary: 'The registered task types',
      answers: ok(responses.taskTypes),
    },
    {
      method: 'get',
      path: '/api/tasks/capacity',
      tag: t,
      summary: 'Backlog, throughput and workers needed, per task type',
      query: s.emptyQuery,
      answers: ok(responses.capacityList),
    },
    {
      method: 'get',
      path: '/api/tasks/capacity/:role',
      tag: t,
      summary: 'Backlog, throughput and workers needed for one task type (scale a role on workers_needed)',
      params: s.roleParams,
      answers: ok(responses.capacity),
    },
    {
      method: 'get',
      path: '/api/tasks/throughput',
      tag: t,
      summary: 'Completions per bucket, by type and outcome',
      query: s.throughputQuery,
      answers: ok(responses.throughput),
    },
    {
      method: 'get',
      path: '/api/tasks/stale',
      tag: t,
      summary: 'Leases of workers that stopped heartbeating',
      answers: ok(responses.staleLeases),
    },
    {
      method: 'post',
      path: '/api/tasks/recover-stale',
      tag: t,
      change: true,
      summary: 'Revoke the leases of dead workers so their tasks run again',
      body: s.recoverBody,
      answers: ok(responses.recovered),
    },
    {
      method: 'post',
      path: '/api/tasks/generate/staggered',
      tag: t,
      change: true,
      summary: 'One task per payload, spread over a period in batches',
      body: s.staggeredBody,
      answers: created(responses.staggered),
    },
    {
      method: 'post',
      path: '/api/tasks/generate/resync',
      tag: 'menus',
      change: true,
      summary: 'One product_resync task per active store, spread over the day; once per date (409 for a second call)',
      body: resyncBody,
      answers: created(responses.resync),
    },
    {
      method: 'post',
      path: '/api/tasks/generate/discovery',
      tag: 'menus',
      change: true,
      summary: 'One store_discovery task',
      body: discoveryBody,
      answers: created(responses.discovery),
    },
    {
      method: 'post',
      path: '/api/tasks/cancel',
      tag: t,
      change: true,
      summary: 'Cancel pending tasks: a selection (task_ids) or a filter with a limit; answers per task',
      body: s.cancelBody,
      answers: ok(responses.cancelled),
    },
    {
      method: 'post',
      path: '/api/tasks/run-now',
      tag: t,
      change: true,
      summary: 'Make scheduled tasks available now; answers per task',
      body: s.runNowBody,
      answers: ok(responses.runNow),
    },
    {
      method: 'get',
      path: '/api/tasks/depth',
      tag: t,
      summary: 'Pending tasks per bucket, by type',
      query: s.depthQuery,
      answers: ok(responses.depth),
    },
    {
      method: 'get',
      path: '/api/overview/live',
      tag: 'overview',
      summary: "The overview's live part: pending work, pauses and workers per type",
      query: s.emptyQuery,
      answers: ok(responses.overviewLive),
    },
    {
      method: 'get',
      path: '/api/overview',
      tag: 'overview',
      summary: 'Everything the overview shows, in one request',
      query: s.emptyQuery,
      answers: ok(responses.overview),
    },
    {
      method: 'get',
      path: '/api/tasks/:id',
      tag: t,
      summary: 'One task: its row, leases, errors, completion and results',
      params: s.taskIdParams,
      answers: ok(responses.task),
    },
    {
      method: 'get',
      path: '/api/history',
      tag: 'history',
      summary: 'Partition sets of the history, retention and the next drop',
      answers: ok(responses.history),
    },
    {
      method: 'get',
      path: '/api/dead-letters',
      tag: 'dead letters',
      summary: 'Tasks that failed or were abandoned, newest first',
      query: s.deadLetterQuery,
      answers: ok(responses.deadLetters),
    },
    {
      method: 'post',
      path: '/api/dead-letters/:id/redrive',
      tag: 'dead letters',
      change: true,
      summary: 'Enqueue a dead letter again as a new task',
      params: s.taskIdParams,
      answers: created(responses.redrive),
    },
    {
      method: 'post',
      path: '/api/dead-letters/redrive',
      tag: 'dead letters',
      change: true,
      summary: 'Redrive a selection (task_ids) or a filter with a limit; answers per task',
      body: s.redriveBody,
      answers: ok(responses.redriven),
    },
    {
      method: 'get',
      path: '/api/queues',
      tag: 'queues',
      summary: 'Pending work, pauses and live workers per task type',
      answers: ok(responses.queues),
    },
    {
      method: 'post',
      path: '/api/queues/:task_type/pause',
      tag: 'queues',
      change: true,
      summary: 'Stop claiming a task type (running tasks finish)',
      params: s.taskTypeParams,
      body: s.pauseBody,
      answers: ok(responses.paused),
    },
    {
      method: 'post',
      path: '/api/queues/:task_type/timeout',
      tag: 'queues',
      change: true,
      summary: "Set (null: clear) a task type's run timeout, in seconds",
      params: s.taskTypeParams,
      body: s.timeoutBody,
      answers: ok(responses.timeoutSet),
    },
    {
      method: 'get',
      path: '/api/limits',
      tag: 'queues',
      summary: 'Flow limits in force (concurrency and rate, per task type and group key) and how full each is',
      answers: ok(responses.limits),
    },
    {
      method: 'put',
      path: '/api/queues/:task_type/limits',
      tag: 'queues',
      change: true,
      summary: "Set a scope's flow limits: the type, each group key, or one group key",
      params: s.taskTypeParams,
      body: s.limitBody,
      answers: ok(responses.limitSet),
    },
    {
      method: 'delete',
      path: '/api/queues/:task_type/limits',
      tag: 'queues',
      change: true,
      summary: "Clear a scope's flow limits",
      params: s.taskTypeParams,
      query: s.limitKeyQuery,
      answers: ok(responses.limitCleared),
    },
    {
      method: 'get',
      path: '/api/throttles',
      tag: 'queues',
      summary:
        'Provider throttles in force: per channel (task_type) or group key (group), until when, the latest reason and reporter',
      answers: ok(responses.throttles),
    },
    {
      method: 'post',
      path: '/api/throttles/clear',
      tag: 'queues',
      change: true,
      summary: "Clear a channel's or a group key's throttle now: its tasks are claimed again at once",
      body: s.throttleClearBody,
      answers: ok(responses.throttleCleared),
    },
    {
      method: 'post',
      path: '/api/queues/:task_type/resume',
      tag: 'queues',
      change: true,
      summary: 'Claim a paused task type again',
      params: s.taskTypeParams,
      body: s.emptyBody,
      answers: ok(responses.resumed),
    },
    {
      method: 'get',
      path: '/api/workers',
      tag: 'workers',
      summary: 'The worker registry: each worker, its types, heartbeat and tasks in flight',
      answers: ok(responses.workers),
    },
    {
      method: 'post',
      path: '/api/workers/:worker_id/recover-stale',
      tag: 'workers',
      change: true,
      summary: "Revoke a dead worker's leases",
      params: s.workerIdParams,
      body: s.recoverBody,
      answers: ok(responses.workerRecovered),
    },
    {
      method: 'get',
      path: '/api/schedules',
      tag: 'schedules',
      summary: 'Schedules with their last runs',
      query: s.schedulesQuery,
      answers: ok(responses.schedules),
    },
    {
      method: 'put',
      path: '/api/schedules/:name',
      tag: 'schedules',
      change: true,
      summary: 'Create or change a schedule (its cron read on the wall clock of time_zone, default UTC)',
      params: s.scheduleParams,
      body: s.scheduleBody,
      answers: ok(responses.scheduleUpserted),
    },
    ...(['enable', 'disable'] as const).map((action): Operation => ({
      method: 'post',
      path: `/api/schedules/:name/${action}`,
      tag: 'schedules',
      change: true,
      summary: `${action === 'enable' ? 'Enable' : 'Disable'} a schedule`,
      params: s.scheduleParams,
      body: s.emptyBody,
      answers: ok(responses.scheduleSet),
    })),
    {
      method: 'get',
      path: '/api/processes',
      tag: 'processes',
      summary: 'The process supervisors with runs',
      answers: ok(responses.processes),
    },
    {
      method: 'get',
      path: '/api/processes/:process',
      tag: 'processes',
      summary: "A process's runs, those needing attention first",
      params: s.processParams,
      query: s.processRootsQuery,
      answers: ok(responses.processRoots),
    },
    {
      method: 'get',
      path: '/api/processes/:process/:rootId',
      tag: 'processes',
      summary: 'One run of a process: its tree of tasks and its timeline of facts',
      params: s.processRootParams,
      answers: ok(responses.processRoot),
    },
    {
      method: 'get',
      path: '/api/session',
      tag: 'access',
      summary: 'Who the credential names, its level, and whether reads are open',
      query: s.emptyQuery,
      answers: ok(responses.session),
    },
    {
      method: 'get',
      path: '/api/audit',
      tag: 'access',
      summary: 'The audit trail: every change made through the API, newest first (task_id: those naming a task)',
      query: s.auditQuery,
      answers: ok(responses.audit),
    },
    {
      method: 'get',
      path: '/api/openapi.json',
      tag: 'monitoring',
      summary: 'This document',
      answers: { 200: { description: 'The OpenAPI 3.1 document', schema: z.looseObject({ openapi: z.string() }) } },
    },
    {
      method: 'get',
      path: '/metrics',
      tag: 'monitoring',
      summary: 'Prometheus metrics of the queue (read from the database) and of this server',
      answers: { 200: { description: 'Prometheus text exposition', text: 'text/plain; version=0.0.4' } },
    },
    {
      method: 'get',
      path: '/healthz',
      tag: 'monitoring',
      summary: 'Liveness: the server answers',
      answers: ok(responses.ok),
    },
    {
      method: 'get',
      path: '/readyz',
      tag: 'monitoring',
      summary: 'Readiness: the database answers',
      answers: { ...ok(responses.ok), 500: { description: 'The database did not answer', schema: errorBody } },
    },
  ];
}

type JsonSchema = Record<string, unknown>;

/** A zod schema as JSON Schema 2020-12: `input` for what a request may send, `output` for answers. */
function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): JsonSchema {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, {
    target: 'draft-2020-12',
    io,
    unrepresentable: 'any',
  }) as JsonSchema;
  return rest;
}

/** `/api/tasks/:id` as OpenAPI writes it: `/api/tasks/{id}`. */
export const openApiPath = (path: string): string => path.replace(/:(\w+)/g, '{$1}');

function parameters(schema: z.ZodType | undefined, where: 'path' | 'query'): JsonSchema[] {
  if (!schema) return [];
  const object = jsonSchema(schema, 'input') as { properties?: Record<string, JsonSchema>; required?: string[] };
  return Object.entries(object.properties ?? {}).map(([name, property]) => {
    const { description, ...rest } = property;
    return {
      name,
      in: where,
      required: where === 'path' || (object.required ?? []).includes(name),
      ...(description ? { description } : {}),
      schema: rest,
    };
  });
}

const ERRORS: Record<number, string> = {
  400: 'Invalid input: the message names each bad field',
  404: 'No such task, schedule, process or route',
  409: 'Refused by the queue: a conflict with the current state (e.g. a task not in a state for this action)',
  415: 'Not application/json',
  500: 'Internal error (see the server log)',
};

/** Who may call a route (app.ts's access levels); unknown: read for GET, operator otherwise. */
export type AccessOf = (method: string, url: string) => 'public' | 'read' | 'operator' | undefined;

/** The OpenAPI 3.1 document for the operations. */
export function openApiDocument(ops: Operation[], version: string, accessOf: AccessOf = () => undefined): JsonSchema {
  const paths: Record<string, Record<string, JsonSchema>> = {};
  const error = { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } };
  for (const op of ops) {
    const answers: Record<string, JsonSchema> = {};
    for (const [status, answer] of Object.entries(op.answers)) {
      answers[status] = {
        description: answer.description,
        content: answer.text
          ? { [answer.text]: { schema: { type: 'string' } } }
          : { 'application/json': { schema: jsonSchema(answer.schema!, 'output') } },
      };
    }
    const takesInput = Boolean(op.params ?? op.query ?? op.body);
    for (const status of takesInput ? [400, 404, 409, 500] : op.path.startsWith('/api/') ? [500] : []) {
      answers[String(status)] ??= { description: ERRORS[status], content: error };
    }
    if (op.body) answers['415'] ??= { description: ERRORS[415], content: error };
    const access = accessOf(op.method.toUpperCase(), op.path) ?? (op.change ? 'operator' : 'read');
    if (access !== 'public') answers['401'] = { description: 'No credential, or a wrong one', content: error };
    if (access === 'operator')
      answers['403'] = { description: 'The credential is read-only: changes need an operator', content: error };
    const operation: JsonSchema = {
      operationId: `${op.method}${op.path
        .replace(/[:{}]/g, '')
        .split(/[/._-]/)
        .filter(Boolean)
        .map((w) => w[0]!.toUpperCase() + w.slice(1))
        .join('')}`,
      summary: op.summary,
      tags: [op.tag],
      'x-access': access,
      security: access === 'public' ? [] : [{ bearer: [] }, { basic: [] }],
    };
    const params = [...parameters(op.params, 'path'), ...parameters(op.query, 'query')];
    if (params.length > 0) operation.parameters = params;
    if (op.body) {
      operation.requestBody = {
        required: !op.body.safeParse(undefined).success,
        content: { 'application/json': { schema: jsonSchema(op.body, 'input') } },
      };
    }
    operation.responses = answers;
    (paths[openApiPath(op.path)] ??= {})[op.method] = operation;
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'pg-task-queue operations API',
      version,
      description:
        'The REST API of the queue\'s web server: tasks, dead letters, queues, workers, schedules, processes and monitoring. Errors are JSON ({"error", "message"}) with a 4xx or 5xx status. The x-access of each operation says who may call it: public (anyone), read (any user) or operator; a credential is `Authorization: Bearer <token>` or Basic with the user name.',
    },
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    tags: [...new Set(ops.map((op) => op.tag))].map((name) => ({ name })),
    paths,
    components: {
      schemas: { Error: jsonSchema(errorBody, 'output') },
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description: 'a user token (API_TOKEN or one of API_USERS)' },
        basic: { type: 'http', scheme: 'basic', description: 'user name and token' },
      },
    },
  };
}

/** Serves the document at GET /api/openapi.json (made on the first request). */
export function registerOpenApi(
  app: FastifyInstance,
  schemas: ApiSchemas,
  accessOf: AccessOf = () => undefined,
  version = '0.1.0',
): void {
  let document: string | undefined;
  app.get('/api/openapi.json', async (_request, reply) => {
    document ??= JSON.stringify(openApiDocument(operations(schemas), version, accessOf));
    return reply.header('content-type', 'application/json; charset=utf-8').send(document);
  });
}
