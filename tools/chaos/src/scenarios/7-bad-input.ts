// 7. A bad-input corpus across enqueue, the kickoff functions, run_function names,
// result envelopes, handler results and API requests. Each case gets a clear error
// (SQLSTATE + message, validation message, error row, or HTTP 4xx + message) and changes
// nothing else: exact row counts of every table of ours, before and after.
import { startFakeResend } from '@org/providers/testing';
import { createResendEmailProvider } from '@org/providers';
import { createLogger, dbFunctionProcessor, channelTaskProcessor, ProcessorRegistry, Worker } from '@org/worker';
import { dropPending, lastTaskId, Report, waitFor, type ChaosDb, type DbUser, type Scenario } from '../harness.js';

type Expect = { code: string | RegExp; message: RegExp } | { validation: RegExp } | { status: number; message: RegExp };

interface SqlCase {
  surface: 'enqueue' | 'kickoff' | 'run_function' | 'api' | 'worker functions';
  name: string;
  run: () => Promise<unknown>;
  expect: Expect;
}

interface WorkerCase {
  surface: 'result envelope' | 'handler result' | 'db_function payload' | 'task code errors' | 'provider errors';
  name: string;
  taskType: 'db_function' | 'email';
  payload: Record<string, unknown>;
  error: RegExp;
  providerCalls: number;
  /** Expected outcome (default failed), leases (default 1) and interruptions (default 0). */
  outcome?: string;
  leases?: number;
  interruptions?: number;
  /** Results kept (queues.task_result: a db_function step's well-formed envelope); default 0. */
  results?: number;
  maxAttempts?: number;
  /** The fake Resend fails the call with this message (run one at a time, after the others). */
  providerFailure?: string;
}

const SCHEMAS = ['queues', 'internal', 'comms', 'files', 'accounts', 'api', 'admin', 'schedules', 'learning'];
/**
 * Written by any worker that runs (registry, the key of its worker id on its first claim,
 * heartbeats): not touched by the cases themselves.
 */
const VOLATILE = new Set(['queues.worker', 'queues.worker_name', 'queues.task_lease_extension']);

export async function rowCounts(db: ChaosDb): Promise<Record<string, number>> {
  const { rows } = await db.query<{ t: string }>(
    `select format('%I.%I', n.nspname, c.relname) as t from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where c.relkind in ('r', 'p') and not c.relispartition and n.nspname = any($1) order by 1`,
    [SCHEMAS],
  );
  const parts = rows.map((r) => `select '${r.t}' as t, count(*)::int as n from ${r.t}`);
  const counts = (await db.query<{ t: string; n: number }>(parts.join(' union all '))).rows;
  return Object.fromEntries(counts.filter((c) => !VOLATILE.has(c.t)).map((c) => [c.t, c.n]));
}

function diff(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  const d: Record<string, number> = {};
  for (const t of new Set([...Object.keys(before), ...Object.keys(after)])) {
    const delta = (after[t] ?? 0) - (before[t] ?? 0);
    if (delta !== 0) d[t] = delta;
  }
  return d;
}

const TEN_MB = 'x'.repeat(10 * 1024 * 1024);
const DEEP = `${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`;
const INJECTION = `x'); drop table queues.task; --`;

