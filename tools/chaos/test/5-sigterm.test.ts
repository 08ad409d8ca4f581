// Scenario 5 of `npm run chaos`, quick version, in `npm test`.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { TestDatabase } from '@org/testing';
import { scenario } from '../src/scenarios/5-sigterm.js';
import { chaosDatabase, context, expectHeld } from './support.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await chaosDatabase();
});
afterAll(async () => {
  await db?.drop();
});

it('SIGTERM with tasks in flight: no new claims, in-flight finished, the rest released, exit 0', async () => {
  const result = await scenario.run(context(db));
  expect(result.skipped).toBeUndefined();
  expectHeld(result);
});
