// `npm run parts`: writes migrations/parts/ from migrations/committed/ (the history cut into
// the core and the business domains, tools/db/src/parts.ts). With `--check`, writes nothing
// and exits 1 naming the files that differ.
import { writeParts } from '../parts.js';

try {
  const check = process.argv.includes('--check');
  const differ = writeParts({ check });
  if (differ.length === 0) process.stdout.write('migrations/parts/: up to date\n');
  else process.stdout.write(`migrations/parts/: ${check ? 'stale' : 'wrote'} ${differ.join(', ')}\n`);
  process.exitCode = check && differ.length > 0 ? 1 : 0;
} catch (error) {
  process.stderr.write(`parts failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
}
