// The file_delete provider deletes only what a before_handler returned: a file_delete
// task whose payload names an object itself (no before_handler) deletes nothing, even
// when the owner's SQL enqueued it, and fails with a clear error.
import { mkdtempSync, mkdirSync, writeFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import {
  createLocalEmailOutboxProvider,
  createLocalSmsOutboxProvider,
  createLocalStorageDeleteProvider,
} from '@org/providers';
import { defaultRegistry } from '../src/command.js';
import { createLogger, Worker } from '../src/index.js';
import { enqueue, eventually, factsOf } from './support/fixtures.js';

let db: TestDatabase;
let root: string;
beforeAll(async () => {
  db = await createTestDatabase();
  root = mkdtempSync(join(tmpdir(), 'file-delete-guard-'));
});
afterAll(async () => {
  await db?.drop();
  rmSync(root, { recursive: true, force: true });
});

it('a file_delete task without a before_handler deletes nothing and fails naming why', async () => {
  mkdirSync(join(root, 'user-uploads', 'someone-else'), { recursive: true });
  const victim = join(root, 'user-uploads', 'someone-else', 'passport.pdf');
  writeFileSync(victim, 'secret');
  const id = await enqueue(db, 'file_delete', {
    bucket: 'user-uploads',
    object_key: 'someone-else/passport.pdf',
    file_id: 1,
    idempotency_key: 'x',
  });
  const worker = new Worker({
    databaseUrl: db.url('worker'),
    roles: ['file_delete'],
    workerId: 'guard',
    concurrency: 1,
    pollIntervalMs: 100,
    heartbeatIntervalMs: 1000,
    leaseSeconds: 30,
    maxLeases: 5,
    shutdownGraceMs: 1000,
    logger: createLogger('silent'),
    registry: defaultRegistry({
      email: createLocalEmailOutboxProvider({ dir: join(root, 'outbox') }),
      sms: createLocalSmsOutboxProvider({ dir: join(root, 'sms') }),
      file_delete: createLocalStorageDeleteProvider({ storageRoot: root }),
    }),
  });
  await worker.start();
  try {
    await eventually(async () => (await factsOf(db, id)).outcome !== null, 'the task completed');
  } finally {
    await worker.stop();
  }
  expect(existsSync(victim)).toBe(true);
  expect(await factsOf(db, id)).toMatchObject({
    outcome: 'failed',
    errors: [
      'local-storage: refusing a file_delete task without a before_handler: it acts only on what a before_handler returns',
    ],
  });
});
