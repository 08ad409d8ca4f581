// `npm start`: the embedded PostgreSQL (unless DATABASE_URL), migrated, and its URLs.
import { openServer, provisionDatabase } from '../server.js';
import { redactUrl } from '../urls.js';

const DATABASE = process.env.DATABASE_NAME ?? 'queue';

async function main(): Promise<void> {
  const external = process.env.DATABASE_URL;
  const server = await openServer({
    name: 'postgres',
    adminUrl: external,
    port: process.env.EMBEDDED_PG_PORT ? Number(process.env.EMBEDDED_PG_PORT) : undefined,
  });
  const urls = await provisionDatabase(server, external ? new URL(external).pathname.slice(1) || DATABASE : DATABASE);
  const show = (url: string) => (server.kind === 'embedded' ? url : redactUrl(url));
  process.stdout.write(
    [
      `PostgreSQL (${server.kind}) is up and migrated: database ${urls.database}`,
      `  owner  DATABASE_URL=${show(urls.owner)}`,
      `  worker DATABASE_URL=${show(urls.worker)}`,
      `  app    DATABASE_URL=${show(urls.app)}`,
      server.kind === 'embedded' ? 'Press Ctrl-C to stop.' : '',
      '',
    ].join('\n'),
  );
  if (server.kind === 'external') return;
  const stop = async () => {
    await server.stop();
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

main().catch((error: unknown) => {
  process.stderr.write(`start failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
