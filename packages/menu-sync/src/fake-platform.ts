/**
 * A fake menu platform: a node:http server on 127.0.0.1 that speaks the API of
 * http-platform.ts. Local mode (no MENU_PLATFORM_URL) and the tests use it; nothing
 * here calls out.
 *
 * What it serves, all deterministic from the store number:
 *   stores     <prefix>-1 .. <prefix>-<storeCount> (prefix "store"), with a menu URL each
 *              (never fetched)
 *   entry      the platform id of a menu URL of any <prefix>-<n> store: "d-" + its slug
 *              (so a fake answers for stores another fake listed, as local-mode workers
 *              in several processes do)
 *   menus      4 to 10 products per store; every fetch of a store's menu moves its price
 *              version on (and, with priceEpochMs, the clock), so some prices change from
 *              one resync to the next; stock too
 *
 * What tests (and local mode) control: more stores, the next n answers failing, a
 * share of answers failing (5xx) or slow, an outage (every answer fails until cleared),
 * a delay for one store's menu, and what was asked (requests).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeMenuPlatformOptions {
  /** Stores listed (default 12). */
  stores?: number;
  /** Share of answers that fail with 503, 0..1 (default 0). */
  errorRate?: number;
  /** Share of answers delayed by slowMs, 0..1 (default 0). */
  slowRate?: number;
  /** Delay of a slow answer (default 1500 ms). */
  slowMs?: number;
  /** Seed of the failure and delay draws (default 1). */
  seed?: number;
  /**
   * Prices also move every this many milliseconds of wall time (default: only per fetch),
   * so several fakes (one per local-mode worker) agree that prices changed.
   */
  priceEpochMs?: number;
  /** Slug prefix of the stores listed (default "store": store-1, store-2, ...). */
  prefix?: string;
  /** Port to listen on (default: any free port). */
  port?: number;
  host?: string;
}

export interface FakeRequest {
  path: string;
  status: number;
}

export interface FakeMenuPlatform {
  /** http://127.0.0.1:<port>, no trailing slash. */
  readonly url: string;
  /** Every answered request, oldest first. */
  readonly requests: FakeRequest[];
  /** Lists `n` stores from now on. */
  setStoreCount(n: number): void;
  /** The next `n` requests fail with `status` (default 503). */
  failNext(n: number, status?: number): void;
  /** Every request fails with `status` until cleared with `outage(null)`. */
  outage(status: number | null): void;
  /** Shares of failing and slow answers. */
  setRates(rates: { errorRate?: number; slowRate?: number; slowMs?: number }): void;
  /** Delays every answer for this dispensary's menu by `ms` (0 clears). */
  delayMenu(platformDispensaryId: string, ms: number): void;
  /** The store's slug, menu URL and platform id, as the platform knows them. */
  store(n: number): { slug: string; name: string; menu_url: string; platform_dispensary_id: string };
  /** Menu fetches per platform id so far. */
  menuFetches(platformDispensaryId: string): number;
  /** The most menu requests for one dispensary that were in flight at once, over all dispensaries. */
  maxConcurrentMenuFetches(): number;
  close(): Promise<void>;
}

const MENU_HOST = 'https://menus.fake-platform.invalid';

/** A small deterministic PRNG (mulberry32). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function storeOf(prefix: string, n: number) {
  const slug = `${prefix}-${n}`;
  return { slug, name: `Store ${n}`, menu_url: `${MENU_HOST}/${slug}`, platform_dispensary_id: `d-${slug}` };
}

/** The store number of a slug "<prefix>-<n>", or undefined. */
function numberOf(slug: string): number | undefined {
  const m = /^[a-z0-9][a-z0-9-]{0,80}-([1-9][0-9]{0,5})$/.exec(slug);
  return m ? Number(m[1]) : undefined;
}

const STRAINS = [
  'Blue Dream',
  'OG Kush',
  'Sour Diesel',
  'Gelato',
  'Wedding Cake',
  'Pineapple Express',
  'Gorilla Glue',
  'Zkittlez',
  'Runtz',
  'Jack Herer',
];

function menuOf(n: number, version: number) {
  const count = 4 + (n % 7);
  const products = [];
  for (let j = 0; j < count; j++) {
    const base = 1500 + ((n * 37 + j * 113) % 40) * 100;
    // The price moves with the menu's version for every third product.
    const price = base + (j % 3 === 0 ? ((version * (j + 1)) % 4) * 50 : 0);
    const quantity = (n * 7 + j * 3 + version) % 25;
    products.push({
      id: `p-${n}-${j}`,
      name: `${STRAINS[(n + j) % STRAINS.length]} ${j + 1}g`,
      price_cents: price,
      in_stock: quantity > 0,
      quantity,
    });
  }
  return { products };
}