function sqlCases(db: ChaosDb): SqlCase[] {
  const q =
    (dbUser: DbUser, sql: string, params: unknown[] = []) =>
    () =>
      db.pool(dbUser).query(sql, params);
  const enqueue = (type: unknown, payload: unknown, more = '') =>
    q('app', `select queues.enqueue($1, $2::jsonb${more})`, [type, payload]);
  const many = (tasks: unknown) => q('app', 'select * from queues.enqueue_many($1::jsonb)', [tasks]);
  const run = (name: unknown, payload: unknown = '{}') =>
    q('worker', 'select internal.run_function($1, $2::jsonb)', [name, payload]);
  const email = (from: unknown, to: unknown, subject: unknown, html: unknown) =>
    q('app', 'select * from comms.send_email($1, $2, $3, $4)', [from, to, subject, html]);
  const sms = (to: unknown, body: unknown) => q('app', 'select * from comms.send_sms($1, $2)', [to, body]);
  return [
    // enqueue
    {
      surface: 'enqueue',
      name: 'malformed JSON payload',
      run: enqueue('product_resync', '{"product_resync": '),
      expect: { code: '22P02', message: /invalid input syntax for type json/ },
    },
    {
      surface: 'enqueue',
      name: 'null task_type',
      run: enqueue(null, '{}'),
      expect: { code: '22004', message: /task_type must not be null/ },
    },
    {
      surface: 'enqueue',
      name: 'unknown task_type',
      run: enqueue('fax', '{}'),
      expect: { code: '22023', message: /unknown task_type 'fax'/ },
    },
    {
      surface: 'enqueue',
      name: 'injection string as task_type',
      run: enqueue(INJECTION, '{}'),
      expect: { code: '22023', message: /unknown task_type/ },
    },
    {
      surface: 'enqueue',
      name: 'odd unicode task_type (Cyrillic е, zero-width space)',
      run: enqueue('\u0435mail\u200b', '{}'),
      expect: { code: '22023', message: /unknown task_type/ },
    },
    {
      surface: 'enqueue',
      name: 'NUL byte in task_type',
      run: enqueue('email\u0000', '{}'),
      expect: { code: '22021', message: /invalid byte sequence|0x00/ },
    },
    {
      surface: 'enqueue',
      name: 'NUL escape in payload JSON',
      run: enqueue('product_resync', '{"k": "a\\u0000b"}'),
      expect: { code: '22P05', message: /\\u0000 cannot be converted to text|unsupported Unicode escape/ },
    },
    {
      surface: 'enqueue',
      name: 'lone surrogate in payload JSON',
      run: enqueue('product_resync', '{"k": "\\ud800"}'),
      expect: { code: /^22/, message: /json|surrogate|Unicode/i },
    },
    {
      surface: 'enqueue',
      name: 'null payload',
      run: enqueue('product_resync', null),
      expect: { code: '22004', message: /payload must not be null/ },
    },
    {
      surface: 'enqueue',
      name: 'payload is an array',
      run: enqueue('product_resync', '[1,2]'),
      expect: { code: '22023', message: /payload must be a JSON object, got array/ },
    },
    {
      surface: 'enqueue',
      name: 'payload is a string',
      run: enqueue('product_resync', '"hi"'),
      expect: { code: '22023', message: /payload must be a JSON object, got string/ },
    },
    {
      surface: 'enqueue',
      name: '10 MB payload',
      run: enqueue('product_resync', JSON.stringify({ blob: TEN_MB })),
      expect: { code: '54000', message: /over the limit of 1048576 bytes/ },
    },
    {
      surface: 'enqueue',
      name: 'priority out of range',
      run: enqueue('product_resync', '{}', ', null, 5000'),
      expect: { code: '22023', message: /priority must be between -1000 and 1000/ },
    },
    {
      surface: 'enqueue',
      name: 'priority of the wrong type',
      run: q('app', `select queues.enqueue('product_resync', '{}'::jsonb, null, $1)`, ['high']),
      expect: { code: '22P02', message: /invalid input syntax for type integer/ },
    },
    {
      surface: 'enqueue',
      name: 'resource_key too long',
      run: q('app', `select queues.enqueue('product_resync', '{}'::jsonb, null, null, $1)`, ['k'.repeat(201)]),
      expect: { code: '22023', message: /resource_key must be 1 to 200 characters/ },
    },
    {
      surface: 'enqueue',
      name: 'max_attempts 0',
      run: q('app', `select queues.enqueue('product_resync', '{}'::jsonb, null, null, null, 0)`),
      expect: { code: '22023', message: /max_attempts must be between 1 and 100/ },
    },
    {
      surface: 'enqueue',
      name: 'scheduled_at not a date',
      run: q('app', `select queues.enqueue('product_resync', '{}'::jsonb, $1)`, ['tomorrow-ish']),
      expect: { code: '22007', message: /invalid input syntax for type timestamp/ },
    },
    {
      surface: 'enqueue',
      name: 'enqueue_many: not an array',
      run: many('{"task_type": "product_resync"}'),
      expect: { code: '22023', message: /tasks must be a JSON array, got object/ },
    },
    {
      surface: 'enqueue',
      name: 'enqueue_many: element not an object',
      run: many('[1]'),
      expect: { code: '22023', message: /tasks\[0\]: must be a JSON object, got number/ },
    },
    {
      surface: 'enqueue',
      name: 'enqueue_many: unknown field',
      run: many('[{"task_type": "product_resync", "payload": {}, "evil": 1}]'),
      expect: { code: '22023', message: /tasks\[0\]: unknown field\(s\) evil/ },
    },
    {
      surface: 'enqueue',
      name: 'enqueue_many: one bad element rejects the batch',
      run: many('[{"task_type": "product_resync", "payload": {}}, {"task_type": "nope", "payload": {}}]'),
      expect: { code: '22023', message: /tasks\[1\]: unknown task_type 'nope'/ },
    },
    {
      surface: 'enqueue',
      name: 'enqueue_many: priority of the wrong type',
      run: many('[{"task_type": "product_resync", "payload": {}, "priority": "high"}]'),
      expect: { code: '22P02', message: /integer/ },
    },
    {
      surface: 'enqueue',
      name: 'enqueue_many: 10001 tasks',
      run: many(JSON.stringify(Array.from({ length: 10001 }, () => ({ task_type: 'product_resync', payload: {} })))),
      expect: { code: '54000', message: /at most 10000 tasks per call/ },
    },
    {
      surface: 'enqueue',
      name: 'scheduled_at infinity',
      run: q('app', `select queues.enqueue('product_resync', '{}'::jsonb, 'infinity')`),
      expect: { code: '22023', message: /scheduled_at must be a finite time/ },
    },
    {
      surface: 'enqueue',
      name: 'scheduled_at -infinity',
      run: q('app', `select queues.enqueue('product_resync', '{}'::jsonb, '-infinity')`),
      expect: { code: '22023', message: /scheduled_at must be a finite time/ },
    },
    {
      surface: 'enqueue',
      name: 'enqueue_many: scheduled_at infinity',
      run: many('[{"task_type": "product_resync", "payload": {}, "scheduled_at": "infinity"}]'),
      expect: { code: '22023', message: /tasks\[0\]: scheduled_at must be a finite time/ },
    },
    {
      surface: 'enqueue',
      name: 'payload nested 5000 deep',
      run: enqueue('product_resync', DEEP),
      expect: { code: '54000', message: /payload is nested deeper than 64 levels/ },
    },
    {
      surface: 'enqueue',
      name: 'enqueue_many: payload nested 5000 deep',
      run: many(`[{"task_type": "product_resync", "payload": ${DEEP}}]`),
      expect: { code: '54000', message: /tasks\[0\]: payload is nested deeper than 64 levels/ },
    },
    {
      surface: 'enqueue',
      name: 'enqueue as the worker database user (forbidden)',
      run: q('worker', `select queues.enqueue('db_function', '{}'::jsonb)`),
      expect: { code: '42501', message: /permission denied for function enqueue/ },
    },
    // Worker-only work: apps and the API start processes through kickoffs, never enqueue channel tasks or db_function steps.
    {
      surface: 'enqueue',
      name: 'app enqueues file_delete of an unrelated object',
      run: enqueue('file_delete', JSON.stringify({ bucket: 'user-uploads', object_key: 'other/passport.pdf' })),
      expect: {
        code: '42501',
        message: /task_type 'file_delete' may be enqueued only by the database's own processes/,
      },
    },
    {
      surface: 'enqueue',
      name: 'app forges a handler call (db_function files.record_file_delete_success)',
      run: enqueue(
        'db_function',
        JSON.stringify({
          db_function: 'files.record_file_delete_success',
          original_payload: { file_deletion_attempt_id: 1 },
        }),
      ),
      expect: { code: '42501', message: /task_type 'db_function' may be enqueued only/ },
    },
    {
      surface: 'enqueue',
      name: 'API enqueues an sms',
      run: q('api', `select queues.enqueue('sms', $1::jsonb)`, [
        JSON.stringify({ to_number: '+14155550100', body: 'x' }),
      ]),
      expect: { code: '42501', message: /task_type 'sms' may be enqueued only/ },
    },
    {
      surface: 'enqueue',
      name: 'enqueue_many hides a db_function in a batch',
      run: many(
        JSON.stringify([
          { task_type: 'product_resync', payload: {} },
          { task_type: 'db_function', payload: { db_function: 'internal.noop' } },
        ]),
      ),
      expect: { code: '42501', message: /tasks\[1\]: task_type 'db_function'/ },
    },
    {
      surface: 'enqueue',
      name: 'API schedules a file_delete',
      run: q(
        'api',
        `select * from schedules.upsert_schedule('evil', '* * * * *', 'file_delete', $1::jsonb, null, null)`,
        [JSON.stringify({ bucket: 'user-uploads', object_key: 'x' })],
      ),
      expect: { code: '42501', message: /task_type 'file_delete' may be enqueued only/ },
    },
    // kickoff functions
    {
      surface: 'kickoff',
      name: 'send_email: null to_address',
      run: email('a@example.com', null, 'S', 'H'),
      expect: { validation: /to_address must be an email address/ },
    },
    {
      surface: 'kickoff',
      name: 'send_email: injection string as to_address',
      run: email('a@example.com', INJECTION, 'S', 'H'),
      expect: { validation: /to_address must be an email address/ },
    },
    {
      surface: 'kickoff',
      name: 'send_email: RTL override in to_address',
      run: email('a@example.com', 'ev\u202eil@example.com', 'S', 'H'),
      expect: { validation: /to_address must be an email address/ },
    },
    {
      surface: 'kickoff',
      name: 'send_email: empty subject',
      run: email('a@example.com', 'b@example.com', '', 'H'),
      expect: { validation: /subject is required/ },
    },
    {
      surface: 'kickoff',
      name: 'send_email: 10 MB html',
      run: email('a@example.com', 'b@example.com', 'S', TEN_MB),
      expect: { validation: /html is required \(at most 1000000 characters\)/ },
    },
    {
      surface: 'kickoff',
      name: 'send_email: NUL byte in subject',
      run: email('a@example.com', 'b@example.com', 'a\u0000b', 'H'),
      expect: { code: '22021', message: /0x00/ },
    },
    {
      surface: 'kickoff',
      name: 'send_sms: number not E.164',
      run: sms('0155 555', 'hi'),
      expect: { validation: /to_number|E\.164/ },
    },
    { surface: 'kickoff', name: 'send_sms: null body', run: sms('+14155550100', null), expect: { validation: /body/ } },
    {
      surface: 'kickoff',
      name: 'send_sms: 10 MB body',
      run: sms('+14155550100', TEN_MB),
      expect: { validation: /body/ },
    },
    {
      surface: 'kickoff',
      name: 'kickoff_file_deletion: unknown file',
      run: q('app', 'select * from files.kickoff_file_deletion($1)', [987654321]),
      expect: { validation: /not found/ },
    },
    {
      surface: 'kickoff',
      name: 'kickoff_file_deletion: id not a number',
      run: q('app', 'select * from files.kickoff_file_deletion($1)', ['1 or 1=1']),
      expect: { code: '22P02', message: /invalid input syntax for type bigint/ },
    },
    {
      surface: 'kickoff',
      name: 'request_account_deletion: null',
      run: q('app', 'select * from api.request_account_deletion($1)', [null]),
      expect: { validation: /account_id|required/ },
    },
    {
      surface: 'kickoff',
      name: 'request_account_deletion: unknown account',
      run: q('app', 'select * from api.request_account_deletion($1)', [-1]),
      expect: { validation: /not found|account/ },
    },
    // run_function names
    {
      surface: 'run_function',
      name: 'pg_catalog.pg_sleep',
      run: run('pg_catalog.pg_sleep'),
      expect: { code: '42501', message: /system or temporary schema and is never runnable/ },
    },
    {
      surface: 'run_function',
      name: 'unqualified pg_sleep',
      run: run('pg_sleep'),
      expect: { code: '22023', message: /invalid function_name/ },
    },
    {
      surface: 'run_function',
      name: 'pg_temp.evil',
      run: run('pg_temp.evil'),
      expect: { code: '42501', message: /never runnable/ },
    },
    {
      surface: 'run_function',
      name: 'injection in the name',
      run: run('internal.noop($1); drop table queues.task; --'),
      expect: { code: '22023', message: /invalid function_name/ },
    },
    {
      surface: 'run_function',
      name: 'full signature',
      run: run('internal.noop(jsonb)'),
      expect: { code: '22023', message: /invalid function_name/ },
    },
    {
      surface: 'run_function',
      name: 'numeric OID',
      run: run('16384'),
      expect: { code: '22023', message: /invalid function_name/ },
    },
    {
      surface: 'run_function',
      name: 'upper case',
      run: run('Internal.Noop'),
      expect: { code: '22023', message: /invalid function_name/ },
    },
    {
      surface: 'run_function',
      name: 'unknown function',
      run: run('comms.nope'),
      expect: { code: '42883', message: /does not exist/ },
    },
    {
      surface: 'run_function',
      name: 'existing but not registered',
      run: run('queues.rebuild_task_pending'),
      expect: { code: /^42/, message: /does not exist|not registered/ },
    },
    {
      surface: 'run_function',
      name: 'null name',
      run: run(null),
      expect: { code: '22004', message: /function_name must not be null/ },
    },
    // functions only the worker calls
    {
      surface: 'worker functions',
      name: 'record_worker_heartbeat: 100,000 task types',
      run: q('worker', `select queues.record_worker_heartbeat('s7-many', $1::text[], 1000)`, [
        Array.from({ length: 100_000 }, (_, i) => `t${i}`),
      ]),
      expect: { code: '54000', message: /over the limit of 1000/ },
    },
    {
      surface: 'worker functions',
      name: 'record_worker_heartbeat: task type not a name',
      run: q('worker', `select queues.record_worker_heartbeat('s7-bad', array[$1], 1000)`, [INJECTION]),
      expect: { code: '22023', message: /task_types must be task type names/ },
    },
    {
      surface: 'worker functions',
      name: 'record_worker_heartbeat: heartbeat interval 0',
      run: q('worker', `select queues.record_worker_heartbeat('s7-zero', array['email'], 0)`),
      expect: { code: '22023', message: /heartbeat_interval_ms must be between/ },
    },
    {
      surface: 'worker functions',
      name: 'fail_task: NUL byte in the message (the worker sanitizes first)',
      run: q('worker', 'select queues.fail_task(1, $1)', ['bad\u0000byte']),
      expect: { code: '22021', message: /0x00/ },
    },
    {
      surface: 'worker functions',
      name: 'interrupt_task: empty message',
      run: q('worker', `select queues.interrupt_task(1, 1, ' ')`),
      expect: { code: '22004', message: /error_message must not be empty/ },
    },
    {
      surface: 'worker functions',
      name: 'complete_tasks: retries of the wrong length',
      run: q('worker', `select * from queues.complete_tasks(array[1]::bigint[], null, null, array[true, false])`),
      expect: { code: '22023', message: /retries must have one element per task/ },
    },
    {
      surface: 'run_function',
      name: 'zero-width space in the name',
      run: run('internal.no\u200bop'),
      expect: { code: '22023', message: /invalid function_name/ },
    },
  ];
}

