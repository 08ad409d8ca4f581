// Scenario 12 of `npm run chaos`, quick version, in `npm test`: a failover to a synchronous
// standby behind HAProxy (installed by tools/ensure-haproxy.sh before the tests). The
// scenario starts, and kills, a primary of its own; the test database it is handed is not
// touched.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { TestDatabase } from '@org/testing';
import { scenario } from '../src/scenarios/12-failover.js';
import { chaosDatabase, context, expectHeld } from './support.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await chaosDatabase();
});
afterAll(async () => {
  await db?.drop();
});

it('a failover under load: every answered enqueue completes on the new primary, effects once, the same processes carry on', async () => {
  const result = await scenario.run(context(db));
  expect(result.skipped).toBeUndefined();
  expectHeld(result);
}, 300_000);
