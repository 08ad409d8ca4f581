// Scenario 3 of `npm run chaos`, quick version, in `npm test`.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { TestDatabase } from '@org/testing';
import { scenario } from '../src/scenarios/3-terminate.js';
import { chaosDatabase, context, expectHeld } from './support.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await chaosDatabase();
});
afterAll(async () => {
  await db?.drop();
});

it("pg_terminate_backend on the workers' connections: 0 lost, 0 stuck, LISTEN back", async () => {
  const result = await scenario.run(context(db));
  expect(result.skipped).toBeUndefined();
  expectHeld(result);
});
