import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { dataRoot } from '@org/db-tools';

/**
 * A throwaway app folder inside the checkout (under .data/, gitignored), so that its task
 * files resolve zod and @org/tasks from the checkout's node_modules as an app's would.
 */
export function appDir(): { dir: string; write(file: string, text: string): string; remove(): void } {
  mkdirSync(dataRoot(), { recursive: true });
  const dir = mkdtempSync(join(dataRoot(), 'app-'));
  return {
    dir,
    write(file, text) {
      const path = join(dir, file);
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, text);
      return path;
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
