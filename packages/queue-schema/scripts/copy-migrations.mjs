// The package's SQL: the repository's committed history cut into parts (migrations/parts/,
// written by `npm run parts`), copied into ./migrations/parts at build time so that the
// packed package migrates a database without the repository.
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const from = fileURLToPath(new URL('../../../migrations/parts/', import.meta.url));
const to = fileURLToPath(new URL('../migrations/parts/', import.meta.url));
rmSync(fileURLToPath(new URL('../migrations/', import.meta.url)), { recursive: true, force: true });
mkdirSync(to, { recursive: true });
if (!existsSync(`${from}parts.json`)) throw new Error(`no parts.json in ${from} (npm run parts writes it)`);
for (const name of readdirSync(from).filter((n) => n.endsWith('.sql') || n === 'parts.json'))
  copyFileSync(from + name, to + name);
