/**
 * @org/handler-types (the schemas of payloads and envelopes, and zod with them), loaded
 * by the first task that needs it: a process that embeds the Worker with processors of
 * its own never loads them. After the first load the module is at hand synchronously.
 */
import type * as HandlerTypes from '@org/handler-types';

let loaded: typeof HandlerTypes | undefined;
let loading: Promise<typeof HandlerTypes> | undefined;

/** The module, or the promise of its first load. */
export function handlerTypes(): typeof HandlerTypes | Promise<typeof HandlerTypes> {
  return loaded ?? (loading ??= import('@org/handler-types').then((module) => (loaded = module)));
}
