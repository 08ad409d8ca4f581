// Account anonymization on its own, as the worker runs its supervisor: the envelopes of
// each run, the stuck check its parent reads, and the idempotent kickoff.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { rowCounts, runAsWorker } from '../test-support/drive.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.drop();
});

async function account(): Promise<number> {
  const { rows } = await db.query(
    `insert into accounts.account (email, display_name) values ('u' || random() || '@example.com', 'Ada') returning account_id::int`,
  );
  return rows[0].account_id as number;
}
/** accounts.kickoff_account_anonymization is the owner's (the account deletion supervisor calls it). */
const kickoff = async (accountId: number) =>
  (await db.query('select accounts.kickoff_account_anonymization($1)::int as id', [accountId])).rows[0].id as number;
const supervise = (id: number) =>
  runAsWorker(db, 'accounts.account_anonymization_supervisor', { account_anonymization_task_id: id });
const stuck = async (accountId: number) =>
  (await db.query('select accounts.is_account_anonymization_stuck($1) as s', [accountId])).rows[0].s as boolean;

describe('account anonymization', () => {
  it('one run anonymizes the account; later runs report it', async () => {
    const accountId = await account();
    const id = await kickoff(accountId);
    expect(await supervise(id)).toEqual({ success: true, payload: { status: 'succeeded' } });
    expect(
      (await db.query('select email, display_name from accounts.account where account_id = $1', [accountId])).rows[0],
    ).toEqual({ email: null, display_name: null });
    expect(await supervise(id)).toEqual({ success: true, payload: { status: 'succeeded' } });
    expect(await stuck(accountId)).toBe(false);
  });

  it('a failing anonymization: attempt_failed twice, then max_attempts_reached, then stuck', async () => {
    const accountId = await account();
    await db.query(
      `insert into accounts.anonymization_failure_injection (account_id, error_message) values ($1, 'no')`,
      [accountId],
    );
    const id = await kickoff(accountId);
    const error = `anonymization of account ${accountId} failed: no`;
    for (let i = 0; i < 2; i++) {
      const result = await supervise(id);
      expect(result).toEqual({
        success: true,
        payload: { status: 'attempt_failed', error, next_check_at: expect.any(String) },
      });
      expect(await stuck(accountId)).toBe(false);
    }
    expect(await supervise(id)).toEqual({ status: 'max_attempts_reached', payload: { error } });
    expect(await stuck(accountId)).toBe(true);
    expect(await supervise(id)).toEqual({ status: 'max_attempts_reached' });
    expect(
      (await db.query('select display_name from accounts.account where account_id = $1', [accountId])).rows[0],
    ).toEqual({ display_name: 'Ada' });
  });

  it('a second kickoff for the account returns the same root and writes nothing', async () => {
    const accountId = await account();
    const id = await kickoff(accountId);
    const before = await rowCounts(db, ['accounts', 'queues']);
    expect(await kickoff(accountId)).toBe(id);
    expect(await rowCounts(db, ['accounts', 'queues'])).toEqual(before);
  });

  it('an account with no anonymization is not stuck', async () => {
    expect(await stuck(await account())).toBe(false);
  });
});