export async function startFakeMenuPlatform(options: FakeMenuPlatformOptions = {}): Promise<FakeMenuPlatform> {
  let storeCount = options.stores ?? 12;
  let errorRate = options.errorRate ?? 0;
  let slowRate = options.slowRate ?? 0;
  let slowMs = options.slowMs ?? 1500;
  let failing: { n: number; status: number } = { n: 0, status: 503 };
  let outageStatus: number | null = null;
  const draw = prng(options.seed ?? 1);
  const delays = new Map<string, number>();
  const versions = new Map<string, number>();
  const inFlight = new Map<string, number>();
  let maxInFlight = 0;
  const requests: FakeRequest[] = [];
  const prefix = options.prefix ?? 'store';

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake.invalid');
    const answer = (status: number, body: unknown) => {
      requests.push({ path: url.pathname, status });
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const reply = (status: number, body: unknown, delayMs = 0) => {
      if (delayMs > 0) {
        const timer = setTimeout(() => answer(status, body), delayMs);
        res.on('close', () => clearTimeout(timer));
      } else answer(status, body);
    };
    if (req.method !== 'GET') return reply(405, { message: 'only GET' });
    // Failures and delays are drawn for every request, so a run is reproducible by seed.
    const failDraw = draw();
    const slowDraw = draw();
    const delay = slowDraw < slowRate ? slowMs : 0;
    if (outageStatus !== null) return reply(outageStatus, { message: 'the platform is down' });
    if (failing.n > 0) {
      failing.n--;
      return reply(failing.status, { message: 'injected failure' });
    }
    if (failDraw < errorRate) return reply(503, { message: 'temporarily unavailable' }, delay);

    if (url.pathname === '/v1/stores') {
      const stores = [];
      for (let n = 1; n <= storeCount; n++) {
        const { slug, name, menu_url } = storeOf(prefix, n);
        stores.push({ slug, name, menu_url });
      }
      return reply(200, { stores }, delay);
    }
    if (url.pathname === '/v1/entry-points') {
      const menuUrl = url.searchParams.get('menu_url') ?? '';
      const slug = menuUrl.startsWith(`${MENU_HOST}/`) ? menuUrl.slice(MENU_HOST.length + 1) : '';
      if (numberOf(slug) === undefined) return reply(404, { message: 'no store has this menu URL' }, delay);
      return reply(200, { platform_dispensary_id: `d-${slug}` }, delay);
    }
    const m = /^\/v1\/dispensaries\/([^/]+)\/menu$/.exec(url.pathname);
    if (m) {
      const id = decodeURIComponent(m[1]!);
      const n = id.startsWith('d-') ? numberOf(id.slice(2)) : undefined;
      if (n === undefined) return reply(404, { message: `no dispensary ${id}` }, delay);
      const fetches = (versions.get(id) ?? 0) + 1;
      versions.set(id, fetches);
      const version = fetches + (options.priceEpochMs ? Math.floor(Date.now() / options.priceEpochMs) : 0);
      const now = (inFlight.get(id) ?? 0) + 1;
      inFlight.set(id, now);
      maxInFlight = Math.max(maxInFlight, now);
      // Answered (handed to the OS before the client can act on it) or abandoned.
      let ended = false;
      const end = () => {
        if (!ended) inFlight.set(id, (inFlight.get(id) ?? 1) - 1);
        ended = true;
      };
      res.once('finish', end);
      res.once('close', end);
      return reply(200, menuOf(n, version), Math.max(delay, delays.get(id) ?? 0));
    }
    return reply(404, { message: `no route ${url.pathname}` });
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    setStoreCount(n) {
      storeCount = n;
    },
    failNext(n, status = 503) {
      failing = { n, status };
    },
    outage(status) {
      outageStatus = status;
    },
    setRates(rates) {
      errorRate = rates.errorRate ?? errorRate;
      slowRate = rates.slowRate ?? slowRate;
      slowMs = rates.slowMs ?? slowMs;
    },
    delayMenu(id, ms) {
      if (ms > 0) delays.set(id, ms);
      else delays.delete(id);
    },
    store: (n) => storeOf(prefix, n),
    menuFetches: (id) => versions.get(id) ?? 0,
    maxConcurrentMenuFetches: () => maxInFlight,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
