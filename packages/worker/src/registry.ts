import type { Provider } from '@org/contracts';
import { ProcessorRegistry, type Processor } from './processor.js';
import { dbFunctionProcessor } from './processors/db-function.js';
import { channelTaskProcessor } from './processors/channel-task.js';

/**
 * The built-in processors: db_function; with providers, email, sms and file_delete; with
 * menu processors (`menuProcessors(platform)` of @org/menu-sync), the five menu roles
 * (store_discovery, entry_point_discovery, product_discovery, product_resync,
 * analytics_refresh). Neither @org/providers nor @org/menu-sync is loaded here: they are
 * optional peers of @org/worker, given by the caller.
 */
export function defaultRegistry(
  providers?: { email: Provider<unknown>; sms: Provider<unknown>; file_delete: Provider<unknown> },
  menuProcessors?: Readonly<Record<string, Processor>>,
): ProcessorRegistry {
  const registry = new ProcessorRegistry().register('db_function', dbFunctionProcessor());
  if (providers)
    registry
      .register('email', channelTaskProcessor(providers.email))
      .register('sms', channelTaskProcessor(providers.sms))
      .register('file_delete', channelTaskProcessor(providers.file_delete));
  for (const [role, processor] of Object.entries(menuProcessors ?? {})) registry.register(role, processor);
  return registry;
}
