// The cost of a connection's first claims and completions: on one new connection, ROUNDS
// rounds of a claim of LIMIT tasks of type `bench` and their settle, each call timed, as
// a worker's pool connections run them after it starts. With a large history (many
// partition sets) a backend's first calls build the cache entries of every partition
// they open and plan over them.
//   node tools/bench/probes/first-calls.mjs <database url> [rounds=12] [limit=500]
import pg from 'pg';
import { claimTasks, settleTasks } from '@org/queue-client';

const url = process.argv[2];
const ROUNDS = Number(process.argv[3] ?? 12);
const LIMIT = Number(process.argv[4] ?? 500);
const client = new pg.Client({ connectionString: url });
await client.connect();
const line = [];
for (let i = 0; i < ROUNDS; i++) {
  let t = performance.now();
  const tasks = await claimTasks(client, {
    workerId: `first-calls-${process.pid}`,
    limit: LIMIT,
    taskTypes: ['bench'],
    leaseSeconds: 300,
    maxLeases: 5,
  });
  const claimMs = performance.now() - t;
  t = performance.now();
  await settleTasks(
    client,
    tasks.map((task) => ({
      taskId: task.taskId,
      taskLeaseId: task.taskLeaseId,
      outcome: 'succeeded',
      startedAt: new Date(),
    })),
  );
  const settleMs = performance.now() - t;
  line.push(`${tasks.length}: claim ${claimMs.toFixed(1)} settle ${settleMs.toFixed(1)}`);
}
console.log(line.join('\n'));
await client.end();
