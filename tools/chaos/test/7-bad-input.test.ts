// Scenario 7 of `npm run chaos`, quick version, in `npm test`.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { TestDatabase } from '@org/testing';
import { scenario } from '../src/scenarios/7-bad-input.js';
import { chaosDatabase, context, expectHeld } from './support.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await chaosDatabase();
});
afterAll(async () => {
  await db?.drop();
});

it('the bad-input corpus: a clear error for each case and nothing else changed', async () => {
  const result = await scenario.run(context(db));
  expect(result.skipped).toBeUndefined();
  expectHeld(result);
});
