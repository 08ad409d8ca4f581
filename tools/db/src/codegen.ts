import { spawn } from 'node:child_process';
import { readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { repoRoot } from './paths.js';

/** Every package with a pgtyped.json: the typed clients generated from .sql files. */
export function clientPackages(): string[] {
  const packages = join(repoRoot(), 'packages');
  return readdirSync(packages)
    .map((name) => join(packages, name))
    .filter((dir) => existsSync(join(dir, 'pgtyped.json')));
}

/**
 * Runs pgtyped once in `cwd` with `config` against `databaseUrl`. pgtyped's CLI exits 0
 * even when a query fails to type, so the output is scanned and any error line fails.
 */
export async function runPgtyped(options: { cwd: string; config: string; databaseUrl: string }): Promise<string> {
  // The package maps every subpath to its CLI entry (lib/index.js).
  const bin = fileURLToPath(import.meta.resolve('@pgtyped/cli/cli'));
  const child = spawn(process.execPath, [bin, '-c', options.config], {
    cwd: options.cwd,
    env: { ...process.env, DATABASE_URL: options.databaseUrl, PGURI: options.databaseUrl },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  const errors = output.split('\n').filter((line) => /error/i.test(line));
  if (code !== 0 || errors.length > 0) {
    throw new Error(`pgtyped failed in ${options.cwd} (exit ${code}):\n${output}`);
  }
  return output;
}

/** Regenerates every client package's queries against `databaseUrl` (a migrated database). */
export async function generateClients(databaseUrl: string, log: (line: string) => void = () => {}): Promise<void> {
  for (const dir of clientPackages()) {
    const output = await runPgtyped({ cwd: dir, config: 'pgtyped.json', databaseUrl });
    for (const line of output.split('\n')) if (line.startsWith('Saved')) log(line);
  }
}