const bad = (
  taskType: 'db_function' | 'email',
  name: string,
  payload: Record<string, unknown>,
  error: RegExp,
  surface: WorkerCase['surface'],
  providerCalls = 0,
): WorkerCase => ({ name, taskType, payload, error, surface, providerCalls });

const handlers = {
  before_handler: 'chaos.before',
  success_handler: 'chaos.on_success',
  error_handler: 'chaos.on_error',
};
const goodEmail = {
  idempotency_key: 'chaos-7',
  from_address: 'a@example.com',
  to_address: 'b@example.com',
  subject: 'S',
  html: 'H',
};

const WORKER_CASES: WorkerCase[] = [
  bad('db_function', 'no db_function field', { key: 'x' }, /invalid db_function payload/, 'db_function payload'),
  bad(
    'db_function',
    'db_function of the wrong type',
    { db_function: 42 },
    /invalid db_function payload/,
    'db_function payload',
  ),
  bad('db_function', 'db_function null', { db_function: null }, /invalid db_function payload/, 'db_function payload'),
  bad(
    'db_function',
    'db_function pg_catalog.pg_sleep',
    { db_function: 'pg_catalog.pg_sleep' },
    /never runnable|invalid/,
    'db_function payload',
  ),
  bad('db_function', 'db_function unknown', { db_function: 'chaos.nope' }, /does not exist/, 'db_function payload'),
  bad(
    'db_function',
    'db_function with injection',
    { db_function: `chaos.step'); drop table queues.task; --` },
    /invalid/,
    'db_function payload',
  ),
  bad(
    'db_function',
    'envelope: JSON null',
    { db_function: 'chaos.step', key: 's7-null', result: null },
    /chaos\.step/,
    'result envelope',
  ),
  bad('db_function', 'envelope: SQL NULL', { db_function: 'chaos.nothing' }, /chaos\.nothing/, 'result envelope'),
  bad(
    'db_function',
    'envelope: a number',
    { db_function: 'chaos.step', key: 's7-num', result: 42 },
    /chaos\.step/,
    'result envelope',
  ),
  bad(
    'db_function',
    'envelope: an array',
    { db_function: 'chaos.step', key: 's7-arr', result: [1] },
    /chaos\.step/,
    'result envelope',
  ),
  bad(
    'db_function',
    'envelope: empty object',
    { db_function: 'chaos.step', key: 's7-empty', result: {} },
    /chaos\.step/,
    'result envelope',
  ),
  bad(
    'db_function',
    'envelope: success of the wrong type',
    { db_function: 'chaos.step', key: 's7-succ', result: { success: 'yes' } },
    /chaos\.step/,
    'result envelope',
  ),
  bad(
    'db_function',
    'envelope: status of the wrong type',
    { db_function: 'chaos.step', key: 's7-stat', result: { status: 7 } },
    /chaos\.step/,
    'result envelope',
  ),
  bad(
    'email',
    'before handler returns a provider payload missing fields',
    { ...handlers, before: { to_address: 'b@example.com' } },
    /./,
    'handler result',
  ),
  bad(
    'email',
    'before handler returns fields of the wrong types',
    { ...handlers, before: { ...goodEmail, to_address: 42 } },
    /./,
    'handler result',
  ),
  bad(
    'email',
    'before handler returns a malformed envelope',
    { ...handlers, before_envelope: 'garbage' },
    /./,
    'handler result',
  ),
  bad(
    'email',
    'before handler returns extra fields (strict schema)',
    { ...handlers, before: { ...goodEmail, bcc: 'all@example.com' } },
    /./,
    'handler result',
  ),
  bad(
    'email',
    'before handler name not runnable',
    { ...handlers, before_handler: 'pg_catalog.pg_sleep' },
    /./,
    'handler result',
  ),
  bad(
    'email',
    'handler name of the wrong type',
    { ...handlers, before_handler: 42 },
    /invalid handler names/,
    'handler result',
  ),
  bad(
    'email',
    'success handler returns a malformed result',
    { ...handlers, before: { ...goodEmail, idempotency_key: 'chaos-7-success' }, success_result: 'garbage' },
    /./,
    'handler result',
    1,
  ),
  // Task code raising SQLSTATEs that look like the queue's: a task failure, recorded once.
  bad(
    'db_function',
    'step raises 55000 (like the append-only trigger)',
    { db_function: 'chaos.raise', code: '55000', message: 'queues.task is append-only: rows are never updated' },
    /chaos\.raise raised: queues\.task is append-only/,
    'task code errors',
  ),
  bad(
    'email',
    'success handler raises 55000 after the provider call',
    {
      ...handlers,
      success_handler: 'chaos.raise',
      code: '55000',
      message: 'currval of sequence is not yet defined in this session',
      before: { ...goodEmail, idempotency_key: 'chaos-7-55000' },
    },
    /succeeded but chaos\.raise raised: currval/,
    'task code errors',
    1,
  ),
  {
    ...bad(
      'db_function',
      'step always deadlocks (40P01): abandoned after MAX_LEASES interruptions',
      { db_function: 'chaos.raise', code: '40P01', message: 'deadlock detected' },
      /abandoned: 5 transient errors \(max 5\); the last: deadlock detected/,
      'task code errors',
    ),
    outcome: 'abandoned',
    leases: 5,
    interruptions: 4,
  },
  {
    ...bad(
      'db_function',
      'validation failure with max_attempts 3: not retried',
      {
        db_function: 'chaos.step',
        key: 's7-invalid-retry',
        result: { success: false, validation_failure_message: 'no such account' },
      },
      /chaos\.step: validation failure: no such account/,
      'task code errors',
    ),
    maxAttempts: 3,
    // A business outcome of its own: final, not a dead letter.
    outcome: 'validation_failed',
    // The well-formed envelope is kept as the run's result (queues.task_result).
    results: 1,
  },
  {
    ...bad(
      'email',
      'provider error with a NUL byte and an unpaired surrogate',
      { ...handlers, before: { ...goodEmail, idempotency_key: 'chaos-7-nul' } },
      /mailbox\ufffd full \ufffd/,
      'provider errors',
      1,
    ),
    providerFailure: 'mailbox\u0000 full \ud800',
  },
];

