// An npm registry on 127.0.0.1 that serves the packages installed in a node_modules
// folder (this repository's), so that `npm install` resolves and fetches dependencies
// exactly as it would from registry.npmjs.org, with no network. A package's document
// lists every version found in the folder (nested copies included); its tarball is made
// on request from the installed files, under `package/` as npm packs them. Names in
// `exclude` are not served (a request answers 404), so a dependency that the installed
// tarballs do not bring themselves fails the install.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

interface Installed {
  dir: string;
  manifest: Record<string, unknown> & { name: string; version: string };
}

/** Every package under `nodeModules`, nested node_modules included. */
function installedPackages(nodeModules: string): Map<string, Map<string, Installed>> {
  const found = new Map<string, Map<string, Installed>>();
  const visit = (folder: string) => {
    if (!existsSync(folder)) return;
    for (const entry of readdirSync(folder, { withFileTypes: true })) {
      if (entry.name.startsWith('.')) continue;
      const path = join(folder, entry.name);
      if (entry.name.startsWith('@')) {
        if (entry.isDirectory()) visit(path);
        continue;
      }
      if (!entry.isDirectory()) continue; // workspace links (symlinks) are not served
      const file = join(path, 'package.json');
      if (!existsSync(file)) continue;
      const manifest = JSON.parse(readFileSync(file, 'utf8')) as Installed['manifest'];
      if (typeof manifest.name === 'string' && typeof manifest.version === 'string') {
        const versions = found.get(manifest.name) ?? new Map<string, Installed>();
        if (!versions.has(manifest.version)) versions.set(manifest.version, { dir: path, manifest });
        found.set(manifest.name, versions);
      }
      visit(join(path, 'node_modules'));
    }
  };
  visit(nodeModules);
  return found;
}

const MANIFEST_FIELDS = [
  'name',
  'version',
  'dependencies',
  'optionalDependencies',
  'peerDependencies',
  'peerDependenciesMeta',
  'bin',
  'engines',
  'os',
  'cpu',
  'libc',
  'deprecated',
];

export interface LocalRegistry {
  url: string;
  /** Package names asked for that the registry does not serve, in order. */
  missing: string[];
  close(): Promise<void>;
}

export async function startLocalRegistry(
  nodeModules: string,
  exclude: (name: string) => boolean,
): Promise<LocalRegistry> {
  const packages = installedPackages(nodeModules);
  const missing: string[] = [];
  let base = '';

  const packument = (name: string, versions: Map<string, Installed>) => {
    const docs: Record<string, unknown> = {};
    for (const [version, { manifest }] of versions) {
      const doc: Record<string, unknown> = {};
      for (const field of MANIFEST_FIELDS) if (manifest[field] !== undefined) doc[field] = manifest[field];
      doc.dist = { tarball: `${base}/-/tarball/${encodeURIComponent(name)}/${encodeURIComponent(version)}.tgz` };
      docs[version] = doc;
    }
    const latest = [...versions.keys()].sort((a, b) => a.localeCompare(b, 'en', { numeric: true })).at(-1);
    return { name, 'dist-tags': { latest }, versions: docs };
  };

  const server: Server = createServer((req, res) => {
    const path = decodeURIComponent((req.url ?? '/').split('?')[0]);
    const tarball = /^\/-\/tarball\/(.+)\/([^/]+)\.tgz$/.exec(path);
    if (tarball) {
      const found = packages.get(tarball[1])?.get(tarball[2]);
      if (!found || exclude(tarball[1])) return void res.writeHead(404).end();
      // The installed files under package/, without the copy's own node_modules.
      const tar = spawn(
        'tar',
        ['-cz', '--exclude=./node_modules', '--transform=s,^\\.,package,', '-C', found.dir, '.'],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      tar.stdout.pipe(res);
      return;
    }
    const name = path.slice(1);
    const versions = packages.get(name);
    if (!versions || exclude(name)) {
      missing.push(name);
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(packument(name, versions)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: `${base}/`,
    missing,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
