// Build step: compiled pgtyped clients (*.queries.js) import PreparedQuery from the runtime
// shim (src/pgtyped-runtime.ts) instead of @pgtyped/runtime, which would load the pgtyped
// SQL parser (antlr, several MB of heap) at run time. The generated .ts files are untouched.
//
//   node scripts/use-runtime-shim.mjs                 this package: dist/queries -> ../pgtyped-runtime.js
//   node <path>/use-runtime-shim.mjs DIR SPECIFIER    another package's compiled clients in DIR
//                                                     -> SPECIFIER (@org/queue-client/pgtyped-runtime)
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

const [dirArg, specifier = '../pgtyped-runtime.js'] = process.argv.slice(2);
const dir = dirArg ? resolve(dirArg) : new URL('../dist/queries/', import.meta.url).pathname;
const from = /from ['"]@pgtyped\/runtime['"]/g;
const clients = readdirSync(dir).filter((f) => f.endsWith('.queries.js'));
if (clients.length === 0) throw new Error(`no compiled client (*.queries.js) in ${dir}`);
for (const file of clients) {
  const path = join(dir, file);
  const text = readFileSync(path, 'utf8');
  const next = text.replace(from, `from '${specifier}'`);
  if (next !== text) writeFileSync(path, next);
  if (/@pgtyped\/runtime/.test(next)) throw new Error(`${file} still imports @pgtyped/runtime`);
  if (!next.includes(`from '${specifier}'`)) throw new Error(`${file} does not use the runtime shim`);
}
