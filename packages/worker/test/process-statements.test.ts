// The statements an email process costs the database, counted (pg_stat_statements, nested
// statements included, on a server of the test's own that preloads it): the real worker
// sends email processes one after the other through the Resend SDK against the fake
// server, one process at a time. A count, not a timing: it fails when the statements per
// process grow back (BENCHMARKS.md, "business processes"). The worker's looks that found
// nothing (a poll, a claim after a notification another claim had answered) depend on
// timing, not on the processes: they are counted, and the statements of one such look,
// measured after the worker stops, are taken out once for each.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { openServer, provisionDatabase, withRootClient, type DatabaseServer, type DatabaseUrls } from '@org/db-tools';
import { createResendEmailProvider } from '@org/providers';
import { startFakeResend, type FakeResend } from '@org/providers/testing';
import { claimTasks, enqueueMany, nextClaimInMs } from '@org/queue-client';
import { createLogger, dbFunctionProcessor, channelTaskProcessor, ProcessorRegistry, Worker } from '../src/index.js';
import { eventually } from './support/fixtures.js';

const PROCESSES = 12;
const name = `process-statements-${process.pid}`;

let server: DatabaseServer;
let urls: DatabaseUrls;
let root: pg.Client;
let resend: FakeResend;
let worker: Worker;

beforeAll(async () => {
  const first = await openServer({ name });
  await withRootClient(first, async (client) => {
    await client.query(`alter system set shared_preload_libraries = 'pg_stat_statements'`);
    await client.query(`alter system set pg_stat_statements.track = 'all'`);
  });
  await first.stop();
  server = await openServer({ name });
  urls = await provisionDatabase(server, 'queue', { fresh: true, quiet: true, current: true });
  root = new pg.Client({ connectionString: new URL('/queue', server.rootUrl).toString() });
  await root.connect();
  await root.query('create extension if not exists pg_stat_statements');
  resend = await startFakeResend();
  const registry = new ProcessorRegistry()
    .register('db_function', dbFunctionProcessor())
    .register('email', channelTaskProcessor(createResendEmailProvider({ apiKey: 're_test', baseUrl: resend.url })));
  worker = new Worker({
    databaseUrl: urls.worker,
    roles: null,
    workerId: 'process-statements',
    concurrency: 4,
    // Claims follow the wake-ups and the next due time; little idle polling.
    pollIntervalMs: 2_000,
    heartbeatIntervalMs: 60_000,
    leaseSeconds: 300,
    maxLeases: 5,
    shutdownGraceMs: 2000,
    registry,
    logger: createLogger('silent'),
  });
  await worker.start();
}, 120_000);

async function succeeded(): Promise<number> {
  const { rows } = await root.query<{ n: number }>('select count(*)::int as n from comms.send_email_task_succeeded');
  return rows[0].n;
}

afterAll(async () => {
  await worker?.stop();
  await resend?.close();
  await root?.end();
  await server?.stop({ destroy: true });
});

let counted: Counted;
let claimsThatLeased: number;

interface Counted {
  all: number;
  handler_round_trips: number;
  claims: number;
}

// Every user's statements but the test's own (the superuser's): the worker's, and those of
// the owner's functions it calls (security definer).
async function countStatements(): Promise<Counted> {
  const { rows } = await root.query<Counted>(
    `select coalesce(sum(s.calls), 0)::float8 as all,
            coalesce(sum(s.calls) filter (where s.toplevel and (s.query ilike '%run_function%'
                                                             or s.query ilike '%run_before_provider_call%'
                                                             or s.query ilike '%settle_with_handler%')), 0)::float8
              as handler_round_trips,
            coalesce(sum(s.calls) filter (where s.toplevel and s.query ilike '%queues.claim_tasks(%'), 0)::float8
              as claims
       from pg_stat_statements s
      where s.userid <> (select r.oid from pg_roles r where r.rolname = current_user)
        and s.dbid = (select d.oid from pg_database d where d.datname = current_database())`,
  );
  return rows[0];
}

