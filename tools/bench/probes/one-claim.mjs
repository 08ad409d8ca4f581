// The cost of a one-task claim, as an idle worker's pickup takes it: N tasks enqueued,
// then N claims of one task each as the worker user (synchronous_commit off, so the
// figure is the database's work, not the WAL flush), each task completed after its claim
// (untimed, so the claim leases outstanding stay as few as a worker's), and the time per
// claim; then the question a worker asks after a claim that came back short
// (queues.next_claim_in_ms), timed too.
//   node tools/bench/probes/one-claim.mjs [claims=2000]
// VARIANT=<file.sql> runs that SQL as the superuser first (a function's other version).
// SYNC=1: the worker's commits wait for the WAL flush (as a worker's do).
// CLAIMS_ONLY=1: the tasks settled 100 at a time and no question asked (for a profile of
// the backend: `perf record -p <its pid>`).
// STATEMENTS=1: with pg_stat_statements (track = all), the statements listed (the
// completions' too). AUTO_EXPLAIN=<n>: n more claims, each statement's plan printed.
// EXPLAIN=<statement with $1 timestamptz>: its generic plan, run once, printed.
// Also printed: the worker backend's CPU time per claim (utime + stime from /proc), which
// a busy machine moves less than the wall clock.
import pg from 'pg';
import { readFileSync } from 'node:fs';
import { openServer } from '@org/db-tools';
import { claimTasks, nextClaimInMs, settleTasks } from '@org/queue-client';
import { enqueueBacklog, probeDatabase } from './drain-fixture.mjs';
import { openStatementsServer, printStatements } from './statements-server.mjs';

const N = Number(process.argv[2] ?? 2000);
const STATEMENTS = Boolean(process.env.STATEMENTS);
const CLAIMS_ONLY = Boolean(process.env.CLAIMS_ONLY);
const server = await (STATEMENTS ? openStatementsServer : (name) => openServer({ name }))(
  `bench-one-claim-${process.pid}`,
);
try {
  const { urls, root } = await probeDatabase(server);
  if (process.env.VARIANT) await root.query(readFileSync(process.env.VARIANT, 'utf8'));
  await enqueueBacklog(urls, root, N + 200);
  const worker = new pg.Client({
    connectionString: urls.worker,
    options: process.env.SYNC ? undefined : '-c synchronous_commit=off',
  });
  await worker.connect();
  worker.on('error', () => {}); // the server's stop at the end
  const claim = () =>
    claimTasks(worker, { workerId: 'one-claim', limit: 1, taskTypes: ['bench'], leaseSeconds: 300, maxLeases: 5 });
  const settle = (tasks) =>
    settleTasks(
      worker,
      tasks.map((t) => ({ taskId: t.taskId, taskLeaseId: t.taskLeaseId, outcome: 'succeeded' })),
    );
  for (let i = 0; i < 200; i++) await settle(await claim()); // planned and cached
  if (STATEMENTS) {
    await root.query('create extension if not exists pg_stat_statements');
    await root.query('select pg_stat_statements_reset()');
  }
  let claiming = 0;
  let asking = 0;
  const claimed = [];
  const {
    rows: [{ pid }],
  } = await worker.query('select pg_backend_pid() as pid');
  // utime + stime of the backend, in clock ticks (100 a second on Linux).
  const cpuTicks = () => {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return Number(fields[11]) + Number(fields[12]);
  };
  const ticks0 = cpuTicks();
  for (let i = 0; i < N; i++) {
    const t0 = performance.now();
    const tasks = await claim();
    claiming += performance.now() - t0;
    if (tasks.length !== 1) throw new Error('a claim found nothing');
    if (CLAIMS_ONLY) {
      // Settled 100 at a time, and no question: a profile of the backend is the claims'.
      claimed.push(...tasks);
      if (claimed.length === 100) await settle(claimed.splice(0));
      continue;
    }
    await settle(tasks);
    // The question a worker asks after a claim that came back short.
    const t1 = performance.now();
    await nextClaimInMs(worker, ['bench'], 10);
    asking += performance.now() - t1;
  }
  const cpuUs = ((cpuTicks() - ticks0) * 10_000) / N;
  console.log(
    `${N} one-task claims: ${(claiming / N).toFixed(3)} ms per claim, ` +
      `${(asking / N).toFixed(3)} ms per next_claim_in_ms after it (round trips included); ` +
      `backend CPU ${cpuUs.toFixed(0)} µs per claim${CLAIMS_ONLY ? '' : ' (with its settle and question)'}`,
  );
  if (process.env.AUTO_EXPLAIN) {
    // One more claim, with the plan of each statement it runs (nested ones too).
    const explain = await root.connect();
    try {
      explain.on('notice', (n) => console.log(n.message));
      for (const setting of [
        "load 'auto_explain'",
        'set auto_explain.log_min_duration = 0',
        'set auto_explain.log_analyze = on',
        'set auto_explain.log_buffers = on',
        'set auto_explain.log_nested_statements = on',
        'set auto_explain.log_level = notice',
      ])
        await explain.query(setting);
      for (let i = 0; i < Number(process.env.AUTO_EXPLAIN); i++)
        await claimTasks(explain, {
          workerId: 'one-claim',
          limit: 1,
          taskTypes: ['bench'],
          leaseSeconds: 300,
          maxLeases: 5,
        });
    } finally {
      explain.release(true);
    }
  }
  if (process.env.EXPLAIN) {
    await root.query('set plan_cache_mode = force_generic_plan');
    await root.query(`prepare q(timestamptz) as ${process.env.EXPLAIN}`);
    const { rows } = await root.query('explain (analyze, buffers) execute q(now())');
    console.log(rows.map((r) => r['QUERY PLAN']).join('\n'));
  }
  await worker.end();
  if (STATEMENTS) await printStatements(root, { limit: 20, digits: 4, width: 100 });
  await root.end();
} catch (error) {
  console.error(error);
  process.exitCode = 1;
} finally {
  await server.stop({ destroy: true });
}
