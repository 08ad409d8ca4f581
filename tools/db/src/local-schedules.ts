// Local mode's schedules: the migration installs the role-based system's schedules
// disabled (sql/menus/schedules.sql); `npm start` without DATABASE_URL and `npm run demo`
// enable them, as the api role, through schedules.enable_schedule. This is how the
// database learns it runs in local mode: nothing else differs.
import pg from 'pg';

export const LOCAL_SCHEDULES = ['menus.store_discovery', 'menus.resync', 'menus.analytics_refresh'] as const;

/** Enables the local schedules; returns their names. Throws when one is refused. */
export async function enableLocalSchedules(apiUrl: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: apiUrl });
  await client.connect();
  try {
    for (const name of LOCAL_SCHEDULES) {
      const { rows } = await client.query<{ validation_failure_message: string | null }>(
        'select validation_failure_message from schedules.enable_schedule($1)',
        [name],
      );
      if (rows[0]?.validation_failure_message)
        throw new Error(`schedule ${name}: ${rows[0].validation_failure_message}`);
    }
  } finally {
    await client.end();
  }
  return [...LOCAL_SCHEDULES];
}
