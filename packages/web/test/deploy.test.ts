// deploy/: the Dockerfile and the Kubernetes manifests parse, run commands that exist in
// the repository after a build, set only environment variables the programs read (and
// the ones they require), and reference Secrets and keys that the example defines.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { API_SETTINGS } from '../src/config.js';
import { SETTINGS as WORKER_SETTINGS, WORKER_CONFIG } from '@org/worker/command';
import { HEALTH_CHECK_TIMEOUT_MS } from '@org/worker';
import { PROVIDER_ENV_VARS } from '@org/providers';
import { MENU_PLATFORM_ENV_VARS } from '@org/menu-sync';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const deploy = join(root, 'deploy');

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name: string; key: string; optional?: boolean }; fieldRef?: { fieldPath: string } };
}
interface Container {
  name: string;
  image: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  ports?: { name?: string; containerPort: number }[];
}
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Doc = any;

const docs: Doc[] = readdirSync(join(deploy, 'k8s'))
  .filter((f) => f.endsWith('.yaml'))
  .flatMap((f) =>
    parseAllDocuments(readFileSync(join(deploy, 'k8s', f), 'utf8')).map((d) => {
      expect(d.errors, f).toEqual([]);
      return { ...d.toJS(), __file: f };
    }),
  );
const workloads = docs.filter((d) => d.kind === 'Deployment' || d.kind === 'Job');
const containers = (d: Doc): Container[] => d.spec.template.spec.containers;

const dockerfile = readFileSync(join(deploy, 'Dockerfile'), 'utf8');
const defaultCommand: string[] = JSON.parse(/^CMD\s+(\[.*\])\s*$/m.exec(dockerfile)![1]);

/** The Dockerfile's stages: each FROM (ARG defaults substituted) with the instructions under it. */
interface Stage {
  name: string;
  from: string;
  steps: { op: string; args: string }[];
}
function parseDockerfile(text: string): Stage[] {
  const args = new Map<string, string>();
  const stages: Stage[] = [];
  const lines = text
    .replace(/\\\n/g, ' ') // continuation lines
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  for (const line of lines) {
    const [, op, rest] = /^(\S+)\s*(.*)$/.exec(line)!;
    const expanded = rest.replace(/\$\{(\w+)\}|\$(\w+)/g, (m, a: string, b: string) => args.get(a ?? b) ?? m);
    if (op === 'ARG' && stages.length === 0) {
      const [name, value] = rest.split('=');
      if (value !== undefined) args.set(name, value);
    } else if (op === 'FROM') {
      const [, image, name] = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(expanded)!;
      stages.push({ name: name ?? String(stages.length), from: image, steps: [] });
    } else {
      stages.at(-1)!.steps.push({ op, args: expanded });
    }
  }
  return stages;
}
const stages = parseDockerfile(dockerfile);
const finalStage = stages.at(-1)!;
const stageNamed = (name: string) => stages.find((s) => s.name === name);
const DEV_INSTALL = /\bnpm (ci|install|i)\b(?![^&;]*--omit=dev)/;
const PROD_ONLY = /\bnpm (ci|install|prune)\b[^&;]*--omit=dev/;
/** A stage's node_modules holds production dependencies only: pruned after any full install, here or in its base. */
function productionOnly(stage: Stage): boolean {
  const runs = stage.steps.filter((s) => s.op === 'RUN').map((s) => s.args);
  const last = (re: RegExp) => runs.reduce((found, r, i) => (re.test(r) ? i : found), -1);
  const lastDev = last(DEV_INSTALL);
  const lastProd = last(PROD_ONLY);
  if (lastProd >= 0) return lastProd >= lastDev && !DEV_INSTALL.test(runs[lastProd].split(PROD_ONLY)[2] ?? '');
  if (lastDev >= 0) return false;
  const base = stageNamed(stage.from);
  return base ? productionOnly(base) : true; // a base image brings no dependencies of ours
}