it('an email process costs the database at most 150 statements, and its email task 2 round trips', async () => {
  const app = new pg.Client({ connectionString: urls.app });
  await app.connect();
  try {
    // Warm: the worker's connections have planned and cached what they run.
    await app.query(`select comms.send_email('T <t@example.com>', 'warm@example.com', 'Hi', '<p>Hi</p>')`);
    await eventually(async () => (await succeeded()) === 1, 'the warm-up process succeeded');
    // The processes, due one after the other (one every 250 ms from a second on): each runs
    // alone, so no claim or completion takes several of them at once. Sent before the count.
    await app.query(
      `select comms.send_email('T <t@example.com>', 'u' || g || '@example.com', 'Hi', '<p>Hi</p>',
                               _scheduled_at => now() + interval '1 second' + g * interval '250 milliseconds')
         from generate_series(1, $1::int) g`,
      [PROCESSES],
    );
    await root.query('select pg_stat_statements_reset()');
    const {
      rows: [{ since }],
    } = await root.query<{ since: Date }>('select clock_timestamp() as since');
    await eventually(async () => (await succeeded()) === PROCESSES + 1, 'every process succeeded', 60_000);
    counted = await countStatements();
    const { rows: leased } = await root.query<{ n: number }>(
      'select count(*)::int as n from queues.claim_lease where leased_at >= $1',
      [since],
    );
    claimsThatLeased = leased[0].n;
  } finally {
    await app.end();
  }
  // One look that finds nothing, as the worker takes it (a claim, then the question of the
  // next due task), with the worker stopped and nothing ready.
  await worker.stop();
  const looker = new pg.Client({ connectionString: urls.worker });
  await looker.connect();
  try {
    await root.query('select pg_stat_statements_reset()');
    const claimed = await claimTasks(looker, {
      workerId: 'process-statements',
      limit: 8,
      taskTypes: undefined,
      leaseSeconds: 300,
      maxLeases: 5,
    });
    expect(claimed).toEqual([]);
    await nextClaimInMs(looker, null, 10);
  } finally {
    await looker.end();
  }
  const emptyLook = await countStatements();
  expect(emptyLook.claims).toBe(1);
  // Every claim of the run leased tasks, or was a look that found nothing.
  const emptyLooks = counted.claims - claimsThatLeased;
  expect(emptyLooks).toBeGreaterThanOrEqual(0);
  const perProcess = {
    all: (counted.all - emptyLooks * emptyLook.all) / PROCESSES,
    handler_round_trips: counted.handler_round_trips / PROCESSES,
  };
  // Three tasks a process (the first run, the email, the run its success made due now).
  const { rows: tasks } = await root.query<{ n: number }>('select count(*)::int as n from queues.task');
  expect(tasks[0].n).toBe(3 * (PROCESSES + 1));
  // Every statement, nested ones included: 154.8 in two runs (each task of a process
  // claimed, run and completed by statements of its own, as the processes run one at a
  // time), 169.3 and 170.8 before the changes of BENCHMARKS.md's "business processes";
  // 164.3 with flow control in: with nothing configured, a claim still runs the probe of
  // the throttles in force (a statement of its own, for its plan), a claim that finds
  // nothing reads the rate limits to say when to look again, and a completion that ends
  // tasks probes the (empty) dependency table once per end row it writes. Each of those
  // is a microsecond or two. 155.2 since queues.claimable_task_types reads the pauses once
  // per call (its subquery was pulled up, and the pause probe ran once per reference to
  // its column: 9 statements a process, three claims of three calls each). Alone, each
  // completion with a handler is a round of its own (queues.settle_with_handler); under
  // load a round's handler completions share one queues.settle_with_handlers statement,
  // which this count, one process at a time, does not see. 157.2 and 157.3 since the
  // drain's claim picks before it leases (a statement more per claim) and the looks that
  // found nothing (17 statements each then, one or two a run) are taken out. 145.2 and
  // 145.3 since a claim calls the rescuer only when a claim lease is due and
  // queues.next_claim_in_ms is PL/pgSQL planned once per session (a look that finds
  // nothing: 13 statements; 4 fewer per claim, about 3 claims a process).
  expect(perProcess.all).toBeLessThanOrEqual(150);
  // The email task's own round trips: the before_handler with the provider-call check, and
  // the completion with the success handler (3 before they shared a statement). Fewer when
  // a slow machine made two processes overlap and their completions shared a round.
  expect(perProcess.handler_round_trips).toBeGreaterThan(0);
  expect(perProcess.handler_round_trips).toBeLessThanOrEqual(2);
}, 120_000);

