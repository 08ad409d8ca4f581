// What one round trip of each of the worker's statements costs when it has nothing to do
// (an empty queue), on one connection as the worker's database user, against `select 1`;
// and the start mark and the claim sent unnamed (parsed, analysed and planned on every
// call) against named (prepared once per connection, as the queue client sends them).
// p50 and mean of N calls each, in two rounds.
//   node tools/bench/probes/round-trips.mjs [calls=2000]
import pg from 'pg';
import { openServer } from '@org/db-tools';
import { probeDatabase } from './drain-fixture.mjs';

const CALLS = Number(process.argv[2] ?? 2000);
const server = await openServer({ name: `bench-round-trips-${process.pid}` });
try {
  const { urls, root } = await probeDatabase(server);
  const client = new pg.Client({ connectionString: urls.worker });
  client.on('error', () => {}); // the server's stop at the end
  await client.connect();
  const mark = `select s as "taskId" from queues.mark_started($1::bigint[], $2::bigint[]) s`;
  const claim = `select c.task_id as "taskId", c.payload as "payload" from queues.claim_tasks($1, $2, $3, $4, $5) c`;
  const claimArgs = ['probe', 20, ['bench'], 300, 5];
  const statements = [
    ['select 1', { text: 'select 1' }],
    ['start mark, unnamed', { text: mark, values: [[], []] }],
    ['start mark, named', { name: 'probe_mark', text: mark, values: [[], []] }],
    ['claim, unnamed', { text: claim, values: claimArgs }],
    ['claim, named', { name: 'probe_claim', text: claim, values: claimArgs }],
    ['next_claim_in_ms', { name: 'probe_next', text: 'select queues.next_claim_in_ms($1)', values: [['bench']] }],
  ];
  const rows = [];
  for (let round = 1; round <= 2; round++)
    for (const [label, query] of statements) {
      const ms = [];
      for (let i = 0; i < CALLS; i++) {
        const t = performance.now();
        await client.query(query);
        ms.push(performance.now() - t);
      }
      ms.sort((a, b) => a - b);
      rows.push({
        round,
        statement: label,
        p50_ms: ms[Math.floor(ms.length / 2)].toFixed(3),
        mean_ms: (ms.reduce((a, b) => a + b, 0) / ms.length).toFixed(3),
      });
    }
  console.table(rows);
  await client.end();
  await root.end();
} finally {
  await server.stop({ destroy: true });
}
