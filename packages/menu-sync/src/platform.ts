/**
 * The menu platform, as the five roles see it. One interface, two implementations: the
 * HTTP provider (http-platform.ts) for a real base URL, and the fake server this package
 * ships (fake-platform.ts), which local mode and the tests talk to over HTTP as well.
 *
 * Terminology
 *   store                  a dispensary listed on the platform, by its slug
 *   menu URL               the store's public menu page
 *   platform_dispensary_id the platform's id for the store, resolved from its menu URL
 *   product                an item of a store's menu, with its price and stock now
 */
import { z } from 'zod';

export const discoveredStore = z.object({
  slug: z.string().regex(/^[a-z0-9][a-z0-9-]{0,99}$/, 'slug must be lowercase letters, digits and -'),
  name: z.string().min(1).max(200),
  menu_url: z.string().min(1).max(500),
});
export type DiscoveredStore = z.infer<typeof discoveredStore>;

export const storeList = z.object({ stores: z.array(discoveredStore).max(10_000) });
export const entryPoint = z.object({ platform_dispensary_id: z.string().min(1).max(100) });

export const menuProduct = z.object({
  id: z.string().min(1).max(100),
  name: z.string().min(1).max(300),
  price_cents: z.number().int().min(0),
  in_stock: z.boolean(),
  quantity: z.number().int().min(0),
});
export type MenuProduct = z.infer<typeof menuProduct>;
export const menu = z.object({ products: z.array(menuProduct).max(10_000) });

export interface MenuPlatform {
  /** For logs: "http:<host>", "local". */
  readonly name: string;
  listStores(signal: AbortSignal): Promise<{ stores: DiscoveredStore[] }>;
  resolveEntryPoint(menuUrl: string, signal: AbortSignal): Promise<{ platform_dispensary_id: string }>;
  fetchMenu(platformDispensaryId: string, signal: AbortSignal): Promise<{ products: MenuProduct[] }>;
}

/** A platform answer that is not a usable result: an HTTP error, a timeout, a malformed body. */
export class MenuPlatformError extends Error {
  constructor(
    message: string,
    /** The HTTP status, when there was an answer. */
    readonly status?: number,
  ) {
    super(message);
    this.name = 'MenuPlatformError';
  }
}
