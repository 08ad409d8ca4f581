// The chaos scenarios on a test database: fixtures installed, the result's checks
// turned into one assertion that names every broken invariant.
import { expect } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';
import { installFixtures } from '../src/fixtures.js';
import type { ChaosContext, Result } from '../src/harness.js';

export async function chaosDatabase(): Promise<TestDatabase> {
  const db = await createTestDatabase();
  await installFixtures(db);
  return db;
}

export const context = (db: TestDatabase): ChaosContext => ({ db, quick: true, log: () => {} });

/** Every invariant held (the broken ones are listed in the failure). */
export function expectHeld(result: Result): void {
  expect(result.checks.length).toBeGreaterThan(0);
  expect(result.checks.filter((c) => !c.ok).map((c) => `${c.name}: ${c.detail}`)).toEqual([]);
}
