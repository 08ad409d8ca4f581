// `npm run schema-dump`: a fresh database on the development server (embedded unless
// DATABASE_URL), migrated with the committed migrations and migrations/current/, dumped
// to migrations/schema.sql. With `--check`, compares instead and exits 1 with a diff when
// the committed file is stale.
import { writeSchemaDump } from '../schema-dump-file.js';
import { openServer, provisionDatabase } from '../server.js';

async function main(): Promise<number> {
  const check = process.argv.includes('--check');
  const server = await openServer({
    name: 'postgres',
    adminUrl: process.env.DATABASE_URL,
    port: process.env.EMBEDDED_PG_PORT ? Number(process.env.EMBEDDED_PG_PORT) : undefined,
  });
  try {
    const urls = await provisionDatabase(server, 'queue_schema_dump', { fresh: true, quiet: true });
    const result = await writeSchemaDump(urls.owner, server.roles, { check });
    process.stdout.write(result.diff ? result.diff : `${result.path}: ${result.changed ? 'written' : 'up to date'}\n`);
    return check && result.diff ? 1 : 0;
  } finally {
    await server.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`schema-dump failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
