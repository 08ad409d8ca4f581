/**
 * The menu platform from environment variables, in the style of @org/providers:
 *   MENU_PLATFORM_URL         the platform's base URL: the HTTP provider
 *   MENU_PLATFORM_TOKEN       optional bearer token
 *   MENU_PLATFORM_TIMEOUT_MS  per request (default 10000)
 * Without MENU_PLATFORM_URL: local mode, loudly logged. The worker starts the fake menu
 * platform (fake-platform.ts) in its own process on first use, with occasional failures
 * and slow answers (LOCAL_MENU_STORES stores, default 12).
 */
import { z } from 'zod';
import { startFakeMenuPlatform, type FakeMenuPlatform } from './fake-platform.js';
import { createHttpMenuPlatform } from './http-platform.js';
import type { MenuPlatform } from './platform.js';

export interface MenuPlatformLogger {
  warn(obj: unknown, msg?: string): void;
  info(obj: unknown, msg?: string): void;
}

export const MENU_PLATFORM_ENV_VARS = [
  'MENU_PLATFORM_URL',
  'MENU_PLATFORM_TOKEN',
  'MENU_PLATFORM_TIMEOUT_MS',
  'LOCAL_MENU_STORES',
] as const;

const opt = <T extends z.ZodType>(schema: T) =>
  z.preprocess((v) => (typeof v === 'string' && v.trim() === '' ? undefined : v), schema.optional());
const whole = (min: number, max: number) =>
  z
    .string()
    .regex(/^\d{1,9}$/, 'must be a whole number')
    .transform(Number)
    .pipe(z.number().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`));

const envSchema = z.object({
  MENU_PLATFORM_URL: opt(z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' })),
  MENU_PLATFORM_TOKEN: opt(z.string().min(1)),
  MENU_PLATFORM_TIMEOUT_MS: opt(whole(100, 600_000)),
  LOCAL_MENU_STORES: opt(whole(0, 10_000)),
});

export class MenuPlatformConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid menu platform configuration:\n  ${problems.join('\n  ')}`);
    this.name = 'MenuPlatformConfigError';
  }
}

/** The platform the menu roles call; throws MenuPlatformConfigError naming each bad variable. */
export function menuPlatformFromEnv(env: Record<string, string | undefined>, log: MenuPlatformLogger): MenuPlatform {
  const parsed = envSchema.safeParse(env);
  if (!parsed.success) {
    throw new MenuPlatformConfigError(parsed.error.issues.map((i) => `${String(i.path[0])}: ${i.message}`));
  }
  const c = parsed.data;
  if (c.MENU_PLATFORM_URL) {
    log.info(
      { event: 'menu_platform', mode: 'http', host: new URL(c.MENU_PLATFORM_URL).host },
      'menu platform over HTTP',
    );
    return createHttpMenuPlatform({
      baseUrl: c.MENU_PLATFORM_URL,
      token: c.MENU_PLATFORM_TOKEN,
      timeoutMs: c.MENU_PLATFORM_TIMEOUT_MS,
    });
  }
  return createLocalMenuPlatform(log, { stores: c.LOCAL_MENU_STORES, timeoutMs: c.MENU_PLATFORM_TIMEOUT_MS });
}

/**
 * Local mode: the fake menu platform in this process, started on first use (so workers
 * that never call the platform never open a port), with 5% failing and 5% slow answers.
 */
export function createLocalMenuPlatform(
  log: MenuPlatformLogger,
  options: { stores?: number; timeoutMs?: number } = {},
): MenuPlatform & { close(): Promise<void> } {
  let started: Promise<{ fake: FakeMenuPlatform; platform: MenuPlatform }> | undefined;
  const ready = () =>
    (started ??= startFakeMenuPlatform({
      stores: options.stores ?? 12,
      errorRate: 0.05,
      slowRate: 0.05,
      slowMs: 1500,
      seed: process.pid,
      priceEpochMs: 60_000,
    }).then((fake) => {
      log.warn(
        { event: 'menu_platform', mode: 'local', url: fake.url },
        `LOCAL MODE: no MENU_PLATFORM_URL; the menu roles call the fake menu platform at ${fake.url} (5% of answers fail, 5% are slow)`,
      );
      return { fake, platform: createHttpMenuPlatform({ baseUrl: fake.url, timeoutMs: options.timeoutMs }) };
    }));
  return {
    name: 'local',
    listStores: async (signal) => (await ready()).platform.listStores(signal),
    resolveEntryPoint: async (url, signal) => (await ready()).platform.resolveEntryPoint(url, signal),
    fetchMenu: async (id, signal) => (await ready()).platform.fetchMenu(id, signal),
    close: async () => {
      if (started) await (await started).fake.close();
    },
  };
}
