// `npm run gm -- <graphile-migrate command>`: the graphile-migrate CLI against the
// development server, with DATABASE_URL, SHADOW_DATABASE_URL, ROOT_DATABASE_URL and the
// role placeholders set. Example: `npm run gm -- commit --message "add priority"`.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { openDevServer, migrateEnv } from '../dev-server.js';
import { repoRoot } from '../paths.js';
import { databaseUrls } from '../server.js';

async function main(): Promise<number> {
  const { server, urls } = await openDevServer({ quiet: true });
  try {
    const shadow = databaseUrls(server, `${urls.database}_shadow`);
    const bin = createRequire(import.meta.url).resolve('graphile-migrate/dist/cli.js');
    const result = spawnSync(process.execPath, [bin, ...process.argv.slice(2)], {
      cwd: repoRoot(),
      env: migrateEnv(server, urls, shadow),
      stdio: 'inherit',
    });
    return result.status ?? 1;
  } finally {
    await server.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`gm failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
