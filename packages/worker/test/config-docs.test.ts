// The worker settings table in docs/worker.md is the settings table: the same variables, flags
// and defaults as WORKER_CONFIG (which --help prints), so neither drifts from the other.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { helpText, WORKER_CONFIG } from '@org/worker/command';

const readme = readFileSync(fileURLToPath(new URL('../../../docs/worker.md', import.meta.url)), 'utf8');

it('docs/worker.md lists every worker setting with its flag and default, and nothing else', () => {
  const section = readme.slice(readme.indexOf('| variable | flag | default | meaning |'));
  const rows = section
    .split('\n')
    .slice(2)
    .filter((line, i, all) => all.slice(0, i + 1).every((l) => l.startsWith('|')))
    .map((line) => line.split('|').map((cell) => cell.trim()));
  const documented = rows.map(([, env, flag, dflt]) => ({ env, flag, default: dflt }));
  const defined = WORKER_CONFIG.rows().map((r) => ({
    env: `\`${r.env}\``,
    flag: `\`--${r.flag}\``,
    default: r.default,
  }));
  expect(documented.length).toBeGreaterThan(10);
  expect(documented).toEqual(expect.arrayContaining(defined));
  expect(defined).toEqual(expect.arrayContaining(documented));
});

it('--help shows the same defaults', () => {
  const help = helpText();
  for (const s of Object.values(WORKER_CONFIG.settings)) {
    expect(help).toMatch(new RegExp(`--${s.flag}\\s+${s.env}\\s`));
  }
  expect(help).toMatch(/--concurrency\s+CONCURRENCY\s+10\s+tasks run at once/);
  expect(help).toMatch(/--worker-id\s+WORKER_ID\s+host-pid-random\s/);
});
