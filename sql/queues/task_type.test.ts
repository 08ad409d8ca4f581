// queues.register_task_types: the owner registers the task types an app's task
// definitions declare. Nobody else may (the worker creating task types could make the
// app enqueue anything); bad input names the element and writes nothing; concurrent
// registrations of the same types all succeed and create each type once.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

const register = (types: unknown, dbUser: 'owner' | 'worker' | 'app' | 'api' = 'owner') =>
  db
    .pool(dbUser)
    .query<{ task_type: string; created: boolean }>('select * from queues.register_task_types($1::jsonb)', [
      JSON.stringify(types),
    ]);

const described = async (names: string[]) =>
  (
    await db.query<{ task_type: string; description: string }>(
      'select task_type, description from queues.task_type where task_type = any($1) order by task_type',
      [names],
    )
  ).rows;

const typeCount = async () => (await db.query('select count(*)::int as n from queues.task_type')).rows[0].n as number;

it('creates the missing types, keeps existing ones, and updates descriptions given', async () => {
  const first = await register([{ task_type: 'fax', description: 'Sends a fax' }, { task_type: 'telex' }]);
  expect(first.rows).toEqual([
    { task_type: 'fax', created: true },
    { task_type: 'telex', created: true },
  ]);
  const again = await register([
    { task_type: 'fax' },
    { task_type: 'telex', description: 'Sends a telex' },
    { task_type: 'pager', description: null },
  ]);
  expect(again.rows).toEqual([
    { task_type: 'fax', created: false },
    { task_type: 'pager', created: true },
    { task_type: 'telex', created: false },
  ]);
  // An empty description keeps the type's own.
  expect(await described(['fax', 'pager', 'telex'])).toEqual([
    { task_type: 'fax', description: 'Sends a fax' },
    { task_type: 'pager', description: '' },
    { task_type: 'telex', description: 'Sends a telex' },
  ]);
  // The new type is one the app may enqueue.
  await db.pool('app').query(`select queues.enqueue('fax', '{"to": "+15550100"}'::jsonb)`);
});

it('may be called by the owner only', async () => {
  for (const dbUser of ['worker', 'app', 'api'] as const) {
    await expect(register([{ task_type: `by_${dbUser}` }], dbUser)).rejects.toMatchObject({
      code: '42501',
      message: 'permission denied for function register_task_types',
    });
  }
  expect(await described(['by_worker', 'by_app', 'by_api'])).toEqual([]);
});

it('refuses a worker-only task type', async () => {
  await expect(register([{ task_type: 'ok_one' }, { task_type: 'email' }])).rejects.toMatchObject({
    code: '42501',
    message: `task_types[1].task_type 'email' is a worker-only task type of the queue; choose another name`,
  });
  expect(await described(['ok_one'])).toEqual([]);
});

it('names the bad element and writes nothing', async () => {
  const before = await typeCount();
  const cases: [unknown, string, string][] = [
    [null, '22004', 'task_types must not be null'],
    [{ task_type: 'fax' }, '22023', 'task_types must be a JSON array, got object'],
    [[{ task_type: 'good_one' }, 'fax'], '22023', 'task_types[1] must be an object, got string'],
    [[{ task_type: 'good_one' }, { name: 'fax' }], '22023', 'task_types[1]: unknown field(s) name'],
    [[{ task_type: 'good_one' }, {}], '22023', 'task_types[1].task_type must be a string'],
    [[{ task_type: 7 }], '22023', 'task_types[0].task_type must be a string'],
    [
      [{ task_type: 'good_one' }, { task_type: 'Fax-2' }],
      '22023',
      `task_types[1].task_type must be a-z, 0-9 and _, starting with a letter, at most 63 characters, got 'Fax-2'`,
    ],
    [[{ task_type: 'good_one', description: 5 }], '22023', 'task_types[0].description must be a string'],
    [
      [{ task_type: 'good_one', description: 'x'.repeat(1001) }],
      '54000',
      'task_types[0].description is 1001 characters, over the limit of 1000',
    ],
    [
      Array.from({ length: 1001 }, (_, i) => ({ task_type: `t${i}` })),
      '54000',
      'task_types has 1001 elements, over the limit of 1000',
    ],
  ];
  for (const [input, code, message] of cases) {
    const sent = input === null ? null : JSON.stringify(input);
    await expect(
      db.query('select * from queues.register_task_types($1::jsonb)', [sent]),
      JSON.stringify(input).slice(0, 80),
    ).rejects.toMatchObject({ code, message });
  }
  expect(await typeCount()).toBe(before);
});

it('registers the same types from many sessions at once: each created once, none failing', async () => {
  const types = [{ task_type: 'race_a' }, { task_type: 'race_b', description: 'raced' }];
  const results = await Promise.all(Array.from({ length: 16 }, () => register(types)));
  const created = results.flatMap((r) => r.rows.filter((row) => row.created).map((row) => row.task_type)).sort();
  expect(created).toEqual(['race_a', 'race_b']);
  expect(await described(['race_a', 'race_b'])).toEqual([
    { task_type: 'race_a', description: '' },
    { task_type: 'race_b', description: 'raced' },
  ]);
});
