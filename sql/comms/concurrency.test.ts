// 16 worker connections run the same supervisors concurrently over 200 roots while
// error handlers fail attempts under them: no root ever has two outstanding attempts,
// and none has more attempts than the maximum. Counted from the facts.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type pg from 'pg';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const ROOTS = 200;
const WORKERS = 16;
const CALLS_PER_WORKER = 80;

it.each([
  ['email', 'send_email'],
  ['sms', 'send_sms'],
] as const)(
  '16 concurrent %s supervisors over 200 roots never schedule two outstanding attempts',
  async (channel, process) => {
    const { rows: roots } = await db.query<{ id: string }>(
      channel === 'email'
        ? `select (comms.send_email('a@example.com', 'b' || g || '@example.com', 's', 'h')).send_email_task_id::text as id
           from generate_series(1, ${ROOTS}) g`
        : `select (comms.send_sms('+1415555' || lpad(g::text, 4, '0'), 'hi')).send_sms_task_id::text as id
           from generate_series(1, ${ROOTS}) g`,
    );
    const ids = roots.map((r) => Number(r.id));
    const clients: pg.Client[] = await Promise.all(Array.from({ length: WORKERS }, () => db.client('worker')));
    const pick = () => ids[Math.floor(Math.random() * ids.length)];

    // Worker i: mostly supervisor runs on random roots; every fourth call fails the
    // outstanding attempt of a random root (as the error handler would), which lets the
    // next supervisor run schedule a retry, racing the others.
    await Promise.all(
      clients.map(async (client, i) => {
        for (let call = 0; call < CALLS_PER_WORKER; call++) {
          const root = pick();
          if ((call + i) % 4 === 3) {
            const { rows } = await db.query<{ id: string }>(
              `select a.${process}_attempt_id::text as id from comms.${process}_attempt a
              where a.${process}_task_id = $1
                and not exists (select 1 from comms.${process}_attempt_failed f where f.${process}_attempt_id = a.${process}_attempt_id)
                and not exists (select 1 from comms.${process}_attempt_succeeded s where s.${process}_attempt_id = a.${process}_attempt_id)`,
              [root],
            );
            for (const { id } of rows) {
              await client.query(`select internal.run_function($1, $2)`, [
                `comms.record_${channel}_failure`,
                JSON.stringify({ original_payload: { [`${process}_attempt_id`]: Number(id) }, error: 'provider down' }),
              ]);
            }
          } else {
            await client.query(`select internal.run_function($1, $2)`, [
              `comms.${process}_supervisor`,
              JSON.stringify({ [`${process}_task_id`]: root }),
            ]);
          }
        }
      }),
    );
    await Promise.all(clients.map((c) => c.end()));

    const { rows } = await db.query(
      `select f.*, t.${process}_task_id as root
       from comms.${process}_task t, lateral comms.${process}_supervisor_facts(t.${process}_task_id) f
      where t.${process}_task_id = any($1)`,
      [ids],
    );
    expect(rows).toHaveLength(ROOTS);
    expect(rows.filter((r) => r.num_outstanding > 1)).toEqual([]);
    expect(rows.filter((r) => r.num_attempts > 3 || r.num_attempts - r.num_failures > 1)).toEqual([]);
    // The race was real: roots were retried, and some ran out of attempts.
    expect(rows.some((r) => r.num_attempts >= 2)).toBe(true);
    expect(rows.reduce((n, r) => n + r.num_runs, 0)).toBeGreaterThan(WORKERS * CALLS_PER_WORKER * 0.5);
  },
);
