// An embedded PostgreSQL for the probes that read pg_stat_statements: the library is
// preloaded (track = all, so the statements inside the queue's functions are listed),
// which takes a restart of the server after the first start.
import { openServer, withRootClient } from '@org/db-tools';

/** Opens the server `name` with pg_stat_statements loaded; `options` as openServer's. */
export async function openStatementsServer(name, options = {}) {
  const first = await openServer({ ...options, name });
  await withRootClient(first, async (root) => {
    await root.query(`alter system set shared_preload_libraries = 'pg_stat_statements'`);
    await root.query(`alter system set pg_stat_statements.track = 'all'`);
  });
  await first.stop();
  return openServer({ ...options, name });
}
