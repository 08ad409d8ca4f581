/**
 * @org/contracts (the schemas of payloads and envelopes, and zod with them), loaded
 * by the first task that needs it: a process that embeds the Worker with processors of
 * its own never loads them. After the first load the module is at hand synchronously.
 */
import type * as Contracts from '@org/contracts';

let loaded: typeof Contracts | undefined;
let loading: Promise<typeof Contracts> | undefined;

/** The module, or the promise of its first load. */
export function contracts(): typeof Contracts | Promise<typeof Contracts> {
  return loaded ?? (loading ??= import('@org/contracts').then((module) => (loaded = module)));
}
