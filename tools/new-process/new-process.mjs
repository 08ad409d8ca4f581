#!/usr/bin/env node
// npm run new-process -- <schema> <name> <channel> [number]
// Writes a channel process on the shared skeleton (see template.mjs and
// docs/adding-a-business-process.md); refuses to overwrite an existing file.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { channelProcessFiles } from './template.mjs';

const [schema, name, channel, number] = process.argv.slice(2);
if (!schema || !name || !channel) {
  process.stderr.write(
    'usage: npm run new-process -- <schema> <name> <channel task type> [migration number, default 230]\n',
  );
  process.exit(2);
}
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
let files;
try {
  files = channelProcessFiles({ schema, name, channel, ...(number ? { number: Number(number) } : {}) });
} catch (error) {
  process.stderr.write(`new-process: ${error.message}\n`);
  process.exit(2);
}
for (const path of Object.keys(files)) {
  if (existsSync(join(root, path))) {
    process.stderr.write(`new-process: ${path} exists; not overwriting anything\n`);
    process.exit(2);
  }
}
for (const [path, content] of Object.entries(files)) {
  mkdirSync(dirname(join(root, path)), { recursive: true });
  writeFileSync(join(root, path), content);
  process.stdout.write(`wrote ${path}\n`);
}
process.stdout.write(
  'Next: fill in the DECIDE parts, add the grants to sql/database-user-grants.json, register a processor for the channel in the worker, and run npm run dev.\n',
);
