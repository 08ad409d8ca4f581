// Build step: the compiled clients (dist/queries/*.queries.js) import PreparedQuery from
// ../pgtyped-runtime.js (src/pgtyped-runtime.ts) instead of @pgtyped/runtime, which
// would load the pgtyped SQL parser at run time. The generated .ts files are untouched.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = new URL('../dist/queries/', import.meta.url).pathname;
const from = /from ['"]@pgtyped\/runtime['"]/g;
let changed = 0;
for (const file of readdirSync(dir).filter((f) => f.endsWith('.queries.js'))) {
  const path = join(dir, file);
  const text = readFileSync(path, 'utf8');
  const next = text.replace(from, "from '../pgtyped-runtime.js'");
  if (next !== text) {
    writeFileSync(path, next);
    changed++;
  }
  if (/@pgtyped\/runtime/.test(next)) throw new Error(`${file} still imports @pgtyped/runtime`);
}
if (changed === 0 && readdirSync(dir).some((f) => f.endsWith('.queries.js') && !readFileSync(join(dir, f), 'utf8').includes('../pgtyped-runtime.js'))) {
  throw new Error('no compiled client uses the runtime shim');
}
