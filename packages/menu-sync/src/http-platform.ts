/**
 * The menu platform over HTTP (JSON), at a configurable base URL:
 *
 *   GET  /v1/stores                              {stores: [{slug, name, menu_url}]}
 *   GET  /v1/entry-points?menu_url=<url>         {platform_dispensary_id}
 *   GET  /v1/dispensaries/<id>/menu              {products: [{id, name, price_cents, in_stock, quantity}]}
 *
 * Every call has a timeout and follows the task's abort signal (lease lost, shutdown).
 * Non-2xx answers, timeouts and bodies that do not match the schema throw
 * MenuPlatformError; the processor records it and the queue retries the task.
 */
import type { z } from 'zod';
import { entryPoint, menu, MenuPlatformError, storeList, type MenuPlatform } from './platform.js';

export interface HttpMenuPlatformOptions {
  /** http(s)://host[:port][/prefix], no trailing slash needed. */
  baseUrl: string;
  /** Per request (default 10 000 ms). */
  timeoutMs?: number;
  /** Sent as `Authorization: Bearer <token>` when set. */
  token?: string;
}

export function createHttpMenuPlatform(options: HttpMenuPlatformOptions): MenuPlatform {
  const base = options.baseUrl.replace(/\/+$/, '');
  const timeoutMs = options.timeoutMs ?? 10_000;

  async function get<T extends z.ZodType>(path: string, schema: T, signal: AbortSignal): Promise<z.output<T>> {
    const url = `${base}${path}`;
    let response: Response;
    try {
      response = await fetch(url, {
        headers: { accept: 'application/json', ...(options.token ? { authorization: `Bearer ${options.token}` } : {}) },
        signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]),
      });
    } catch (error) {
      if (signal.aborted)
        throw new MenuPlatformError(`GET ${path}: aborted (${String(signal.reason ?? 'lease lost or shutdown')})`);
      const name = (error as Error).name;
      if (name === 'TimeoutError' || name === 'AbortError')
        throw new MenuPlatformError(`GET ${path}: no answer within ${timeoutMs} ms`);
      throw new MenuPlatformError(`GET ${path}: ${(error as Error).message}`);
    }
    const text = await response.text();
    if (!response.ok) {
      let message = text.slice(0, 200);
      try {
        const body = JSON.parse(text) as { message?: unknown };
        if (typeof body.message === 'string') message = body.message.slice(0, 200);
      } catch {
        // not JSON: keep the text
      }
      throw new MenuPlatformError(
        `GET ${path}: HTTP ${response.status}${message ? `: ${message}` : ''}`,
        response.status,
      );
    }
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new MenuPlatformError(`GET ${path}: the answer is not JSON`, response.status);
    }
    const parsed = schema.safeParse(body);
    if (!parsed.success) {
      const problem = parsed.error.issues
        .map((i) => `${i.path.join('.') || 'body'}: ${i.message}`)
        .slice(0, 3)
        .join('; ');
      throw new MenuPlatformError(`GET ${path}: unexpected answer: ${problem}`, response.status);
    }
    return parsed.data;
  }

  return {
    name: `http:${new URL(base).host}`,
    listStores: (signal) => get('/v1/stores', storeList, signal),
    resolveEntryPoint: (menuUrl, signal) =>
      get(`/v1/entry-points?menu_url=${encodeURIComponent(menuUrl)}`, entryPoint, signal),
    fetchMenu: (id, signal) => get(`/v1/dispensaries/${encodeURIComponent(id)}/menu`, menu, signal),
  };
}
