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

/**
 * Prints the `limit` statements that took the most time since the last reset (those of
 * pg_stat_statements itself left out): calls, ms per call (to `digits` places) and the
 * statement's first `width` characters. `db`: a superuser's client or pool.
 */
export async function printStatements(db, { limit = 15, digits = 3, width = 90 } = {}) {
  const { rows } = await db.query(
    `select calls, round((total_exec_time / calls)::numeric, $2) as ms_per_call, round(max_exec_time::numeric, $2) as max_ms,
            round(stddev_exec_time::numeric, $2) as sd_ms,
            regexp_replace(left(query, $3), '\\s+', ' ', 'g') as query
       from pg_stat_statements where query not ilike '%pg_stat_statements%'
      order by total_exec_time desc limit $1`,
    [limit, digits, width],
  );
  console.table(rows);
}