function apiCases(
  inject: (o: {
    method: string;
    url: string;
    payload?: string;
    headers?: Record<string, string>;
  }) => Promise<{ statusCode: number; body: string }>,
  token: string,
): SqlCase[] {
  const auth = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
  const call =
    (method: string, url: string, payload?: string, headers: Record<string, string> = auth) =>
    async () => {
      const res = await inject({ method, url, payload, headers });
      return { status: res.statusCode, body: res.body };
    };
  const post = (body: string) => call('POST', '/api/tasks', body);
  return [
    {
      surface: 'api',
      name: 'POST /api/tasks without a token',
      run: call('POST', '/api/tasks', '{"task_type":"db_function","payload":{}}', {
        'content-type': 'application/json',
      }),
      expect: { status: 401, message: /Bearer/ },
    },
    {
      surface: 'api',
      name: 'POST /api/tasks malformed JSON',
      run: post('{"task_type": "db_function", '),
      expect: { status: 400, message: /JSON/i },
    },
    {
      surface: 'api',
      name: 'POST /api/tasks body is an array',
      run: post('[1,2]'),
      expect: { status: 400, message: /./ },
    },
    { surface: 'api', name: 'POST /api/tasks null body', run: post('null'), expect: { status: 400, message: /./ } },
    {
      surface: 'api',
      name: 'POST /api/tasks unknown task_type',
      run: post('{"task_type": "fax", "payload": {}}'),
      expect: { status: 400, message: /unknown task_type/ },
    },
    {
      surface: 'api',
      name: 'POST /api/tasks injection as task_type',
      run: post(JSON.stringify({ task_type: INJECTION, payload: {} })),
      expect: { status: 400, message: /task_type/ },
    },
    {
      surface: 'api',
      name: 'POST /api/tasks payload of the wrong type',
      run: post('{"task_type": "db_function", "payload": "x"}'),
      expect: { status: 400, message: /payload must be a JSON object/ },
    },
    {
      surface: 'api',
      name: 'POST /api/tasks priority of the wrong type',
      run: post('{"task_type": "db_function", "payload": {}, "priority": "high"}'),
      expect: { status: 400, message: /priority/ },
    },
    {
      surface: 'api',
      name: 'POST /api/tasks NUL escape in payload',
      run: post('{"task_type": "db_function", "payload": {"k": "a\\u0000b"}}'),
      expect: { status: 400, message: /./ },
    },
    {
      surface: 'api',
      name: 'POST /api/tasks 10 MB body',
      run: post(JSON.stringify({ task_type: 'db_function', payload: { blob: TEN_MB } })),
      expect: { status: 413, message: /./ },
    },
    {
      surface: 'api',
      name: 'POST /api/tasks unknown field',
      run: post('{"task_type": "db_function", "payload": {}, "evil": true}'),
      expect: { status: 400, message: /evil|unrecognized/i },
    },
    {
      surface: 'api',
      name: 'GET /api/tasks/<injection>',
      run: call('GET', `/api/tasks/${encodeURIComponent('1 or 1=1')}`),
      expect: { status: 400, message: /task id/ },
    },
    {
      surface: 'api',
      name: 'GET /api/tasks/<huge number>',
      run: call('GET', '/api/tasks/99999999999999999999999'),
      expect: { status: 400, message: /task id/ },
    },
    {
      surface: 'api',
      name: 'GET /api/tasks?limit=-1',
      run: call('GET', '/api/tasks?limit=-1'),
      expect: { status: 400, message: /limit/ },
    },
    {
      surface: 'api',
      name: 'POST redrive of an unknown task',
      run: call('POST', '/api/dead-letters/987654321/redrive', '{}'),
      expect: { status: 404, message: /./ },
    },
  ];
}

