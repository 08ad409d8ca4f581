// `npm run migrate`: the deploy step. Runs the committed migrations (never
// migrations/current/) against DATABASE_URL, connected as the owner, with the other roles
// named by DATABASE_WORKER, DATABASE_APP and DATABASE_API. A database migrated with the
// history the baseline replaced is moved onto the baseline first (tools/db/src/legacy.ts).
import { migrateDatabase, migrateSettings } from '../migrate.js';
import { roleNamesFromEnv } from '../roles.js';
import { redactUrl } from '../urls.js';

async function main(): Promise<void> {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL must be the owner role\'s URL of the database to migrate');
  const missing = ['DATABASE_WORKER', 'DATABASE_APP', 'DATABASE_API'].filter((name) => !process.env[name]);
  if (missing.length > 0) throw new Error(`set ${missing.join(', ')} (the role names the migrations grant to)`);
  // The owner is the role we connect as, unless DATABASE_OWNER says otherwise.
  const owner = process.env.DATABASE_OWNER ?? decodeURIComponent(new URL(url).username);
  const roles = roleNamesFromEnv({ ...process.env, DATABASE_OWNER: owner });
  const settings = await migrateSettings({ ownerUrl: url, rootUrl: process.env.ROOT_DATABASE_URL, roles });
  await migrateDatabase(settings, { current: false, log: (line) => process.stdout.write(`${line}\n`) });
  process.stdout.write(`migrated ${redactUrl(url)}\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`migrate failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
