// `npm start`: the development PostgreSQL (embedded unless DATABASE_URL), migrated, with
// the URL of each role printed. The embedded server runs until SIGINT or SIGTERM.
import { openDevServer } from '../dev-server.js';
import { redactUrl } from '../urls.js';

async function main(): Promise<void> {
  const { server, urls } = await openDevServer({ quiet: true });
  const show = (url: string) => (server.kind === 'embedded' ? url : redactUrl(url));
  process.stdout.write(
    [
      `PostgreSQL (${server.kind}) is up and migrated: database ${urls.database}`,
      `  owner  ${show(urls.owner)}`,
      `  worker ${show(urls.worker)}`,
      `  app    ${show(urls.app)}`,
      server.kind === 'embedded' ? 'Ctrl-C stops it.' : '',
      '',
    ].join('\n'),
  );
  if (server.kind === 'external') return;
  const stop = async () => {
    await server.stop();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop());
  process.once('SIGTERM', () => void stop());
}

main().catch((error: unknown) => {
  process.stderr.write(`start failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
