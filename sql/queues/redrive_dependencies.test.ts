// Redriving a task that failed because a dependency failed (sql/queues/dead_letter.sql):
// its copy depends on the same tasks, or on their newest redrive copies; a dependency
// that ended badly and was not redriven refuses the redrive (55000, nothing written), and
// a call that names both redrives the dependency first whatever the input order.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const TYPE = 'product_resync';

const enqueue = async (dependsOn: string[] | null = null) =>
  (
    await db.query<{ id: string }>(
      `select queues.enqueue_internal($1, '{}', _max_attempts => 1, _depends_on => $2::bigint[])::text as id`,
      [TYPE, dependsOn],
    )
  ).rows[0].id;

const end = (id: string, outcome: 'succeeded' | 'failed') =>
  db.query(`select * from queues.complete_tasks(array[$1::bigint], null, array[$2::text])`, [id, outcome]);

const depsOf = async (id: string) =>
  (
    await db.query<{ dep: string }>(
      `select depends_on_task_id::text as dep from queues.task_dependency where task_id = $1 order by 1::bigint`,
      [id],
    )
  ).rows.map((r) => r.dep);

const stateOf = async (id: string) =>
  (await db.query<{ s: string }>('select admin.get_task($1) #>> $2 as s', [id, '{task,state}'])).rows[0].s;

const errorOf = async (id: string) =>
  (
    await db.query<{ m: string }>(
      'select error_message as m from queues.error where task_id = $1 order by error_id desc limit 1',
      [id],
    )
  ).rows[0]?.m;

const counts = async () =>
  (
    await db.query(
      `select (select count(*) from queues.task)::int as tasks,
              (select count(*) from queues.task_redriven)::int as redriven,
              (select count(*) from queues.task_dependency)::int as edges`,
    )
  ).rows[0];

/** A succeeded task S, a task A that failed, and X depending on both (failed for A). */
const failedPair = async () => {
  const s = await enqueue();
  await end(s, 'succeeded');
  const a = await enqueue();
  const x = await enqueue([s, a]);
  await end(a, 'failed');
  expect(await stateOf(x)).toBe('failed');
  expect(await errorOf(x)).toBe(`dependency task ${a} ended failed`);
  return { s, a, x };
};

const redrive = async (id: string) =>
  (await db.query<{ id: string }>('select queues.redrive_task($1)::text as id', [id])).rows[0].id;

describe('redriving a task that failed for its dependency', () => {
  it("dependency first: the copy depends on the succeeded task and on the dependency's copy, and runs after it", async () => {
    const { s, a, x } = await failedPair();
    const a2 = await redrive(a);
    const x2 = await redrive(x);
    expect(await depsOf(x2)).toEqual([s, a2]);
    expect(await stateOf(x2)).toBe('waiting');
    await end(a2, 'succeeded');
    expect(await stateOf(x2)).toBe('ready');
  });

  it('dependent first: refused while the dependency is not redriven, nothing written; then it goes', async () => {
    const { s, a, x } = await failedPair();
    const before = await counts();
    await expect(redrive(x)).rejects.toMatchObject({
      code: '55000',
      message: `task ${x} cannot be redriven: its dependency task ${a} ended failed and was not redriven`,
    });
    const { rows } = await db
      .pool('api')
      .query(`select task_id::text, result, new_task_id from admin.redrive_tasks(array[$1::bigint])`, [x]);
    expect(rows).toEqual([{ task_id: x, result: 'dependency_not_redriven', new_task_id: null }]);
    expect(await counts()).toEqual(before);

    // Both in one call, the dependent named first: the dependency is redriven first.
    const { rows: both } = await db
      .pool('api')
      .query<{ task_id: string; result: string; new_task_id: string }>(
        `select task_id::text, result, new_task_id::text from admin.redrive_tasks(array[$1::bigint, $2::bigint])`,
        [x, a],
      );
    expect(both.map((r) => [r.task_id, r.result])).toEqual([
      [x, 'redriven'],
      [a, 'redriven'],
    ]);
    const [x2, a2] = both.map((r) => r.new_task_id);
    expect(await depsOf(x2)).toEqual([s, a2]);
    expect(await stateOf(x2)).toBe('waiting');
  });

  it('follows a dependency redriven more than once to its newest copy; a failed copy not redriven refuses', async () => {
    const { s, a, x } = await failedPair();
    const a2 = await redrive(a);
    await end(a2, 'failed');
    await expect(redrive(x)).rejects.toMatchObject({
      code: '55000',
      message: `task ${x} cannot be redriven: its dependency task ${a2} ended failed and was not redriven`,
    });
    const a3 = await redrive(a2);
    await end(a3, 'succeeded');
    const x2 = await redrive(x);
    expect(await depsOf(x2)).toEqual([s, a3]);
    // Every dependency has succeeded: the copy is ready at once.
    expect(await stateOf(x2)).toBe('ready');
  });

  it('a copy of the copy: a redriven dependent that failed again is redriven against the newest copies', async () => {
    const { s, a, x } = await failedPair();
    const a2 = await redrive(a);
    const x2 = await redrive(x);
    await end(a2, 'failed');
    expect(await stateOf(x2)).toBe('failed');
    const { rows } = await db
      .pool('api')
      .query<{ new_task_id: string }>(
        `select new_task_id::text from admin.redrive_tasks(array[$1::bigint, $2::bigint]) order by task_id`,
        [x2, a2],
      );
    const [a3, x3] = rows.map((r) => r.new_task_id);
    expect(await depsOf(x3)).toEqual([s, a3]);
  });
});