// A function's statement planned again at each call costs its planning every time: a
// custom plan (the arguments known) that looks cheaper than the generic one is chosen at
// every call, and a SQL function's statement is planned per call under the same rule.
// These functions run on every claim, step batch and completion round with handlers, so
// they plan once per session (plan_cache_mode = force_generic_plan). Counted, on one
// connection: each statement's plans against its calls.
it('the claim, the steps and the handlers completion plan their statements once a session, not at each call', async () => {
  const CALLS = 12;
  await root.query('alter system set pg_stat_statements.track_planning = on');
  await root.query('select pg_reload_conf()');
  const client = new pg.Client({ connectionString: urls.worker });
  await client.connect();
  try {
    await root.query('select pg_stat_statements_reset()');
    for (let i = 0; i < CALLS; i++) {
      // claim_tasks checks the pauses (queues.claimable_task_types) for its types.
      await claimTasks(client, {
        workerId: 'plans',
        limit: 8,
        taskTypes: ['email', `type_${i % 3}`],
        leaseSeconds: 300,
        maxLeases: 5,
      });
      // A batch of steps checks its leases (queues.current_leases).
      await client.query('select queues.current_leases($1::bigint[], $2::bigint[])', [
        [String(1000 + i), String(2000 + i)],
        [String(1 + i), String(2 + i)],
      ]);
      // A completion round with handlers (queues.settle_with_handlers): a task that does not
      // exist, so its completion statement runs and refuses it.
      const { rows } = await client.query<{ result: string }>(
        `select result from queues.settle_with_handlers($1::bigint[], $2::bigint[], '{succeeded}', null, null, null,
                                                       '{no_such.handler}', '{"{}"}', '{success}', '{""}', null)`,
        [[String(3000 + i)], [String(4000 + i)]],
      );
      expect(rows.map((r) => r.result)).toEqual(['unknown_task']);
    }
  } finally {
    await client.end();
  }
  const { rows } = await root.query<{ statement: string; calls: number; plans: number }>(
    `select w.statement, coalesce(sum(s.calls), 0)::int as calls, coalesce(sum(s.plans), 0)::int as plans
       from (values ('claimable_task_types', '%cardinality(x.paused)%'),
                    ('current_leases', '%(select p.current_lease_id from queues.task_pending p%'),
                    ('settle_with_handlers', '%array_agg(s.task_id order by s.ord)%')) w(statement, pattern)
       left join pg_stat_statements s on not s.toplevel and s.query ilike w.pattern
        and s.dbid = (select d.oid from pg_database d where d.datname = current_database())
      group by w.statement order by w.statement`,
  );
  // Once, or twice when an analyze of a table the plan reads (autovacuum's, after the test
  // above) invalidated it between two calls; planned at each call, it would be CALLS.
  expect(rows.map((r) => [r.statement, r.calls >= CALLS, r.plans >= 1 && r.plans <= 2])).toEqual([
    ['claimable_task_types', true, true],
    ['current_leases', true, true],
    ['settle_with_handlers', true, true],
  ]);
}, 120_000);