/** Runs one case; returns [ok, detail]. */
async function runCase(c: SqlCase): Promise<[boolean, string]> {
  let outcome: unknown;
  let error: { code?: string; message: string } | undefined;
  try {
    outcome = await c.run();
  } catch (e) {
    error = { code: (e as { code?: string }).code, message: (e as Error).message };
  }
  const e = c.expect;
  if ('code' in e) {
    if (!error)
      return [
        false,
        `no error; returned ${JSON.stringify((outcome as { rows?: unknown })?.rows ?? outcome).slice(0, 200)}`,
      ];
    const codeOk = typeof e.code === 'string' ? error.code === e.code : e.code.test(String(error.code));
    return [codeOk && e.message.test(error.message), `${error.code}: ${error.message.slice(0, 160)}`];
  }
  if ('validation' in e) {
    if (error) return [false, `raised ${error.code}: ${error.message.slice(0, 160)}`];
    const row = (outcome as { rows: Record<string, unknown>[] }).rows[0] ?? {};
    const failure = row.validation_failure_message;
    const message = failure == null ? '' : typeof failure === 'string' ? failure : JSON.stringify(failure);
    return [e.validation.test(message), `validation_failure_message: ${message.slice(0, 160) || '(none)'}`];
  }
  if (error) return [false, `threw ${error.message}`];
  const res = outcome as { status: number; body: string };
  let message: string;
  try {
    const parsed = (JSON.parse(res.body) as { message?: unknown }).message;
    message = parsed == null ? '' : typeof parsed === 'string' ? parsed : JSON.stringify(parsed);
  } catch {
    message = res.body;
  }
  return [res.status === e.status && e.message.test(message), `${res.status}: ${message.slice(0, 160)}`];
}

