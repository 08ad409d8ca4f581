// `npm run dev`: the development database (embedded unless DATABASE_URL) with
// migrations/current/ re-applied, and the typed clients and migrations/schema.sql
// regenerated, on every save.
import { join } from 'node:path';
import { clientPackages } from '../codegen.js';
import { startDevLoop } from '../dev-loop.js';
import { openDevServer } from '../dev-server.js';
import { migrateSettings } from '../migrate.js';
import { repoRoot } from '../paths.js';
import { schemaDumpPath } from '../schema-dump-file.js';

async function main(): Promise<void> {
  const log = (line: string) => process.stdout.write(`[dev] ${line}\n`);
  const { server, urls } = await openDevServer({ quiet: true });
  const settings = await migrateSettings({ ownerUrl: urls.owner, rootUrl: server.rootUrl, roles: server.roles });
  const loop = startDevLoop({
    settings,
    databaseUrl: urls.owner,
    sqlFolders: [join(repoRoot(), 'sql')],
    clientPackages: clientPackages(),
    schemaDump: { roles: server.roles, path: schemaDumpPath() },
    log,
  });
  await loop.ready;
  log(`watching migrations/current/, sql/ and the clients' queries; database ${urls.owner}`);
  const stop = async () => {
    await loop.close();
    await server.stop();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop());
  process.once('SIGTERM', () => void stop());
}

main().catch((error: unknown) => {
  process.stderr.write(`dev failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
