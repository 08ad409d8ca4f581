// Runs the development PostgreSQL for `npm start`, in a process group of its own (the
// parent spawns it detached) so that a terminal's Ctrl-C reaches the worker, which then
// stops gracefully against a database that is still up. Reports the URLs over IPC and
// stops the server when told to, or when the parent goes away.
import pg from 'pg';
import { openDevServer } from '../dev-server.js';

async function main(): Promise<void> {
  if (!process.send) throw new Error('db-runner must be started with an IPC channel');
  const { server, urls } = await openDevServer({ quiet: true });
  // As a deploy does after migrating: make sure the schedules supervisor runs, so the
  // schedules the migrations install (history maintenance) fire.
  const owner = new pg.Client({ connectionString: urls.owner });
  await owner.connect();
  try {
    await owner.query('select schedules.ensure_schedule_supervisor()');
  } finally {
    await owner.end();
  }
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await server.stop();
    process.exit(0);
  };
  process.on('message', (message) => {
    if (message === 'stop') void stop();
  });
  process.once('disconnect', () => void stop());
  process.send({ type: 'ready', urls });
}

main().catch((error: unknown) => {
  process.send?.({ type: 'error', message: error instanceof Error ? error.message : String(error) });
  process.exit(1);
});
