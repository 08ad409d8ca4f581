// Where a vitest run's time went, per test file, from its JSON report:
//   npx vitest run --reporter=json --reporter=dot --outputFile=/tmp/vitest-times.json
//   node tools/test-times.mjs /tmp/vitest-times.json [files to list, default 30]
// Prints the run's wall time, the sum of the files' own times (they overlap when files run
// in parallel), the slowest files with their share of that sum, and the sum per folder.
// On a shared machine compare shares, not seconds.
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

const [report, top = '30'] = process.argv.slice(2);
if (!report) {
  console.error('usage: node tools/test-times.mjs <vitest json report> [files to list]');
  process.exit(2);
}
const run = JSON.parse(readFileSync(report, 'utf8'));
const files = run.testResults
  .map((f) => ({
    name: relative(process.cwd(), f.name),
    ms: f.endTime - f.startTime,
    tests: f.assertionResults.length,
  }))
  .sort((a, b) => b.ms - a.ms);
const sum = files.reduce((total, f) => total + f.ms, 0);
const end = Math.max(...run.testResults.map((f) => f.endTime));
const s = (ms) => `${(ms / 1000).toFixed(1)} s`;
console.log(
  `${files.length} files, ${run.numTotalTests} tests (${run.numFailedTests} failed); ` +
    `wall ${s(end - run.startTime)}, sum of the files' times ${s(sum)}`,
);
const share = (ms) => `${((100 * ms) / sum).toFixed(1).padStart(5)}%`;
for (const f of files.slice(0, Number(top)))
  console.log(`${s(f.ms).padStart(9)} ${share(f.ms)} ${f.name} (${f.tests})`);
const folders = new Map();
for (const f of files) {
  const folder = f.name.split('/').slice(0, 2).join('/');
  folders.set(folder, (folders.get(folder) ?? 0) + f.ms);
}
console.log('per folder:');
for (const [folder, ms] of [...folders].sort((a, b) => b[1] - a[1]))
  console.log(`${s(ms).padStart(9)} ${share(ms)} ${folder}`);