/** The workspaces (by folder) a workspace needs at run time: its dependencies, transitively. */
const workspaceDirs = ['packages', 'tools'].flatMap((top) =>
  readdirSync(join(root, top))
    .filter((d) => existsSync(join(root, top, d, 'package.json')))
    .map((d) => `${top}/${d}`),
);
const workspaceByName = new Map(
  workspaceDirs.map((dir) => [JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8')).name as string, dir]),
);
function runtimeWorkspaces(dir: string, seen = new Set<string>()): Set<string> {
  if (seen.has(dir)) return seen;
  seen.add(dir);
  const pkg = JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8'));
  for (const dep of Object.keys(pkg.dependencies ?? {})) {
    const found = workspaceByName.get(dep);
    if (found) runtimeWorkspaces(found, seen);
  }
  return seen;
}

const dockerignore = readFileSync(join(root, '.dockerignore'), 'utf8')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'));
/** Whether .dockerignore leaves `path` (a path from the repository root) out of the build context. */
function ignored(path: string): boolean {
  let out = false;
  for (const line of dockerignore) {
    const negate = line.startsWith('!');
    const pattern = (negate ? line.slice(1) : line).replace(/\/$/, '');
    const source = pattern
      .split('/')
      .map((part) =>
        part === '**' ? '(?:.*/)?' : part.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*') + '/',
      )
      .join('')
      .replace(/\/$/, '');
    // A pattern matches the path itself or a folder above it.
    if (new RegExp(`^${source}(?:/.*)?$`).test(path)) out = !negate;
  }
  return out;
}

/** The programs, by command: the environment each reads and requires. */
const gmrc = readFileSync(join(root, '.gmrc'), 'utf8');
const migrateEnv = ['DATABASE_URL', ...[...gmrc.matchAll(/":(DATABASE_[A-Z]+)":\s*"!ENV"/g)].map((m) => m[1])];
const PROGRAMS: Record<string, { reads: string[]; requires: string[] }> = {
  'node packages/worker/dist/cli.js': {
    reads: [...WORKER_SETTINGS.map((s) => s.env), ...PROVIDER_ENV_VARS, ...MENU_PLATFORM_ENV_VARS],
    requires: ['DATABASE_URL'],
  },
  'node packages/web/dist/cli.js': { reads: API_SETTINGS.map((s) => s.env), requires: ['DATABASE_URL', 'API_TOKEN'] },
  'node tools/db/dist/cli/migrate.js': {
    reads: [...migrateEnv, 'DATABASE_OWNER', 'ROOT_DATABASE_URL'],
    requires: migrateEnv,
  },
};

/** A command's program exists: dist/x.js of a package is built from src/x.ts; a bin is installed. */
function assertRunnable(command: string[]): void {
  if (command[0] === 'node') {
    const m = /^(packages|tools)\/([^/]+)\/dist\/(.+)\.js$/.exec(command[1]);
    expect(m, `${command[1]} is a built file of a package`).not.toBeNull();
    expect(existsSync(join(root, m![1], m![2], 'src', `${m![3]}.ts`)), `${m![1]}/${m![2]}/src/${m![3]}.ts`).toBe(true);
    expect(existsSync(join(root, m![1], m![2], 'tsconfig.json'))).toBe(true);
  } else if (command[0] === 'npx') {
    const bin = command.find((c, i) => i > 0 && !c.startsWith('-'))!;
    const pkg = JSON.parse(readFileSync(join(root, 'node_modules', bin, 'package.json'), 'utf8'));
    expect(Object.keys(pkg.bin ?? {}), `${bin} provides a bin`).toContain(bin);
    const declared = ['tools/db', ...readdirSync(join(root, 'packages')).map((p) => `packages/${p}`)].some((dir) => {
      const p = JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8'));
      return Boolean(p.dependencies?.[bin] ?? p.devDependencies?.[bin]);
    });
    expect(declared, `${bin} is a declared dependency of a workspace package`).toBe(true);
  } else {
    throw new Error(`unexpected command ${command.join(' ')}`);
  }
}

describe('Dockerfile', () => {
  it('is based on a pinned, supported Node LTS that the engines field allows', () => {
    const external = stages.map((st) => st.from).filter((from) => !stageNamed(from));
    expect(external.length).toBeGreaterThanOrEqual(1);
    const engines = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).engines.node as string;
    const lowest = Number(/^>=\s*(\d+)/.exec(engines)![1]);
    for (const image of external) {
      // node:<major>.<minor>.<patch>-<debian>-slim: an exact release, an LTS (even) major >= 22.
      const m = /^node:(\d+)\.(\d+)\.(\d+)-(bookworm|trixie)-slim$/.exec(image);
      expect(m, `${image} is node:<x.y.z>-<debian>-slim`).not.toBeNull();
      const major = Number(m![1]);
      expect(major, image).toBeGreaterThanOrEqual(22);
      expect(major % 2, `${image} is an LTS line`).toBe(0);
      expect(major, `engines.node ${engines} allows ${image}`).toBeGreaterThanOrEqual(lowest);
    }
  });

  it('builds with the lockfile and every dependency, and runs with production dependencies only', () => {
    const runs = (st: Stage) => st.steps.filter((x) => x.op === 'RUN').map((x) => x.args);
    expect(stages.some((st) => runs(st).some((r) => /^npm ci\b/.test(r) && !PROD_ONLY.test(r)))).toBe(true);
    expect(stages.some((st) => runs(st).some((r) => /turbo run build|npm run build/.test(r)))).toBe(true);
    // The final stage installs nothing itself, and copies only from production-only stages.
    expect(runs(finalStage).filter((r) => DEV_INSTALL.test(r))).toEqual([]);
    const copiedFrom = finalStage.steps
      .filter((x) => x.op === 'COPY' && x.args.startsWith('--from='))
      .map((x) => /^--from=(\S+)/.exec(x.args)![1]);
    expect(copiedFrom.length).toBeGreaterThan(0);
    for (const from of copiedFrom) {
      expect(stageNamed(from), `stage ${from}`).toBeDefined();
      expect(productionOnly(stageNamed(from)!), `stage ${from} holds production dependencies only`).toBe(true);
    }
    expect(productionOnly(stageNamed('build')!), 'the build stage has dev dependencies (the check can fail)').toBe(
      false,
    );
    // Workspaces the prune step removes are none of those the image's programs need.
    const removed = runs(stageNamed(copiedFrom[0])!)
      .filter((r) => /\brm -rf\b/.test(r))
      .flatMap((r) => [...r.matchAll(/\b((?:packages|tools)\/[\w-]+)(?=\s|$)/g)].map((m) => m[1]))
      .filter((dir) => workspaceDirs.includes(dir));
    expect(removed.length).toBeGreaterThan(0);
    const needed = new Set(
      ['packages/worker', 'packages/web', 'packages/cli', 'tools/db'].flatMap((d) => [...runtimeWorkspaces(d)]),
    );
    for (const dir of removed) expect(needed.has(dir), `${dir} is removed but needed at run time`).toBe(false);
  });

  it('runs as an unprivileged user, with a health check, the worker by default', () => {
    const users = finalStage.steps.filter((x) => x.op === 'USER').map((x) => x.args);
    expect(users.length).toBeGreaterThan(0);
    expect(['root', '0', '0:0']).not.toContain(users.at(-1));
    expect(users.at(-1)).toBe('node');
    expect(finalStage.steps.some((x) => x.op === 'HEALTHCHECK' && /\/healthz/.test(x.args))).toBe(true);
    expect(defaultCommand).toEqual(['node', 'packages/worker/dist/cli.js']);
    assertRunnable(defaultCommand);
  });

  it('copies only paths that exist and that .dockerignore lets into the build context', () => {
    for (const m of dockerfile.matchAll(/^COPY\s+(?!--from)(.+)\s+\S+$/gm)) {
      for (const source of m[1].trim().split(/\s+/)) {
        expect(existsSync(join(root, source)), source).toBe(true);
        expect(ignored(source), `${source} is in the build context`).toBe(false);
      }
    }
  });

  it('.dockerignore keeps installed modules, local data, git and tests out of the build context', () => {
    for (const path of [
      'node_modules',
      'packages/worker/node_modules',
      '.data',
      '.data/postgres',
      '.git',
      'packages/worker/dist',
      'packages/worker/test/health.test.ts',
    ])
      expect(ignored(path), path).toBe(true);
    for (const path of ['package.json', 'package-lock.json', 'packages/worker/src/cli.ts', 'migrations', 'sql/queues'])
      expect(ignored(path), path).toBe(false);
  });
});

describe('Kubernetes manifests', () => {
  it('one worker Deployment per role, with replicas, claiming that role', () => {
    // Task types are registered by the migrations (the baseline's inserts, and later ones).
    const schema = ['committed', 'current']
      .map((folder) => join(root, 'migrations', folder))
      .flatMap((dir) => readdirSync(dir).map((f) => join(dir, f)))
      .filter((file) => file.endsWith('.sql'))
      .map((file) => readFileSync(file, 'utf8'))
      .join('\n');
    const byRole = new Map<string, Doc>();
    for (const d of workloads.filter((w) => w.metadata.labels?.['app.kubernetes.io/component'] === 'worker')) {
      const role = containers(d)[0].env!.find((e) => e.name === 'WORKER_ROLE')!.value!;
      byRole.set(role, d);
      expect(d.spec.replicas).toBeGreaterThanOrEqual(1);
      expect(schema, `${role} is a registered task type`).toContain(`('${role}',`);
    }
    expect([...byRole.keys()].sort()).toEqual([
      'analytics_refresh',
      'db_function',
      'email',
      'entry_point_discovery',
      'file_delete',
      'product_discovery',
      'product_resync',
      'sms',
      'store_discovery',
    ]);
  });

  it('the menu roles call the menu platform from a Secret (never local mode); no other worker sets it', () => {
    const menuRoles = [
      'store_discovery',
      'entry_point_discovery',
      'product_discovery',
      'product_resync',
      'analytics_refresh',
    ];
    for (const d of workloads.filter((w) => w.metadata.labels?.['app.kubernetes.io/component'] === 'worker')) {
      const env = containers(d)[0].env!;
      const role = env.find((e) => e.name === 'WORKER_ROLE')!.value!;
      const url = env.find((e) => e.name === 'MENU_PLATFORM_URL');
      if (menuRoles.includes(role)) {
        expect(url?.valueFrom?.secretKeyRef, `${d.metadata.name} MENU_PLATFORM_URL`).toMatchObject({
          name: 'queue-menu-platform',
          key: 'url',
        });
        expect(
          url?.valueFrom?.secretKeyRef?.optional,
          `${d.metadata.name}: a missing URL must not start local mode`,
        ).toBeUndefined();
      } else {
        expect(url, `${d.metadata.name} does not call the menu platform`).toBeUndefined();
      }
    }
  });

  it('every workload runs a real command with only the environment it reads', () => {
    expect(workloads.length).toBeGreaterThanOrEqual(6);
    for (const w of workloads) {
      for (const c of containers(w)) {
        const command = c.command ?? defaultCommand;
        assertRunnable(command);
        const program = PROGRAMS[command.join(' ')];
        expect(program, `${w.metadata.name}: known program ${command.join(' ')}`).toBeDefined();
        const names = (c.env ?? []).map((e) => e.name);
        for (const name of names) expect(program.reads, `${w.metadata.name} sets ${name}`).toContain(name);
        for (const name of program.requires) expect(names, `${w.metadata.name} sets required ${name}`).toContain(name);
        expect(new Set(names).size, `${w.metadata.name} sets each variable once`).toBe(names.length);
      }
    }
  });

  it('the migration Job runs graphile-migrate as the owner; the API and workers use their own roles', () => {
    const job = docs.find((d) => d.kind === 'Job');
    expect(job.metadata.name).toBe('queue-migrate');
    const url = (w: Doc) => containers(w)[0].env!.find((e) => e.name === 'DATABASE_URL')!.valueFrom!.secretKeyRef!.key;
    expect(url(job)).toBe('owner-url');
    expect(url(workloads.find((w) => w.metadata.name === 'queue-web'))).toBe('api-url');
    for (const w of workloads.filter((x) => x.metadata.labels?.['app.kubernetes.io/component'] === 'worker'))
      expect(url(w)).toBe('worker-url');
  });

  it('secrets are referenced, never inlined, and the example defines every required key', () => {
    const secrets = new Map<string, string[]>(
      docs.filter((d) => d.kind === 'Secret').map((d) => [d.metadata.name, Object.keys(d.stringData ?? d.data ?? {})]),
    );
    for (const w of workloads) {
      for (const e of containers(w).flatMap((c) => c.env ?? [])) {
        if (/URL$|TOKEN|KEY|SID/.test(e.name) && !/BASE_URL$/.test(e.name)) {
          expect(e.value, `${w.metadata.name} ${e.name} comes from a Secret`).toBeUndefined();
        }
        const ref = e.valueFrom?.secretKeyRef;
        if (ref && !ref.optional) expect(secrets.get(ref.name), `${ref.name}.${ref.key}`).toContain(ref.key);
      }
    }
  });

  it('the API Service selects the API pods on their named port; probes hit real routes', () => {
    const api = workloads.find((w) => w.metadata.name === 'queue-web');
    const service = docs.find((d) => d.kind === 'Service' && d.metadata.name === 'queue-web');
    for (const [k, v] of Object.entries(service.spec.selector)) expect(api.spec.template.metadata.labels[k]).toBe(v);
    const container = containers(api)[0];
    const port = container.ports!.find((p) => p.name === service.spec.ports[0].targetPort)!;
    expect(String(port.containerPort)).toBe(container.env!.find((e) => e.name === 'API_PORT')!.value);
    const app = readFileSync(join(root, 'packages', 'web', 'src', 'app.ts'), 'utf8');
    for (const probe of [container as Doc].flatMap((c) => [c.readinessProbe, c.livenessProbe])) {
      expect(app).toContain(`app.get('${probe.httpGet.path}'`);
    }
  });

  it('every worker Deployment: a health port, probes on it, a grace period above SHUTDOWN_GRACE_MS, requests, a PodDisruptionBudget', () => {
    const defaults = WORKER_CONFIG.settings;
    const workers = workloads.filter((w) => w.metadata.labels?.['app.kubernetes.io/component'] === 'worker');
    expect(workers.length).toBeGreaterThanOrEqual(9);
    for (const w of workers) {
      const name = w.metadata.name as string;
      const pod = w.spec.template;
      const c = containers(w)[0] as Doc;
      const env = (n: string): string | undefined => c.env.find((e: EnvVar) => e.name === n)?.value;
      // The health port: METRICS_PORT set (the worker serves none by default), a named
      // container port equal to it, Prometheus told where to scrape.
      expect('default' in defaults.metricsPort, 'METRICS_PORT is off by default').toBe(false);
      const metricsPort = Number(env('METRICS_PORT'));
      expect(metricsPort, `${name} METRICS_PORT`).toBeGreaterThan(0);
      const port = c.ports?.find((p: { name?: string }) => p.name === 'metrics');
      expect(port?.containerPort, `${name} metrics port`).toBe(metricsPort);
      expect(pod.metadata.annotations?.['prometheus.io/port']).toBe(String(metricsPort));
      expect(pod.metadata.annotations?.['prometheus.io/path']).toBe('/metrics');
      // Probes on that port, with time for the readiness check's own database timeout.
      const target = (probe: Doc) => (probe.httpGet.port === 'metrics' ? metricsPort : Number(probe.httpGet.port));
      expect(c.readinessProbe?.httpGet?.path, `${name} readiness`).toBe('/readyz');
      expect(c.livenessProbe?.httpGet?.path, `${name} liveness`).toBe('/healthz');
      for (const probe of [c.readinessProbe, c.livenessProbe]) {
        expect(target(probe), `${name} probe port`).toBe(metricsPort);
        expect((probe.timeoutSeconds ?? 1) * 1000, `${name} probe timeout`).toBeGreaterThan(HEALTH_CHECK_TIMEOUT_MS);
      }
      // SIGKILL comes after the grace period: the worker's own grace (the manifest's or the
      // default), then releasing the leases left and closing its connections (up to 2 s),
      // with room to spare.
      const graceMs = Number(env('SHUTDOWN_GRACE_MS') ?? defaults.shutdownGraceMs.default);
      expect(
        pod.spec.terminationGracePeriodSeconds * 1000,
        `${name} terminationGracePeriodSeconds`,
      ).toBeGreaterThanOrEqual(graceMs + 5000);
      expect(c.resources?.requests?.cpu, `${name} cpu request`).toBeDefined();
      expect(c.resources?.requests?.memory, `${name} memory request`).toBeDefined();
      // One PodDisruptionBudget selects exactly this Deployment's pods, and lets a drain proceed.
      const budgets = docs.filter(
        (d) =>
          d.kind === 'PodDisruptionBudget' &&
          Object.entries(d.spec.selector.matchLabels).every(([k, v]) => pod.metadata.labels[k] === v),
      );
      expect(
        budgets.map((b) => b.metadata.name),
        `${name} PodDisruptionBudget`,
      ).toEqual([name]);
      const budget = budgets[0].spec;
      if (budget.maxUnavailable !== undefined) expect(budget.maxUnavailable).toBeGreaterThanOrEqual(1);
      else expect(budget.minAvailable).toBeLessThan(w.spec.replicas);
    }
  });

  it('the web server has probes with a timeout and a PodDisruptionBudget that lets a drain proceed', () => {
    const api = workloads.find((w) => w.metadata.name === 'queue-web');
    const c = containers(api)[0] as Doc;
    for (const probe of [c.readinessProbe, c.livenessProbe]) expect(probe.timeoutSeconds).toBeGreaterThanOrEqual(2);
    const budget = docs.find((d) => d.kind === 'PodDisruptionBudget' && d.metadata.name === 'queue-web');
    expect(budget.spec.selector.matchLabels).toEqual(api.spec.selector.matchLabels);
    expect(budget.spec.minAvailable).toBeLessThan(api.spec.replicas);
  });

  it('the image exposes the worker health port the manifests use', () => {
    const exposed = finalStage.steps.filter((x) => x.op === 'EXPOSE').flatMap((x) => x.args.split(/\s+/).map(Number));
    for (const w of workloads.filter((x) => x.metadata.labels?.['app.kubernetes.io/component'] === 'worker')) {
      const port = (containers(w)[0] as Doc).ports.find((p: { name?: string }) => p.name === 'metrics').containerPort;
      expect(exposed).toContain(port);
    }
  });
});
