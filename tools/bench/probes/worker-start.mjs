// What a worker process's start costs before its drain: N tasks drained by a real Worker
// (a no-op processor), with the sessions it opened (pg_stat_database.sessions), its own
// CPU and the server's from worker.start() to the last task, and the time to the
// last task. A second process on the same queue pays all of it again.
//   node tools/bench/probes/worker-start.mjs [tasks=500]
// PROFILE=<file.cpuprofile>: the worker's CPU profile from its start to the last task.
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { openServer } from '@org/db-tools';
import { enqueueBacklog, noopWorker, postgresCpuMicros, probeDatabase } from './drain-fixture.mjs';

const TASKS = Number(process.argv[2] ?? 500);
const server = await openServer({ name: `bench-worker-start-${process.pid}` });
try {
  const { urls, root } = await probeDatabase(server);
  await enqueueBacklog(urls, root, TASKS);
  const sessions = async () =>
    Number(
      (await root.query(`select sessions from pg_stat_database where datname = current_database()`)).rows[0].sessions,
    );
  const { worker, allDone } = noopWorker(urls, { tasks: TASKS, concurrency: 10, prefetch: 500, workerId: 'start' });
  await root.query('select pg_stat_force_next_flush()');
  const sessions0 = await sessions();
  const pg0 = postgresCpuMicros();
  const cpu0 = process.cpuUsage();
  const session = process.env.PROFILE ? new Session() : undefined;
  if (session) {
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.start');
  }
  const t0 = performance.now();
  await worker.start();
  const started = performance.now() - t0;
  await allDone;
  const done = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  if (session) writeFileSync(process.env.PROFILE, JSON.stringify((await session.post('Profiler.stop')).profile));
  const pg = postgresCpuMicros() - pg0;
  await worker.stop();
  await new Promise((r) => setTimeout(r, 600));
  console.log(
    `${TASKS} tasks: start() ${started.toFixed(1)} ms, all done ${done.toFixed(1)} ms; ` +
      `worker CPU ${((cpu.user + cpu.system) / 1000).toFixed(1)} ms, PostgreSQL CPU ${(pg / 1000).toFixed(0)} ms; ` +
      `sessions opened ${(await sessions()) - sessions0}`,
  );
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
