/**
 * A TCP proxy in front of a primary and its standby that routes to whichever node is the
 * primary: HAProxy (the distribution's package), health-checking each node through a small
 * HTTP endpoint of ours that answers 200 when the node takes writes (`not
 * pg_is_in_recovery()`) and 503 otherwise (in recovery, or not answering). A node marked
 * down has its proxied sessions cut (`on-marked-down shutdown-sessions`), so clients
 * reconnect to the node that is up.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from '@org/db-tools';
import { sleep } from './harness.js';

/** The path of `haproxy`; installs the Debian package when missing and we are root, else throws how to. */
export function ensureHaproxy(log: (line: string) => void): string {
  const which = () => spawnSync('which', ['haproxy'], { encoding: 'utf8' }).stdout.trim();
  let path = which();
  if (path) return path;
  if (process.getuid?.() !== 0)
    throw new Error(
      'HAProxy is not installed, and this scenario needs it: install it with `sudo apt-get install -y haproxy` (Debian, Ubuntu), or run the scenario as root, which installs it',
    );
  log('  installing HAProxy: apt-get install -y haproxy');
  const res = spawnSync('apt-get', ['install', '-y', '--no-install-recommends', 'haproxy'], {
    encoding: 'utf8',
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
  path = which();
  if (res.status !== 0 || !path)
    throw new Error(
      `apt-get install -y haproxy failed (exit ${res.status}): ${(res.stderr || res.stdout).slice(-2000)}`,
    );
  return path;
}

export interface HealthEndpoint {
  port: number;
  close(): Promise<void>;
}

/** GET / → 200 when `rootUrl`'s server takes writes, 503 otherwise (in recovery, down, or slower than 800 ms). */
export async function startHealthEndpoint(rootUrl: string): Promise<HealthEndpoint> {
  const server: Server = createServer((req, res) => {
    void (async () => {
      let up: boolean;
      const client = new pg.Client({
        connectionString: rootUrl,
        connectionTimeoutMillis: 800,
        query_timeout: 800,
        application_name: 'chaos-health',
      });
      client.on('error', () => {});
      try {
        await client.connect();
        up = (await client.query<{ w: boolean }>('select not pg_is_in_recovery() as w')).rows[0]!.w;
      } catch {
        up = false;
      } finally {
        void client.end().catch(() => {});
      }
      res.writeHead(up ? 200 : 503, { 'content-type': 'text/plain', connection: 'close' });
      res.end(up ? 'primary\n' : 'not primary\n');
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

export interface ProxyNode {
  name: string;
  /** The node's PostgreSQL port on 127.0.0.1. */
  port: number;
  /** The node's superuser URL, for its health endpoint. */
  rootUrl: string;
}

export interface Proxy {
  /** The frontend's port on 127.0.0.1. */
  port: number;
  /** `url` with the proxy's host and port. */
  urlOf(url: string): string;
  /** Server name → HAProxy's status (UP, DOWN, ...), from the stats page's CSV. */
  status(): Promise<Record<string, string>>;
  /** Resolves once HAProxy sees `name` UP and every other node DOWN. */
  waitRoutesTo(name: string, timeoutMs?: number): Promise<void>;
  /** HAProxy's output so far. */
  output(): string;
  stop(): Promise<void>;
}

/** Starts HAProxy with a config in a temporary folder, and a health endpoint per node. */
export async function startProxy(haproxy: string, nodes: ProxyNode[]): Promise<Proxy> {
  const health = await Promise.all(nodes.map((n) => startHealthEndpoint(n.rootUrl)));
  const port = await freePort();
  const statsPort = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'chaos-haproxy-'));
  const cfg = join(dir, 'haproxy.cfg');
  writeFileSync(
    cfg,
    [
      'global',
      '  maxconn 2000',
      'defaults',
      '  mode tcp',
      '  timeout connect 1s',
      // Idle pool connections and LISTEN sessions stay open for the whole run.
      '  timeout client 1h',
      '  timeout server 1h',
      '  timeout check 2s',
      // A connection refused by a node that is still counted UP (the primary just killed)
      // is retried on another node that is UP, not on the same one until the retries run
      // out (3, a second apart): without this, clients that connected in that second
      // waited 3 s for the proxy to close their connection.
      '  retries 3',
      '  option redispatch 1',
      'frontend postgres',
      `  bind 127.0.0.1:${port}`,
      '  default_backend nodes',
      'backend nodes',
      '  option httpchk GET /',
      '  http-check expect status 200',
      '  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions',
      ...nodes.map((n, i) => `  server ${n.name} 127.0.0.1:${n.port} check port ${health[i]!.port}`),
      'listen stats',
      '  mode http',
      `  bind 127.0.0.1:${statsPort}`,
      '  stats enable',
      '  stats uri /stats',
      '',
    ].join('\n'),
  );
  let output = '';
  const child: ChildProcess = spawn(haproxy, ['-db', '-f', cfg], { stdio: ['ignore', 'pipe', 'pipe'] });
  const append = (d: Buffer) => {
    output += d.toString();
    if (output.length > 65_536) output = output.slice(-65_536);
  };
  child.stdout!.on('data', append);
  child.stderr!.on('data', append);
  let exited = false;
  const exit = new Promise<void>((resolve) => child.on('exit', () => ((exited = true), resolve())));

  const status = async () => {
    const res = await fetch(`http://127.0.0.1:${statsPort}/stats;csv`);
    const lines = (await res.text()).trim().split('\n');
    const header = lines[0]!.replace(/^# /, '').split(',');
    const [px, sv, st] = ['pxname', 'svname', 'status'].map((c) => header.indexOf(c));
    const out: Record<string, string> = {};
    for (const line of lines.slice(1)) {
      const f = line.split(',');
      if (f[px!] === 'nodes' && f[sv!] !== 'BACKEND') out[f[sv!]!] = f[st!]!;
    }
    return out;
  };
  const proxy: Proxy = {
    port,
    urlOf(url) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    status,
    async waitRoutesTo(name, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        if (exited) throw new Error(`haproxy exited: ${output}`);
        try {
          const s = await status();
          if (Object.entries(s).every(([n, v]) => (n === name ? v === 'UP' : v.startsWith('DOWN')))) return;
          if (Date.now() > deadline) throw new Error(`the proxy does not route to ${name} alone: ${JSON.stringify(s)}`);
        } catch (error) {
          if (Date.now() > deadline) throw error;
        }
        await sleep(20);
      }
    },
    output: () => output,
    async stop() {
      if (!exited) child.kill('SIGTERM');
      await Promise.race([exit, sleep(3000)]);
      if (!exited) child.kill('SIGKILL');
      await Promise.all(health.map((h) => h.close()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await proxy.waitRoutesTo(nodes[0]!.name);
  } catch (error) {
    await proxy.stop();
    throw error;
  }
  return proxy;
}
