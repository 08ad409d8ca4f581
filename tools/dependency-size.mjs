#!/usr/bin/env node
// The production dependency tree of one workspace and its installed size:
//   node tools/dependency-size.mjs @org/worker
// Reads `npm ls -w <workspace> --omit=dev --all --json --long` (run `npm ci` first), and
// prints a Markdown table: each registry package the workspace pulls in directly or through
// its workspace dependencies, the packages under it and their size on disk, then the total.
// A package is counted once however many times it appears; a workspace package counts
// what it publishes (its `files`, e.g. dist/, and package.json).
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { join } from 'node:path';

const workspace = process.argv[2];
if (!workspace) {
  process.stderr.write('usage: node tools/dependency-size.mjs <workspace, e.g. @org/worker>\n');
  process.exit(2);
}
const tree = JSON.parse(
  execFileSync('npm', ['ls', '-w', workspace, '--omit=dev', '--all', '--json', '--long'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
    maxBuffer: 64 * 1024 * 1024,
  }),
);
const top = tree.dependencies[workspace];

/** Bytes of the files under `dir`, not following nested node_modules (counted as their own packages). */
function bytes(dir) {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules') continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) total += bytes(path);
    else if (entry.isFile()) total += statSync(path).size;
  }
  return total;
}

const isWorkspace = (node) => String(node.resolved ?? '').startsWith('file:');
function ownBytes(node) {
  const dir = realpathSync(node.path);
  if (!isWorkspace(node)) return bytes(dir);
  const published = [...(node.files ?? []), 'package.json'].map((f) => join(dir, f)).filter(existsSync);
  return published.reduce((sum, p) => sum + (statSync(p).isDirectory() ? bytes(p) : statSync(p).size), 0);
}

const counted = new Set();
/** Packages and bytes under `node` not counted yet (a shared package goes to the first that needs it). */
function subtree(node) {
  const key = realpathSync(node.path);
  if (counted.has(key)) return { packages: 0, bytes: 0 };
  counted.add(key);
  const sum = { packages: 1, bytes: ownBytes(node) };
  for (const child of Object.values(node.dependencies ?? {})) {
    if (!child.path || child.missing) continue;
    const s = subtree(child);
    sum.packages += s.packages;
    sum.bytes += s.bytes;
  }
  return sum;
}

const rows = [];
const own = { packages: 0, bytes: 0 };
/** Workspace packages are opened up: their registry dependencies get a row each. */
function walk(node, via) {
  const key = realpathSync(node.path);
  if (counted.has(key)) return;
  counted.add(key);
  own.packages += 1;
  own.bytes += ownBytes(node);
  for (const [name, child] of Object.entries(node.dependencies ?? {})) {
    if (!child.path || child.missing) continue;
    if (isWorkspace(child)) walk(child, name);
    else {
      const s = subtree(child);
      if (s.packages > 0) rows.push({ name: `${name}@${child.version}`, via, ...s });
    }
  }
}
walk(top, workspace);

const mb = (n) => `${(n / 1024 / 1024).toFixed(1)} MB`;
rows.sort((a, b) => b.bytes - a.bytes);
const total = rows.reduce((s, r) => ({ packages: s.packages + r.packages, bytes: s.bytes + r.bytes }), own);
const lines = [
  '| package | needed by | packages | installed size |',
  '|---|---|---:|---:|',
  ...rows.map((r) => `| \`${r.name}\` | ${r.via} | ${r.packages} | ${mb(r.bytes)} |`),
  `| workspace packages (dist/) | | ${own.packages} | ${mb(own.bytes)} |`,
  `| **total** | | **${total.packages}** | **${mb(total.bytes)}** |`,
];
process.stdout.write(`${lines.join('\n')}\n`);
