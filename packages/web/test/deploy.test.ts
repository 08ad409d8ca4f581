// deploy/: the Dockerfile and the Kubernetes manifests parse, run commands that exist in
// the repository after a build, set only environment variables the programs read (and
// the ones they require), and reference Secrets and keys that the example defines.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { API_SETTINGS } from '../src/config.js';
import { SETTINGS as WORKER_SETTINGS } from '@org/worker/command';
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
  it('is multi-stage on node:20, installs with npm ci, builds, and runs the worker by default', () => {
    const froms = [...dockerfile.matchAll(/^FROM\s+(\S+)/gm)].map((m) => m[1]);
    expect(froms.length).toBeGreaterThanOrEqual(2);
    for (const image of froms) expect(image).toMatch(/^node:20(\b|-)/);
    expect(dockerfile).toMatch(/^RUN npm ci$/m);
    expect(dockerfile).toMatch(/^RUN npm run build$/m);
    expect(defaultCommand).toEqual(['node', 'packages/worker/dist/cli.js']);
    assertRunnable(defaultCommand);
    expect(dockerfile).toMatch(/^USER node$/m);
  });

  it('copies only paths that exist', () => {
    for (const m of dockerfile.matchAll(/^COPY\s+(?!--from)(.+)\s+\S+$/gm)) {
      for (const source of m[1].trim().split(/\s+/)) expect(existsSync(join(root, source)), source).toBe(true);
    }
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
});
