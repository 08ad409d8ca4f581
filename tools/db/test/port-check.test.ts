// portInUse: what `npm start` asks before it starts the web server.
import { createServer, type Server } from 'node:net';
import { afterAll, expect, it } from 'vitest';
import { portInUse } from '../src/port-check.js';

const servers: Server[] = [];
afterAll(() => Promise.all(servers.map((s) => new Promise((r) => s.close(r)))));

it('answers true for a port something listens on, false once it is free again', async () => {
  const server = createServer();
  servers.push(server);
  await new Promise<void>((resolve) => server.listen({ host: '127.0.0.1', port: 0 }, resolve));
  const { port } = server.address() as { port: number };
  expect(await portInUse('127.0.0.1', port)).toBe(true);
  await new Promise((r) => server.close(r));
  expect(await portInUse('127.0.0.1', port)).toBe(false);
});
