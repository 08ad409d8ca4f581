// `npm run codegen`: a fresh database on the development server (embedded unless
// DATABASE_URL), migrated with committed migrations and migrations/current/, then pgtyped
// for every client package and the schema dump (migrations/schema.sql). Fails on any
// pgtyped error.
import { generateClients } from '../codegen.js';
import { writeSchemaDump } from '../schema-dump-file.js';
import { openServer, provisionDatabase } from '../server.js';

async function main(): Promise<void> {
  const server = await openServer({
    name: 'postgres',
    adminUrl: process.env.DATABASE_URL,
    port: process.env.EMBEDDED_PG_PORT ? Number(process.env.EMBEDDED_PG_PORT) : undefined,
  });
  try {
    const urls = await provisionDatabase(server, 'queue_codegen', { fresh: true, quiet: true });
    await generateClients(urls.owner, (line) => process.stdout.write(`${line}\n`));
    const dump = await writeSchemaDump(urls.owner, server.dbUsers);
    process.stdout.write(`${dump.path}: ${dump.changed ? 'written' : 'up to date'}\n`);
  } finally {
    await server.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`codegen failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
