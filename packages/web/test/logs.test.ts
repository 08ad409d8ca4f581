// The worker, the API and the files service log one shape, with the same level names:
// started as programs with stdout a pipe, each writes JSON lines whose leading fields are
// level (a name), time (ISO 8601), service and pid; LOG_FORMAT=pretty makes them readable.
import { spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@org/testing';

let db: TestDatabase;
let outbox: string;
beforeAll(async () => {
  db = await createTestDatabase();
  outbox = mkdtempSync(join(tmpdir(), 'logs-test-'));
});
afterAll(async () => {
  await db?.drop();
  rmSync(outbox, { recursive: true, force: true });
});

/** A program's cli.js, found through the package's public entry point. */
const cliOf = (pkg: string) => fileURLToPath(new URL('./cli.js', import.meta.resolve(pkg)));

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const credentials = JSON.stringify({
  client_email: 'files-service@test-project.iam.gserviceaccount.com',
  private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  project_id: 'test-project',
});

const programs = () => ({
  'queue-worker': {
    cli: cliOf('@org/worker'),
    env: {
      DATABASE_URL: db.url('worker'),
      WORKER_ROLE: 'db_function',
      POLL_INTERVAL_MS: '100',
      LOCAL_OUTBOX_DIR: outbox,
      LOCAL_STORAGE_DIR: outbox,
    },
    ready: 'worker_started',
  },
  'queue-web': {
    cli: fileURLToPath(new URL('../dist/cli.js', import.meta.url)),
    env: { DATABASE_URL: db.url('api'), API_TOKEN: 'a-token-of-enough-length', API_PORT: '0' },
    ready: 'queue-web listening on',
  },
  'files-service': {
    cli: cliOf('@org/files-service'),
    env: {
      FILES_SERVICE_TOKEN: 'a-token-of-enough-length',
      FILES_SERVICE_DATABASE_URL: db.url('worker'),
      FILES_BUCKETS: 'a-bucket',
      GCS_CREDENTIALS_JSON: credentials,
      FILES_SERVICE_PORT: '0',
    },
    ready: 'files service ready',
  },
});

/** Runs a program until its output contains `ready`, stops it, and returns what it wrote to stdout. */
async function output(cli: string, env: Record<string, string>, ready: string): Promise<string> {
  const child = spawn(process.execPath, [cli], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes(ready)) resolve();
    });
    child.on('exit', (code) => reject(new Error(`exited ${code} before "${ready}": ${out}${err}`)));
  });
  const exited = new Promise<unknown>((resolve) => child.on('exit', (code, signal) => resolve(code ?? signal)));
  child.kill('SIGTERM');
  expect({ cli, exit: await exited }).toEqual({ cli, exit: 0 });
  return out;
}

describe('one log shape', () => {
  it('JSON lines with level names, ISO time, service and pid, from every program', async () => {
    const seen = new Map<string, Record<string, unknown>[]>();
    for (const [service, p] of Object.entries(programs())) {
      const lines = (await output(p.cli, p.env, p.ready)).trim().split('\n');
      const records = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
      seen.set(service, records);
      for (const r of records) {
        expect(Object.keys(r).slice(0, 4)).toEqual(['level', 'time', 'service', 'pid']);
        expect(['fatal', 'error', 'warn', 'info', 'debug', 'trace']).toContain(r.level);
        expect(r.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
        expect(r.service).toBe(service);
        expect(typeof r.pid).toBe('number');
        expect(typeof r.msg).toBe('string');
      }
    }
    // The lines each program writes when it is up, so the loop above saw real output.
    expect(seen.get('queue-worker')!.some((r) => r.event === 'worker_started')).toBe(true);
    expect(seen.get('queue-web')!.some((r) => r.event === 'listening')).toBe(true);
    expect(seen.get('files-service')!.some((r) => r.event === 'listening')).toBe(true);
  });

  it('LOG_FORMAT=pretty: the same records for people', async () => {
    for (const [service, p] of Object.entries(programs())) {
      const out = await output(p.cli, { ...p.env, LOG_FORMAT: 'pretty' }, p.ready);
      expect(out).toMatch(new RegExp(`^\\[\\d\\d:\\d\\d:\\d\\d\\.\\d{3}\\] INFO: \\[${service}\\] `, 'm'));
      expect(out).not.toMatch(/^\{"level"/m);
    }
  });
});
