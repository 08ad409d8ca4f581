/**
 * Steady mixed load: db_function steps (chaos.step, an effect row per committed run) and
 * optionally email processes (comms.send_email: a supervisor, then an email task through
 * the fake Resend), enqueued every tick until stopped. Keys are unique per step so that
 * exactly-once effects can be counted.
 */
import type pg from 'pg';
import { sleep } from './harness.js';

export interface Load {
  stop(): Promise<void>;
  steps: number;
  emails: number;
  sms: number;
  errors: string[];
  /** What each answered enqueue stands for: step keys, email addresses, SMS bodies. */
  acked: { steps: string[]; emails: string[]; sms: string[] };
}

export function startLoad(options: {
  app: pg.Pool;
  /** Enqueues the db_function steps: the owner, since apps may not (queues.internal_task_type). */
  owner: pg.Pool;
  tag: string;
  tickMs: number;
  stepsPerTick: number;
  emailsPerTick?: number;
  /** SMS processes (comms.send_sms, through the fake Twilio) per tick; body `<tag>-sms-<n>`. */
  smsPerTick?: number;
  /** Seconds each step sleeps: random in [min, max]. */
  stepSleep?: [number, number];
  /** Stop by itself after this many ticks. */
  maxTicks: number;
}): Load {
  let running = true;
  const load: Load = {
    steps: 0,
    emails: 0,
    sms: 0,
    errors: [],
    acked: { steps: [], emails: [], sms: [] },
    stop: async () => {},
  };
  const [min, max] = options.stepSleep ?? [0, 0];
  // Keys are never used twice: an enqueue whose commit the server made but whose answer
  // was lost (a crash, a restart) counts as failed here, yet its tasks exist.
  let nextKey = 0;
  let nextEmail = 0;
  let nextSms = 0;
  const loop = (async () => {
    for (let tick = 0; running && tick < options.maxTicks; tick++) {
      const started = Date.now();
      try {
        const tasks = [];
        for (let i = 0; i < options.stepsPerTick; i++) {
          const payload: Record<string, unknown> = {
            db_function: 'chaos.step',
            key: `${options.tag}-${nextKey++}`,
          };
          if (max > 0) payload.sleep = Math.round((min + Math.random() * (max - min)) * 1000) / 1000;
          tasks.push({ task_type: 'db_function', payload });
        }
        if (tasks.length > 0) {
          await options.owner.query('select queues.enqueue_many($1::jsonb)', [JSON.stringify(tasks)]);
          load.steps += tasks.length;
          for (const t of tasks) load.acked.steps.push(t.payload.key as string);
        }
        for (let i = 0; i < (options.emailsPerTick ?? 0); i++) {
          const to = `${options.tag}-${nextEmail++}@example.com`;
          const { rows } = await options.app.query(
            `select * from comms.send_email('Chaos <chaos@example.com>', $1, 'Chaos', '<p>chaos</p>')`,
            [to],
          );
          if (rows[0].validation_failure_message) load.errors.push(rows[0].validation_failure_message);
          else load.acked.emails.push(to);
          load.emails++;
        }
        for (let i = 0; i < (options.smsPerTick ?? 0); i++) {
          const body = `${options.tag}-sms-${nextSms++}`;
          const { rows } = await options.app.query(`select * from comms.send_sms('+14155550100', $1)`, [body]);
          if (rows[0].validation_failure_message) load.errors.push(rows[0].validation_failure_message);
          else load.acked.sms.push(body);
          load.sms++;
        }
      } catch (error) {
        // The database may be restarting: the tick is lost, nothing was enqueued.
        load.errors.push((error as Error).message);
      }
      await sleep(Math.max(0, options.tickMs - (Date.now() - started)));
    }
  })();
  load.stop = async () => {
    running = false;
    await loop;
  };
  return load;
}

/** Steps whose effect exists more than once, and steps after `fromId` with no effect. */
export async function effectAnomalies(
  owner: pg.Pool,
  tag: string,
  fromId: number,
): Promise<{ duplicated: number; missing: number }> {
  const { rows } = await owner.query(
    `select (select count(*)::int from (select task_key from chaos.effect where task_key like $1 || '-%'
                                         group by task_key having count(*) > 1) d) as duplicated,
            (select count(*)::int from queues.task t
              where t.task_id > $2 and t.payload->>'db_function' = 'chaos.step' and t.payload->>'key' like $1 || '-%'
                and not exists (select 1 from chaos.effect e where e.task_key = t.payload->>'key')) as missing`,
    [tag, fromId],
  );
  return rows[0];
}