export const scenario: Scenario = {
  id: 7,
  name: 'bad-input',
  title: 'bad-input corpus',
  fast: true,
  async run({ db }) {
    const r = new Report();
    const fromId = await lastTaskId(db);
    const bySurface: Record<string, number> = {};
    let passed = 0;
    const one = async (c: SqlCase) => {
      const before = await rowCounts(db);
      const [ok, detail] = await runCase(c);
      const changed = diff(before, await rowCounts(db));
      const clean = Object.keys(changed).length === 0;
      bySurface[c.surface] = (bySurface[c.surface] ?? 0) + 1;
      if (
        r.check(
          `${c.surface}: ${c.name}`,
          ok && clean,
          clean ? detail : `${detail}; rows changed: ${JSON.stringify(changed)}`,
        )
      )
        passed++;
    };
    for (const c of sqlCases(db)) await one(c);

    // API requests, when @org/web is there.
    let api: { inject: Parameters<typeof apiCases>[0]; close(): Promise<void>; ready(): Promise<unknown> } | undefined;
    try {
      const mod = (await import('@org/web')) as unknown as { createApi: (c: Record<string, unknown>) => typeof api };
      const token = 'chaos-api-token-0123456789';
      api = mod.createApi({ databaseUrl: db.url('api'), apiToken: token, logLevel: 'silent' })!;
      await api.ready();
      for (const c of apiCases((o) => api!.inject(o), token)) await one(c);
    } catch (error) {
      r.check('api: @org/web could be loaded', false, (error as Error).message);
    } finally {
      await api?.close();
    }

    // Envelopes, db_function payloads and handler results, run by a real worker.
    const resend = await startFakeResend();
    const before = await rowCounts(db);
    const ids: string[] = [];
    const enqueueCase = async (c: WorkerCase) =>
      String(
        (
          await db.pool('owner').query('select queues.enqueue($1, $2::jsonb, null, null, null, $3) as id', [
            c.taskType,
            JSON.stringify(c.payload),
            // One run unless the case says otherwise: each case's failure is its last.
            c.maxAttempts ?? 1,
          ])
        ).rows[0].id,
      );
    const completedAll = async (taskIds: string[]) =>
      (await db.query('select count(*)::int as n from queues.task_end where task_id = any($1::bigint[])', [taskIds]))
        .rows[0]!.n === taskIds.length;
    const firstPhase = WORKER_CASES.filter((c) => !c.providerFailure);
    for (const c of firstPhase) ids.push(await enqueueCase(c));
    const worker = new Worker({
      databaseUrl: db.url('worker'),
      roles: ['db_function', 'email'],
      workerId: `s7-${process.pid}`,
      concurrency: 4,
      pollIntervalMs: 100,
      heartbeatIntervalMs: 2000,
      leaseSeconds: 30,
      maxLeases: 5,
      shutdownGraceMs: 2000,
      logger: createLogger('silent'),
      registry: new ProcessorRegistry()
        .register('db_function', dbFunctionProcessor())
        .register(
          'email',
          channelTaskProcessor(createResendEmailProvider({ apiKey: 're_chaos_key', baseUrl: resend.url })),
        ),
    });
    await worker.start();
    let done = await waitFor(() => completedAll(ids), 60_000);
    // Provider failures, one at a time: the fake fails the next call.
    for (const c of WORKER_CASES.filter((x) => x.providerFailure)) {
      resend.failNext(1, 500, c.providerFailure);
      const id = await enqueueCase(c);
      ids.push(id);
      done = (await waitFor(() => completedAll([id]), 30_000)) && done;
    }
    const cases = [...firstPhase, ...WORKER_CASES.filter((x) => x.providerFailure)];
    await worker.stop();
    await resend.close();
    const facts = (
      await db.query(
        `select t.id::text, c.outcome, (select array_agg(e.error_message order by e.error_id) from queues.error e where e.task_id = t.id) as errors
           from unnest($1::bigint[]) t(id) left join queues.task_end c on c.task_id = t.id`,
        [ids],
      )
    ).rows;
    const calls = new Map<string, number>();
    for (const req of resend.requests) {
      const key = String(req.headers['idempotency-key'] ?? '');
      calls.set(key, (calls.get(key) ?? 0) + 1);
    }
    const leases = new Map(
      (
        await db.query<{ id: string; n: number }>(
          'select task_id::text as id, count(*)::int as n from queues.task_leases where task_id = any($1::bigint[]) group by 1',
          [ids],
        )
      ).rows.map((x) => [x.id, x.n]),
    );
    cases.forEach((c, i) => {
      const f = facts.find((x) => x.id === ids[i])!;
      const error = (f.errors ?? []).join(' | ');
      const key = String((c.payload.before as { idempotency_key?: string } | undefined)?.idempotency_key ?? '');
      const providerCalls = key ? (calls.get(key) ?? 0) : 0;
      bySurface[c.surface] = (bySurface[c.surface] ?? 0) + 1;
      const leaseCount = leases.get(ids[i]!) ?? 0;
      const ok =
        f.outcome === (c.outcome ?? 'failed') &&
        c.error.test(error) &&
        error.length > 0 &&
        providerCalls === c.providerCalls &&
        leaseCount === (c.leases ?? 1);
      if (
        r.check(
          `${c.surface}: ${c.name}`,
          ok,
          `${f.outcome}: ${error.slice(0, 200)}; provider calls ${providerCalls}; leases ${leaseCount}`,
        )
      )
        passed++;
    });
    r.check(
      'worker cases: no provider call beyond the expected ones',
      resend.requests.length === cases.reduce((s, c) => s + c.providerCalls, 0),
      `${resend.requests.length} calls`,
    );
    // Nothing but the tasks' own queue facts changed (handler_call rows are the error handlers').
    const changed = diff(before, await rowCounts(db));
    const n = cases.length;
    const errorsAdded = changed['queues.error'] ?? 0;
    delete changed['queues.error'];
    r.check(
      'worker cases: each failed task has an error row',
      done && errorsAdded >= n,
      `${errorsAdded} error rows for ${n} tasks`,
    );
    // Leases are one per claim (queues.claim_lease, shared by the tasks a claim took):
    // each task's are counted above; here, at least one claim and at most one per lease.
    const leasesTaken = cases.reduce((s, c) => s + (c.leases ?? 1), 0);
    const claimLeases = changed['queues.claim_lease'] ?? 0;
    delete changed['queues.claim_lease'];
    r.check(
      'worker cases: one lease per claim',
      claimLeases >= 1 && claimLeases <= leasesTaken,
      `${claimLeases} claim leases for ${leasesTaken} leases`,
    );
    // A claim that took tasks out of the claim index notes its lease for the rescuer
    // (queues.claim_lease_due, a read structure): at most one row per claim lease.
    const dueLeases = changed['queues.claim_lease_due'] ?? 0;
    delete changed['queues.claim_lease_due'];
    r.check(
      'worker cases: at most one due lease per claim lease',
      dueLeases <= claimLeases,
      `${dueLeases} due leases for ${claimLeases} claim leases`,
    );
    const interruptions = cases.reduce((s, c) => s + (c.interruptions ?? 0), 0);
    const results = cases.reduce((s, c) => s + (c.results ?? 0), 0);
    r.equal("worker cases: only the tasks' own facts changed", changed, {
      'queues.task': n,
      'queues.task_completed': n,
      ...(interruptions > 0
        ? { 'queues.task_interruption': interruptions, 'queues.task_lease_release': interruptions }
        : {}),
      ...(results > 0 ? { 'queues.task_result': results } : {}),
    });
    r.figure('cases', r.checks.length - 4);
    for (const [surface, count] of Object.entries(bySurface)) r.figure(`cases: ${surface}`, count);
    r.figure('cases with a clear error and nothing else changed', passed);
    await dropPending(db, fromId);
    return r.result();
  },
};
