// `npm run migrate`: the deploy step. Runs the committed migrations (never
// migrations/current/) against DATABASE_URL, connected as the owner, with the other database users
// named by DATABASE_WORKER, DATABASE_APP and DATABASE_API. A database migrated with the
// history the baseline replaced is moved onto the baseline first (tools/db/src/legacy.ts).
import { registerAppTasks } from '../app-tasks.js';
import { migrateDatabase, migrateSettings } from '../migrate.js';
import { dbUserNamesFromEnv } from '../db-users.js';
import { redactUrl } from '../urls.js';

async function main(): Promise<void> {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error("DATABASE_URL must be the owner database user's URL of the database to migrate");
  const missing = ['DATABASE_WORKER', 'DATABASE_APP', 'DATABASE_API'].filter((name) => !process.env[name]);
  if (missing.length > 0)
    throw new Error(`set ${missing.join(', ')} (the database user names the migrations grant to)`);
  // The owner is the database user we connect as, unless DATABASE_OWNER says otherwise.
  const owner = process.env.DATABASE_OWNER ?? decodeURIComponent(new URL(url).username);
  const dbUsers = dbUserNamesFromEnv({ ...process.env, DATABASE_OWNER: owner });
  const settings = await migrateSettings({ ownerUrl: url, rootUrl: process.env.ROOT_DATABASE_URL, dbUsers });
  await migrateDatabase(settings, { current: false, log: (line) => process.stdout.write(`${line}\n`) });
  process.stdout.write(`migrated ${redactUrl(url)}\n`);
  // The app's task types (TASKS_DIR, default ./tasks when it exists), as the owner.
  for (const line of await registerAppTasks(url)) process.stdout.write(`${line}\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`migrate failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
