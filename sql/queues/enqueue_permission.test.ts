// Who may enqueue what: the app and API roles cannot make the worker act for them.
// Internal task types (channel tasks and db_function steps) are refused by the public
// queues.enqueue / enqueue_many with 42501, whoever asks and however the payload is
// dressed; the owner's SQL (kickoffs, supervisors, handlers) still enqueues them.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { rowCounts } from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

// The attacks of issue 12 item 5, and their neighbours.
const FORGED: [string, string, Record<string, unknown>][] = [
  [
    'file_delete with no before handler (an unrelated object)',
    'file_delete',
    { bucket: 'user-uploads', object_key: 'someone-else/passport.pdf' },
  ],
  [
    'file_delete naming the real handlers',
    'file_delete',
    {
      file_deletion_attempt_id: 1,
      before_handler: 'files.get_file_delete_payload',
      success_handler: 'files.record_file_delete_success',
      error_handler: 'files.record_file_delete_failure',
    },
  ],
  [
    'db_function forging a handler call',
    'db_function',
    {
      db_function: 'files.record_file_delete_success',
      original_payload: { file_deletion_attempt_id: 1 },
      worker_payload: {},
    },
  ],
  [
    'db_function running a supervisor',
    'db_function',
    { db_function: 'comms.send_email_supervisor', send_email_task_id: 1 },
  ],
  ['email with a payload of its own', 'email', { to_address: 'victim@example.com', subject: 'hi', html: 'x' }],
  ['sms', 'sms', { to_number: '+14155550100', body: 'premium' }],
];

describe.each(['app', 'api'] as const)('as %s', (dbUser) => {
  it.each(FORGED)('queues.enqueue refuses %s with 42501, nothing written', async (_label, taskType, payload) => {
    const before = await rowCounts(db, ['queues', 'files', 'comms']);
    await expect(
      db.pool(dbUser).query('select queues.enqueue($1, $2::jsonb)', [taskType, JSON.stringify(payload)]),
    ).rejects.toMatchObject({
      code: '42501',
      message: `task_type '${taskType}' may be enqueued only by the database's own processes, not by ${db.dbUsers[dbUser]}`,
    });
    expect(await rowCounts(db, ['queues', 'files', 'comms'])).toEqual(before);
  });

  it('a public task type is still enqueued', async () => {
    const { rows } = await db.pool(dbUser).query(`select queues.enqueue('product_resync', '{"store_id": 1}') as id`);
    expect(Number(rows[0].id)).toBeGreaterThan(0);
  });
});

describe('enqueue_many', () => {
  it('refuses a batch with an internal type anywhere, naming the element; nothing written', async () => {
    const before = await rowCounts(db, ['queues']);
    const tasks = [
      { task_type: 'product_resync', payload: {} },
      { task_type: 'db_function', payload: { db_function: 'files.record_file_delete_success' } },
      { task_type: 'email', payload: {} },
    ];
    await expect(
      db.pool('app').query('select * from queues.enqueue_many($1::jsonb)', [JSON.stringify(tasks)]),
    ).rejects.toMatchObject({
      code: '42501',
      message: expect.stringMatching(
        /^tasks\[1\]: task_type 'db_function' may be enqueued only by the database's own processes/,
      ),
    });
    expect(await rowCounts(db, ['queues'])).toEqual(before);
  });

  it('generate_staggered_tasks (app and API) cannot reach internal types either', async () => {
    for (const dbUser of ['app', 'api'] as const) {
      await expect(
        db
          .pool(dbUser)
          .query(`select * from schedules.generate_staggered_tasks('db_function', $1, now(), '1 day', 2)`, [
            JSON.stringify([{ db_function: 'internal.noop' }, { db_function: 'internal.noop' }]),
          ]),
      ).rejects.toMatchObject({ code: '42501' });
    }
  });
});

describe('the owner and its SQL', () => {
  it('the owner session may enqueue internal types by hand (migrations, operators)', async () => {
    const { rows } = await db.query(`select queues.enqueue('db_function', '{"db_function": "internal.noop"}') as id`);
    expect(Number(rows[0].id)).toBeGreaterThan(0);
  });

  it('queues.enqueue_internal has no grant: app, api and worker are refused', async () => {
    for (const dbUser of ['app', 'api', 'worker'] as const) {
      await expect(db.pool(dbUser).query(`select queues.enqueue_internal('db_function', '{}')`)).rejects.toMatchObject({
        code: '42501',
      });
    }
  });

  it('a kickoff called by the app still enqueues its supervisor (db_function) through the owner SQL', async () => {
    const { rows } = await db
      .pool('app')
      .query(`select send_sms_task_id::int, validation_failure_message from comms.send_sms('+14155550100', 'code 1')`);
    expect(rows[0].validation_failure_message).toBeNull();
    const { rows: tasks } = await db.query(
      `select task_type, payload ->> 'db_function' as fn from queues.task where payload ->> 'send_sms_task_id' = $1`,
      [String(rows[0].send_sms_task_id)],
    );
    expect(tasks).toEqual([{ task_type: 'db_function', fn: 'comms.send_sms_supervisor' }]);
  });

  it('a dead-lettered channel task is redriven by the API (redrive is the owner SQL)', async () => {
    const { rows } = await db.query(`select queues.enqueue('email', '{"send_email_attempt_id": 999}') as id`);
    const id = rows[0].id as string;
    await db.query(
      `insert into queues.task_completed (task_id, outcome, task_type) values ($1, 'abandoned', 'email')`,
      [id],
    );
    await db.query('delete from queues.task_pending where task_id = $1', [id]);
    const { rows: r } = await db.pool('api').query('select admin.redrive_task($1) as new_id', [id]);
    expect(Number(r[0].new_id)).toBeGreaterThan(Number(id));
  });
});
