// migrations/current/ parted as the next committed migration will be, for the tests that
// install what the next release ships (tools/db/test/parts.test.ts). Not written anywhere.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { partMigration } from '@org/queue-schema/parts';
import { repoRoot } from './paths.js';

/**
 * migrations/current/ as the next committed migration will be, parted: its files in order,
 * each `--!include` replaced by the file it names (migrations/fixtures/ -> sql/). Not
 * written anywhere: for the tests that install what the next release ships.
 */
export function partedCurrent(root = repoRoot()): { name: string; text: string } | undefined {
  const folder = join(root, 'migrations', 'current');
  if (!existsSync(folder)) return undefined;
  const files = readdirSync(folder)
    .filter((f) => !f.startsWith('.') && f.endsWith('.sql'))
    .sort((a, b) => parseInt(a, 10) - parseInt(b, 10) || a.localeCompare(b));
  let body = '';
  for (const file of files) {
    const text = readFileSync(join(folder, file), 'utf8').replace(/^--!include (\S+)$/gm, (_line, path: string) => {
      const included = readFileSync(join(root, 'migrations', 'fixtures', path), 'utf8');
      return `--! Included ${path}\n${included}${included.endsWith('\n') ? '' : '\n'}--! EndIncluded ${path}`;
    });
    body += `--! split: ${file}\n${text}${text.endsWith('\n') ? '' : '\n'}`;
  }
  if (body.trim() === '') return undefined;
  const { text } = partMigration('999999-current.sql', body);
  return { name: '999999.sql', text };
}
