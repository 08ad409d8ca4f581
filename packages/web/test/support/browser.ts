// Debian's headless Chromium for the dashboard's browser tests (playwright-core cannot
// download a browser here; `npm test` installs it, tools/ensure-chromium.sh), on a profile
// of its own. With `origin`, every request outside it (and outside data: URLs) is refused
// and recorded in `outside`: the dashboard loads nothing from elsewhere.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

export interface Browser {
  context: BrowserContext;
  page: Page;
  /** The URLs asked for outside `origin`, refused. */
  outside: string[];
  close(): Promise<void>;
}

export async function openBrowser(options: { name: string; origin?: string }): Promise<Browser> {
  expect(existsSync(CHROMIUM), `${CHROMIUM} is missing: install it with apt-get install -y chromium`).toBe(true);
  const userDataDir = mkdtempSync(join(tmpdir(), `queue-${options.name}-`));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      '--disable-quic',
    ],
  });
  const outside: string[] = [];
  const { origin } = options;
  if (origin)
    await context.route('**/*', (route) => {
      const url = route.request().url();
      if (url.startsWith(origin) || url.startsWith('data:')) return route.continue();
      outside.push(url);
      return route.abort();
    });
  const page = context.pages()[0] ?? (await context.newPage());
  return {
    context,
    page,
    outside,
    async close() {
      await context.close();
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}
