// The worked example of docs/adding-a-business-process.md: the scaffold of
// `npm run new-process -- notify send_webhook webhook` is generated, migrated onto a test
// database exactly as graphile-migrate would apply it (includes resolved, role
// placeholders filled), and its process is driven to its terminal facts with the worker
// played by hand. Nothing is hand-written beyond what the scaffold wrote.
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { channelProcessFiles } from '../../tools/new-process/template.mjs';
import { drive, rowCounts, runAsWorker } from '../test-support/drive.ts';

let db: TestDatabase;
let dir: string;
let files: Record<string, string>;

/** Applies a migration file the way graphile-migrate does: `--!include x` is the file sql/x. */
function resolveIncludes(sql: string): string {
  return sql.replace(/^--!include (.+)$/gm, (_line, path: string) =>
    resolveIncludes(readFileSync(join(dir, 'sql', path.trim()), 'utf8')),
  );
}

beforeAll(async () => {
  db = await createTestDatabase();
  dir = mkdtempSync(join(tmpdir(), 'new-process-'));
  files = channelProcessFiles({ schema: 'notify', name: 'send_webhook', channel: 'webhook' });
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), content);
  }
  const migration = resolveIncludes(readFileSync(join(dir, 'migrations/current/230-notify-send_webhook.sql'), 'utf8'))
    .replaceAll(':DATABASE_WORKER', db.dbUsers.worker)
    .replaceAll(':DATABASE_APP', db.dbUsers.app);
  await db.query(`begin;\n${migration}\ncommit;`);
});
afterAll(async () => {
  await db?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const kickoff = async (subjectId: unknown) =>
  (
    await db
      .pool('app')
      .query(
        'select send_webhook_task_id::int as id, validation_failure_message from notify.kickoff_send_webhook($1)',
        [subjectId],
      )
  ).rows[0];
const outcome = async (id: number) => ({
  succeeded:
    (await db.query('select 1 from notify.send_webhook_task_succeeded where send_webhook_task_id = $1', [id]))
      .rowCount === 1,
  failed:
    (await db.query('select reason from notify.send_webhook_task_failed where send_webhook_task_id = $1', [id])).rows[0]
      ?.reason ?? null,
});

describe('a process written by the scaffold', () => {
  it('writes three files: the migration, the process, its grants', () => {
    expect(Object.keys(files).sort()).toEqual([
      'migrations/current/230-notify-send_webhook.sql',
      'sql/notify/privileges.sql',
      'sql/notify/send_webhook.sql',
    ]);
    expect(() => channelProcessFiles({ schema: 'Bad Schema', name: 'x', channel: 'y' })).toThrow(/schema must match/);
  });

  it('happy path: kickoff as the app, one webhook call, the root succeeds', async () => {
    const { id, validation_failure_message } = await kickoff(101);
    expect(validation_failure_message).toBeNull();
    const { processed } = await drive(db, { rootKey: 'send_webhook_task_id', rootId: id });
    const calls = processed.filter((p) => p.task.task_type === 'webhook');
    expect(calls).toHaveLength(1);
    expect(calls[0].result).toEqual({
      success: true,
      payload: {
        subject_id: 101,
        idempotency_key: expect.stringMatching(new RegExp(`^[0-9]+:${db.name}:send_webhook_attempt:\\d+$`)),
      },
    });
    expect(await outcome(id)).toEqual({ succeeded: true, failed: null });
    // A second kickoff is a no-op.
    const before = await rowCounts(db, ['notify', 'queues']);
    expect((await kickoff(101)).id).toBe(id);
    expect(await rowCounts(db, ['notify', 'queues'])).toEqual(before);
  });

  it('every call fails: three attempts, then max_attempts_reached', async () => {
    const { id } = await kickoff(102);
    const { processed } = await drive(db, {
      rootKey: 'send_webhook_task_id',
      rootId: id,
      provider: () => ({ ok: false, error: 'HTTP 503' }),
    });
    expect(processed.filter((p) => p.task.task_type === 'webhook')).toHaveLength(3);
    expect(await outcome(id)).toEqual({ succeeded: false, failed: 'max_attempts_reached' });
  });

  it('bad input is a message and writes nothing; roles get only their functions', async () => {
    const before = await rowCounts(db, ['notify', 'queues']);
    expect(await kickoff(null)).toEqual({
      id: null,
      validation_failure_message: 'subject_id must be a positive integer',
    });
    expect(await rowCounts(db, ['notify', 'queues'])).toEqual(before);
    expect(await runAsWorker(db, 'notify.send_webhook_supervisor', { send_webhook_task_id: 'x' })).toEqual({
      success: false,
      validation_failure_message: 'send_webhook_task_id must be a positive integer',
    });
    await expect(db.pool('app').query(`select notify.send_webhook_supervisor('{}')`)).rejects.toMatchObject({
      code: '42501',
    });
    await expect(db.pool('worker').query('select * from notify.kickoff_send_webhook(1)')).rejects.toMatchObject({
      code: '42501',
    });
    await expect(db.pool('app').query(`select queues.enqueue('webhook', '{}')`)).rejects.toMatchObject({
      code: '42501',
    });
  });
});
