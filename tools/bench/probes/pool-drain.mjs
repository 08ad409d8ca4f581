// What the process pool costs a drain: the same backlog of db_function steps
// ({"db_function":"internal.noop"}) drained by the worker's command line alone and by a
// pool of one working process (PROCESSES=1 SPARES=0 QUARANTINE=0), whose member tells the
// pool every start over IPC before it happens (docs/worker.md). Alternates the two ROUNDS
// times (default 2) and prints each drain's rate.
//   node tools/bench/probes/pool-drain.mjs [steps=50000] [concurrency=10]
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { openServer, provisionDatabase } from '@org/db-tools';
import { enqueueNoopSteps } from './drain-fixture.mjs';

const STEPS = Number(process.argv[2] ?? 50000);
const CONCURRENCY = Number(process.argv[3] ?? 10);
const ROUNDS = Number(process.env.ROUNDS ?? 2);
const cli = fileURLToPath(new URL('../../../packages/worker/dist/cli.js', import.meta.url));
const server = await openServer({ name: `bench-pool-drain-${process.pid}` });
try {
  const urls = await provisionDatabase(server, 'probe', { fresh: true, quiet: true, current: true });
  const owner = new pg.Pool({ connectionString: urls.owner, max: 1 });
  const drain = async (mode) => {
    await enqueueNoopSteps(owner, STEPS);
    await owner.query('vacuum analyze');
    const env = {
      PATH: process.env.PATH,
      DATABASE_URL: urls.worker,
      WORKER_ROLE: 'db_function',
      CONCURRENCY: String(CONCURRENCY),
      LOG_LEVEL: 'warn',
      ...(mode === 'pool' ? { PROCESSES: '1', SPARES: '0', QUARANTINE: '0' } : {}),
    };
    const started = performance.now();
    const child = spawn(process.execPath, [cli], { env, stdio: 'inherit' });
    for (;;) {
      const { rows } = await owner.query('select count(*)::int as n from queues.task_pending');
      const { rows: held } = await owner.query('select count(*)::int as n from queues.lease_held_tasks');
      if (rows[0].n === 0 && held[0].n === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const seconds = (performance.now() - started) / 1000;
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    console.log(`${mode.padEnd(6)} ${STEPS} steps in ${seconds.toFixed(2)} s: ${Math.round(STEPS / seconds)} steps/s`);
  };
  for (let r = 0; r < ROUNDS; r++) {
    await drain('single');
    await drain('pool');
  }
  await owner.end();
} finally {
  await server.stop({ destroy: true });
}
