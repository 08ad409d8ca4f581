// The package's SQL: the repository's committed migrations (migrations/committed/, every
// include already resolved), copied into ./migrations/committed at build time so that the
// packed package migrates a database without the repository.
import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const from = fileURLToPath(new URL('../../../migrations/committed/', import.meta.url));
const to = fileURLToPath(new URL('../migrations/committed/', import.meta.url));
rmSync(fileURLToPath(new URL('../migrations/', import.meta.url)), { recursive: true, force: true });
mkdirSync(to, { recursive: true });
const files = readdirSync(from).filter((name) => name.endsWith('.sql'));
if (files.length === 0) throw new Error(`no committed migrations in ${from}`);
for (const name of files) copyFileSync(from + name, to + name);
