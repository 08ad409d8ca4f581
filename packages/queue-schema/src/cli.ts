#!/usr/bin/env node
// queue-schema migrate [--domains a,b]: applies the queue's migrations to DATABASE_URL (the
// URL of the role that owns the queue's objects): the core, the domains named and those
// installed before, granting to the roles DATABASE_WORKER, DATABASE_APP and DATABASE_API
// name. Exit codes: 0 migrated (or already up to date), 1 the database refused or failed,
// 2 bad usage (an unknown domain, a role not named).
import { DOMAINS, migrateQueue, QueueSchemaError } from './index.js';

const USAGE = `usage: queue-schema migrate [--domains <domain>,...]

  migrate            applies the queue's migrations not yet applied: the core, and the
                     business domains installed before
  --domains a,b      also adds these domains (and the ones they depend on):
                     ${DOMAINS.join(', ')}

DATABASE_URL     postgres:// URL of the role that owns the queue's objects (CREATE on the
                 database; CREATE on schema public too for the domain public)
DATABASE_WORKER  the role the worker connects as
DATABASE_APP     the role the app enqueues as
DATABASE_API     the role the REST API and the queue command line connect as
`;

function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  if (command !== 'migrate') {
    process.stderr.write(USAGE);
    return 2;
  }
  const domains: string[] = [];
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!;
    const value = arg.startsWith('--domains=')
      ? arg.slice('--domains='.length)
      : arg === '--domains'
        ? rest[++i]
        : undefined;
    if (value === undefined || value === '') {
      process.stderr.write(
        arg === '--domains' || arg === '--domains='
          ? 'queue-schema: --domains needs a list, e.g. --domains comms,files\n'
          : USAGE,
      );
      return 2;
    }
    domains.push(
      ...value
        .split(',')
        .map((d) => d.trim())
        .filter((d) => d !== ''),
    );
  }
  const url = process.env.DATABASE_URL;
  if (!url) {
    process.stderr.write("queue-schema: DATABASE_URL must be the URL of the role that owns the queue's objects\n");
    return 2;
  }
  try {
    await migrateQueue({
      connectionString: url,
      roles: {
        worker: process.env.DATABASE_WORKER ?? '',
        app: process.env.DATABASE_APP ?? '',
        api: process.env.DATABASE_API ?? '',
      },
      domains,
      log: (line) => process.stdout.write(`${line}\n`),
    });
  } catch (error) {
    if (error instanceof QueueSchemaError) {
      process.stderr.write(`queue-schema: ${error.message}\n`);
      return 2;
    }
    process.stderr.write(`queue-schema: migrate failed: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  }
  process.stdout.write(`migrated ${redact(url)}\n`);
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
