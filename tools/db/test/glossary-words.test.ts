// One concept, one word: the words docs/glossary.md lists under "Words not used" appear
// nowhere in the repository's code, SQL and docs (committed migrations, which keep the
// words of their time, and the glossary itself excepted).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../', import.meta.url));

/** The words of the glossary's "Words not used" table. */
export function wordsNotUsed(glossary: string): string[] {
  const section = glossary.split(/^## Words not used$/m)[1];
  if (section === undefined) throw new Error('docs/glossary.md has no "## Words not used" section');
  return section
    .split('\n')
    .filter((line) => line.startsWith('|'))
    .map((line) => line.split('|')[1].trim())
    .filter((word) => word !== '' && word !== 'not used' && !/^-+$/.test(word));
}

/** Each use of a word in `text`, as `file:line: line`; a word matches as a word's start. */
export function usesOf(words: string[], file: string, text: string): string[] {
  const pattern = new RegExp(`\\b(${words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|')})`, 'i');
  return text
    .split('\n')
    .flatMap((line, i) => (pattern.test(line) ? [`${file}:${i + 1}: ${line.trim().slice(0, 120)}`] : []));
}

/**
 * The files the rule covers: tracked code, SQL and docs, not the migrations (nor the
 * copies of earlier committed migrations that tools/db's tests upgrade from).
 */
export function covered(file: string): boolean {
  return (
    /\.(ts|mts|mjs|js|sql|md)$/.test(file) &&
    !/(^|\/)(legacy-)?migrations\//.test(file) &&
    file !== 'docs/glossary.md' &&
    !file.endsWith('glossary-words.test.ts')
  );
}

function coveredFiles(): string[] {
  return execFileSync('git', ['ls-files'], { cwd: root, encoding: 'utf8' }).split('\n').filter(covered);
}

describe('the glossary', () => {
  const words = wordsNotUsed(readFileSync(join(root, 'docs/glossary.md'), 'utf8'));

  it('lists the words not used', () => {
    expect(words).toEqual(
      expect.arrayContaining([
        'hasten',
        'unstarted',
        'handler task',
        'handlerTask',
        'runtime role',
        'handler-types',
        'handlerTypes',
        'CompletionHandler',
        'traceStep',
        'role-allowlist',
      ]),
    );
  });

  it('finds a word not used, at the start of a word, in any case', () => {
    expect(usesOf(['hasten'], 'x.sql', 'select 1;\nselect queues.Hastened_task();\n')).toEqual([
      'x.sql:2: select queues.Hastened_task();',
    ]);
    expect(usesOf(['hasten'], 'x.sql', 'chasten nothing')).toEqual([]);
  });

  it('covers code, SQL and docs, not the migrations of earlier times', () => {
    expect(['packages/contracts/src/index.ts', 'sql/comms/email.sql', 'docs/worker.md'].every(covered)).toBe(true);
    expect(
      [
        'migrations/committed/000001-baseline.sql',
        'tools/db/test/fixtures/legacy-migrations/committed/000002-x.sql',
        'package-lock.json',
        'docs/glossary.md',
      ].some(covered),
    ).toBe(false);
  });

  it('no file uses a word the glossary does not use', () => {
    const uses = coveredFiles().flatMap((file) => usesOf(words, file, readFileSync(join(root, file), 'utf8')));
    expect(uses).toEqual([]);
  });
});
