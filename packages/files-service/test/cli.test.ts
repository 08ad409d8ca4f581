import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { configFromEnv, FilesServiceConfigError } from '@org/files-service';
import { testServiceAccount } from './helpers.ts';

const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const account = testServiceAccount();

function problems(env: Record<string, string>): string[] {
  try {
    configFromEnv(env);
  } catch (err) {
    if (err instanceof FilesServiceConfigError) return err.problems;
    throw err;
  }
  return [];
}

describe('files service config from env', () => {
  it('reads a full env', () => {
    const config = configFromEnv({
      FILES_SERVICE_TOKEN: 'x'.repeat(20),
      FILES_SERVICE_DATABASE_URL: 'postgres://worker@db/queue',
      FILES_BUCKETS: 'a-bucket, b-bucket',
      GCS_CREDENTIALS_JSON: JSON.stringify(account.credentials),
      GCS_API_ENDPOINT: 'http://127.0.0.1:4443',
      FILES_SERVICE_PORT: '9000',
    });
    expect(config).toMatchObject({
      buckets: ['a-bucket', 'b-bucket'],
      port: 9000,
      host: '127.0.0.1',
      urlTtlSeconds: 300,
    });
  });

  it('names every bad variable, once, without values', () => {
    const found = problems({
      FILES_SERVICE_TOKEN: 'short-secret',
      FILES_SERVICE_DATABASE_URL: 'mysql://nope',
      FILES_BUCKETS: 'Bad Bucket',
      GCS_CREDENTIALS_JSON: JSON.stringify({ ...account.credentials, client_email: 'nope' }),
      GCS_API_ENDPOINT: 'nope',
      FILES_SERVICE_PORT: 'eighty',
    });
    expect(found).toEqual([
      'FILES_SERVICE_TOKEN: must be at least 16 characters',
      'FILES_SERVICE_DATABASE_URL: must be a postgres:// or postgresql:// URL',
      'FILES_BUCKETS: must be bucket names (lower-case letters, digits, ".", "_", "-"), got "Bad Bucket"',
      'GCS_CREDENTIALS_JSON: client_email: client_email must be an email address',
      'GCS_API_ENDPOINT: must be an http(s) URL, got "nope"',
      'FILES_SERVICE_PORT: must be a whole number between 0 and 65535, got "eighty"',
    ]);
    expect(found.join('\n')).not.toContain('short-secret');
  });

  it('refuses to run without credentials', () => {
    expect(
      problems({
        FILES_SERVICE_TOKEN: 'x'.repeat(20),
        FILES_SERVICE_DATABASE_URL: 'postgres://w@db/q',
        FILES_BUCKETS: 'a-bucket',
      }),
    ).toEqual([
      expect.stringMatching(
        /no GCS service-account credentials configured; set GCS_CREDENTIALS_JSON .* or GOOGLE_APPLICATION_CREDENTIALS/,
      ),
    ]);
    expect(
      problems({
        FILES_SERVICE_TOKEN: 'x'.repeat(20),
        FILES_SERVICE_DATABASE_URL: 'postgres://w@db/q',
        FILES_BUCKETS: 'a-bucket',
        GOOGLE_APPLICATION_CREDENTIALS: '/nonexistent/key.json',
      }),
    ).toEqual(['GOOGLE_APPLICATION_CREDENTIALS: cannot read a JSON key (ENOENT), got "/nonexistent/key.json"']);
    expect(
      problems({
        FILES_SERVICE_TOKEN: 'x'.repeat(20),
        FILES_SERVICE_DATABASE_URL: 'postgres://w@db/q',
        FILES_BUCKETS: 'a-bucket',
        GCS_CREDENTIALS_JSON: '{',
      }),
    ).toEqual(['GCS_CREDENTIALS_JSON: is not valid JSON']);
  });

  it('the CLI exits 2 with one line per bad value', () => {
    const res = spawnSync(process.execPath, [cli], {
      env: { PATH: process.env.PATH ?? '', FILES_SERVICE_PORT: 'x' },
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(res.status).toBe(2);
    const lines = res.stderr.trim().split('\n');
    expect(lines).toEqual([
      'files-service: invalid configuration:',
      '  FILES_SERVICE_TOKEN: is required (the bearer token callers send, at least 16 characters)',
      "  FILES_SERVICE_DATABASE_URL: is required (the database it asks before signing: the worker role's postgres:// URL)",
      '  FILES_BUCKETS: is required (the buckets URLs may be signed for, comma separated)',
      '  FILES_SERVICE_PORT: must be a whole number between 0 and 65535, got "x"',
      expect.stringMatching(/^ {2}no GCS service-account credentials configured/),
      'Run files-service --help for the list of settings.',
    ]);
  });

  it('--help prints every variable from the same table and exits 0', () => {
    const res = spawnSync(process.execPath, [cli, '--help'], {
      env: { PATH: process.env.PATH ?? '' },
      encoding: 'utf8',
    });
    expect(res.status).toBe(0);
    for (const name of [
      'FILES_SERVICE_TOKEN',
      'FILES_BUCKETS',
      'GCS_CREDENTIALS_JSON',
      'GOOGLE_APPLICATION_CREDENTIALS',
      'GCS_API_ENDPOINT',
      'FILES_SIGNED_URL_TTL_SECONDS',
      'FILES_SERVICE_PORT',
      'FILES_SERVICE_HOST',
      'LOG_LEVEL',
      'LOG_FORMAT',
    ]) {
      expect(res.stdout).toContain(name);
    }
    expect(res.stdout).toMatch(/FILES_SERVICE_PORT\s+8787\s+port to listen on/);
  });
});
