// One way to read settings: a flag wins over its variable, blanks are unset, defaults go
// through the schema, every bad value is one line (secrets never echoed), a command line
// exits 2 on bad settings and 0 after --help, and --help comes from the same table.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError, defineConfig, logSettings, postgresUrl, wholeNumber } from '@org/config';

const demo = () =>
  defineConfig({
    program: 'demo',
    summary: 'A program for the tests.',
    settings: {
      databaseUrl: {
        env: 'DATABASE_URL',
        flag: 'database-url',
        required: true,
        secret: true,
        help: 'the URL',
        schema: postgresUrl,
      },
      size: { env: 'SIZE', flag: 'size', default: '10', help: 'how many', schema: wholeNumber(1, 100) },
      name: {
        env: 'NAME',
        help: 'a name, from the environment only',
        schema: z.string().trim().min(2, 'must be at least 2 characters'),
      },
      lease: { env: 'LEASE', flag: 'lease', default: '60', help: 'seconds', schema: wholeNumber(1, 3600) },
      ...logSettings(true),
    },
    refine(config, report) {
      if (config.size !== undefined && config.lease !== undefined && config.size > config.lease) {
        report('size', `must be at most LEASE (${config.lease})`);
      }
    },
  });

function problems(fn: () => unknown): string[] {
  try {
    fn();
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  throw new Error('did not throw');
}

describe('defineConfig', () => {
  it('reads typed values; defaults go through the schema; a flag wins over its variable', () => {
    const config = demo().read({ DATABASE_URL: 'postgres://u:p@h/db', SIZE: '5' }, ['--size', '7']);
    expect(config).toEqual({
      databaseUrl: 'postgres://u:p@h/db',
      size: 7,
      name: undefined,
      lease: 60,
      logLevel: 'info',
      logFormat: 'auto',
    });
    expect(demo().read({ DATABASE_URL: 'postgres://h/db', SIZE: '5' })).toMatchObject({ size: 5 });
  });

  it('an empty or blank value counts as unset', () => {
    expect(demo().read({ DATABASE_URL: 'postgres://h/db', SIZE: '  ', NAME: '' })).toMatchObject({
      size: 10,
      name: undefined,
    });
    expect(problems(() => demo().read({ DATABASE_URL: ' ' }))).toEqual([
      'DATABASE_URL (--database-url): is required (the URL)',
    ]);
  });

  it('reports every bad value, one line each, with the value unless it is a secret', () => {
    const found = problems(() =>
      demo().read({
        DATABASE_URL: 'mysql://root:hunter2@h/db',
        SIZE: 'ten',
        NAME: 'x',
        LOG_LEVEL: 'loud',
        LOG_FORMAT: 'xml',
      }),
    );
    expect(found).toEqual([
      'DATABASE_URL (--database-url): must be a postgres:// or postgresql:// URL',
      'SIZE (--size): must be a whole number between 1 and 100, got "ten"',
      'NAME: must be at least 2 characters, got "x"',
      'LOG_LEVEL (--log-level): must be one of fatal, error, warn, info, debug, trace, silent, got "loud"',
      'LOG_FORMAT (--log-format): must be one of auto, json, pretty, got "xml"',
    ]);
    expect(found.join('\n')).not.toContain('hunter2');
  });

  it('checks across settings see only the values that parsed', () => {
    expect(problems(() => demo().read({ DATABASE_URL: 'postgres://h/db', SIZE: '90', LEASE: '30' }))).toEqual([
      'SIZE (--size): must be at most LEASE (30)',
    ]);
    // LEASE is bad: the cross check stays quiet instead of reporting a second, derived problem.
    expect(problems(() => demo().read({ DATABASE_URL: 'postgres://h/db', SIZE: '90', LEASE: '0' }))).toEqual([
      'LEASE (--lease): must be at least 1, got "0"',
    ]);
  });

  it('refuses unknown flags, and flags for settings that have none', () => {
    expect(problems(() => demo().read({ DATABASE_URL: 'postgres://h/db' }, ['--sise', '3']))).toEqual([
      expect.stringMatching(/^Unknown option '--sise'/),
    ]);
    expect(problems(() => demo().read({ DATABASE_URL: 'postgres://h/db' }, ['--name', 'abc']))).toEqual([
      expect.stringMatching(/^Unknown option '--name'/),
    ]);
  });

  it('--help is generated from the table: flag, variable, default, meaning', () => {
    const help = demo().help();
    expect(help).toMatch(/^Usage: demo \[flags\]\n\nA program for the tests\./);
    expect(help).toMatch(/--database-url\s+DATABASE_URL\s+\(required\)\s+the URL/);
    expect(help).toMatch(/--size\s+SIZE\s+10\s+how many/);
    expect(help).toMatch(/\n\s+NAME\s+\(unset\)\s+a name, from the environment only/);
    expect(help).toMatch(/--log-format\s+LOG_FORMAT\s+auto\s+json: /);
    expect(demo().read({}, ['--help'])).toBe('help');
  });

  it('command(): exit 2 with the problems on stderr, exit 0 with --help on stdout, else the config', () => {
    const out: string[] = [];
    const err: string[] = [];
    const streams = { stdout: { write: (t: string) => out.push(t) }, stderr: { write: (t: string) => err.push(t) } };
    expect(demo().command(['--size', '0'], {}, streams)).toBe(2);
    expect(err.join('')).toBe(
      [
        'demo: invalid configuration:',
        '  DATABASE_URL (--database-url): is required (the URL)',
        '  SIZE (--size): must be at least 1, got "0"',
        'Run demo --help for the list of settings.',
        '',
      ].join('\n'),
    );
    expect(out).toEqual([]);
    expect(demo().command(['-h'], {}, streams)).toBe(0);
    expect(out.join('')).toBe(demo().help());
    expect(demo().command([], { DATABASE_URL: 'postgres://h/db' }, streams)).toMatchObject({ size: 10 });
  });

  it('a computed default is computed at load time and shown by its text', () => {
    let n = 0;
    const c = defineConfig({
      program: 'p',
      summary: 's',
      settings: {
        id: { env: 'ID', default: () => `id-${++n}`, defaultText: 'host-pid', help: 'an id', schema: z.string() },
      },
    });
    expect(c.read({})).toEqual({ id: 'id-1' });
    expect(c.read({ ID: 'mine' })).toEqual({ id: 'mine' });
    expect(c.help()).toMatch(/ID\s+host-pid\s+an id/);
    expect(c.help()).toMatch(/^Usage: p \[--help\]/);
  });
});
