import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The checkout's root: the nearest folder up from here whose package.json has workspaces. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg) && 'workspaces' in JSON.parse(readFileSync(pkg, 'utf8'))) return dir;
    const parent = resolve(dir, '..');
    if (parent === dir) throw new Error('cannot find the repository root (package.json with workspaces)');
    dir = parent;
  }
}

/** Where embedded servers keep their data: `.data/` in the checkout (gitignored). */
export function dataRoot(): string {
  return join(repoRoot(), '.data');
}
