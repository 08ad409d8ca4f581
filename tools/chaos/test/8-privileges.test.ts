// Scenario 8 of `npm run chaos`, quick version, in `npm test`.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { TestDatabase } from '@org/testing';
import { scenario } from '../src/scenarios/8-privileges.js';
import { chaosDatabase, context, expectHeld } from './support.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await chaosDatabase();
});
afterAll(async () => {
  await db?.drop();
});

it('privilege sweep: allowlists, pinned search_path, temp shadowing refused', async () => {
  const result = await scenario.run(context(db));
  expect(result.skipped).toBeUndefined();
  expectHeld(result);
});