// A claim starts the plan of every statement it runs, whatever it has to do: a plan that
// reads the ready batches, the flow limits or the quarantine's suspects costs a plain
// one-task claim its start even when there is none (the pickup's claim). Counted on one
// connection (the worker stopped): the statements of those cases run only in their case.
it('a claim runs the statements of ready batches, flow limits and the quarantine only in their case', async () => {
  await worker.stop();
  await root.query(`insert into queues.task_type (task_type) values ('claim_case') on conflict do nothing`);
  const app = new pg.Client({ connectionString: urls.app });
  const client = new pg.Client({ connectionString: urls.worker });
  await app.connect();
  await client.connect();
  const claim = (limit: number, suspects?: 'repeat') =>
    claimTasks(client, {
      workerId: 'claim-cases',
      limit,
      taskTypes: ['claim_case'],
      leaseSeconds: 300,
      maxLeases: 5,
      ...(suspects ? { suspects } : {}),
    });
  // The statements of each case, by a fragment of their text (nested statements).
  const counts = async () => {
    const { rows } = await root.query<{ statement: string; calls: number }>(
      `select w.statement, coalesce(sum(s.calls), 0)::int as calls
         from (values ('batch candidates', '%b.task_type = ty.task_type%'),
                      ('batches taken', '%set taken = b.taken + f.n%'),
                      ('limit rules', '%jsonb_agg(to_jsonb(l))%'),
                      ('quarantine', '%p.lease_count - p.released_count - p.failed_attempts - p.uncounted_count >%'))
              w(statement, pattern)
         left join pg_stat_statements s on not s.toplevel and s.query ilike w.pattern
          and s.dbid = (select d.oid from pg_database d where d.datname = current_database())
        group by w.statement order by w.statement`,
    );
    return Object.fromEntries(rows.map((r) => [r.statement, r.calls]));
  };
  try {
    // Three tasks on rows of their own (scheduled a moment ago: not a ready batch).
    await enqueueMany(
      app,
      [1, 2, 3].map((n) => ({ taskType: 'claim_case', payload: { n }, scheduledAt: new Date(Date.now() - 1000) })),
    );
    await root.query('select pg_stat_statements_reset()');
    const plain = [...(await claim(1)), ...(await claim(1)), ...(await claim(1))];
    expect(plain.map((t) => (t.payload as { n: number }).n)).toEqual([1, 2, 3]);
    expect(await counts()).toEqual({ 'batch candidates': 0, 'batches taken': 0, 'limit rules': 0, quarantine: 0 });

    // A ready batch (two tasks due at once in one call): its statements run.
    await enqueueMany(
      app,
      [4, 5].map((n) => ({ taskType: 'claim_case', payload: { n } })),
    );
    const { rows: batches } = await root.query<{ n: number }>(
      `select count(*)::int as n from queues.task_ready_batch where task_type = 'claim_case'`,
    );
    expect(batches[0].n).toBe(1);
    const batched = await claim(2);
    expect(batched.map((t) => (t.payload as { n: number }).n)).toEqual([4, 5]);
    const afterBatch = await counts();
    expect(afterBatch['batch candidates']).toBeGreaterThan(0);
    expect(afterBatch['batches taken']).toBeGreaterThan(0);
    expect(afterBatch['limit rules']).toBe(0);

    // The quarantine's claim (suspects 'repeat') checks for repeat suspects.
    expect(await claim(1, 'repeat')).toEqual([]);
    expect((await counts()).quarantine).toBeGreaterThan(0);

    // A flow limit set on the type: the claims read its rules.
    await root.query(`select queues.set_task_limit('claim_case', 'type', null, 10)`);
    await enqueueMany(app, [{ taskType: 'claim_case', payload: { n: 6 } }]);
    expect((await claim(1)).map((t) => (t.payload as { n: number }).n)).toEqual([6]);
    expect((await counts())['limit rules']).toBeGreaterThan(0);
  } finally {
    await app.end();
    await client.end();
  }
}, 120_000);
