// `npm run gm -- <graphile-migrate command>`: the graphile-migrate CLI against the
// development server, with DATABASE_URL, SHADOW_DATABASE_URL, ROOT_DATABASE_URL and the
// role placeholders set. Example: `npm run gm -- commit --message "add priority"`.
// After `commit` or `uncommit` it rewrites migrations/parts/ (the history cut into the
// core and the domains, tools/db/src/parts.ts), which follows the committed history.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { openDevServer, migrateEnv } from '../dev-server.js';
import { repoRoot } from '../paths.js';
import { writeParts } from '../parts.js';
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
    const command = process.argv[2];
    if (result.status === 0 && (command === 'commit' || command === 'uncommit')) {
      const changed = writeParts();
      if (changed.length > 0) process.stdout.write(`migrations/parts/: wrote ${changed.join(', ')}\n`);
    }
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
