// The dashboard's files (public/): ES modules with no build step, each type-checked
// (`// @ts-check`, under the root tsconfig.json), each reached from a page's script by its
// imports (no dead file), and each served with a JavaScript content type at its path
// relative to the page, so the imports resolve under a path prefix too.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { createApi } from '../src/index.js';

const PUBLIC = fileURLToPath(new URL('../public/', import.meta.url));
const scripts = readdirSync(PUBLIC, { recursive: true, encoding: 'utf8' })
  .filter((f) => f.endsWith('.js'))
  .sort();
const source = (file: string) => readFileSync(join(PUBLIC, file), 'utf8');

it('every script starts with // @ts-check', () => {
  expect(scripts.length).toBeGreaterThan(10);
  for (const file of scripts) expect(source(file).split('\n')[0], file).toBe('// @ts-check');
});

it('every script is reached from index.html or api.html by its imports, all relative', () => {
  const reached = new Set<string>();
  const visit = (file: string) => {
    if (reached.has(file)) return;
    reached.add(file);
    for (const [, spec] of source(file).matchAll(/^import [^;]*? from '([^']+)';$/gms)) {
      expect(spec, `${file} imports ${spec}`).toMatch(/^\.\.?\//);
      visit(relative(PUBLIC, normalize(join(PUBLIC, dirname(file), spec))));
    }
  };
  for (const html of ['index.html', 'api.html'])
    for (const [, src] of readFileSync(join(PUBLIC, html), 'utf8').matchAll(/<script type="module" src="([^"]+)">/g))
      visit(src);
  expect([...reached].sort()).toEqual(scripts);
});

it('serves every script at its path with a JavaScript content type, without a credential', async () => {
  const app = createApi({
    databaseUrl: 'postgres://nobody@127.0.0.1:9/none',
    apiToken: 'x'.repeat(24),
    logLevel: 'silent',
  });
  try {
    for (const file of scripts) {
      const res = await app.inject({ method: 'GET', url: `/${file}` });
      expect(res.statusCode, file).toBe(200);
      expect(res.headers['content-type'], file).toBe('text/javascript; charset=utf-8');
      expect(res.body).toBe(source(file));
    }
  } finally {
    await app.close();
  }
});
