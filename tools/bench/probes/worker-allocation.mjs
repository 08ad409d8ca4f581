// What the worker allocates per task during a drain (the real Worker, README defaults, a
// no-op processor), by the function that allocated it, from V8's sampling heap profiler:
//   node tools/bench/probes/worker-allocation.mjs [tasks=20000]
// RETAINED=1 counts only what outlived the young generation (moved to the old generation
// or still alive at the end): what a drain adds to the resident memory. That figure
// depends on when the collections fell, and varies from run to run by a third; the total
// allocated does not. TOP=<n> lines (default 30).
import { Session } from 'node:inspector/promises';
import { openServer } from '@org/db-tools';
import { enqueueBacklog, noopWorker, probeDatabase } from './drain-fixture.mjs';

const TASKS = Number(process.argv[2] ?? 20000);
const retained = process.env.RETAINED === '1';
const server = await openServer({ name: `bench-alloc-${process.pid}` });
try {
  const { urls, root } = await probeDatabase(server);
  await enqueueBacklog(urls, root, TASKS);
  const { worker, allDone } = noopWorker(urls, { tasks: TASKS, concurrency: 10, prefetch: 500 });
  const session = new Session();
  session.connect();
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 512,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: !retained,
  });
  await worker.start();
  await allDone;
  const { profile } = await session.post('HeapProfiler.stopSampling');
  await worker.stop();
  const bytes = new Map();
  let total = 0;
  const walk = (node) => {
    const { functionName, url, lineNumber } = node.callFrame;
    const where = url.replace(/.*node_modules\//, '').replace(/.*\/packages\//, '@org/');
    const name = `${functionName || '(anonymous)'} ${where}:${lineNumber}`;
    total += node.selfSize;
    bytes.set(name, (bytes.get(name) ?? 0) + node.selfSize);
    for (const child of node.children) walk(child);
  };
  walk(profile.head);
  console.log(`${retained ? 'retained' : 'allocated'}: ${Math.round(total / TASKS)} bytes per task`);
  for (const [name, size] of [...bytes].sort((a, b) => b[1] - a[1]).slice(0, Number(process.env.TOP ?? 30)))
    console.log(String(Math.round(size / TASKS)).padStart(7), name);
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
