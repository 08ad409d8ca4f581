// Scenario 11 of `npm run chaos`, quick version, in `npm test`: on a server of its own,
// since every crash resets all of the server's connections.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { openOwnServer, type OwnServer } from '../src/own-server.js';
import { scenario } from '../src/scenarios/11-backend-crash.js';
import { expectHeld } from './support.js';

let server: OwnServer;
beforeAll(async () => {
  server = await openOwnServer(`chaos-crash-test-${process.pid}`);
});
afterAll(async () => {
  await server?.close();
});

it('a poison step whose backend is killed with SIGKILL is abandoned after MAX_LEASES crashes; the rest completes once', async () => {
  const result = await scenario.run({ db: server.db, quick: true, log: () => {}, ownsServer: true });
  expect(result.skipped).toBeUndefined();
  expectHeld(result);
}, 300_000);
