import type { Provider } from '@org/handler-types';
import { menuProcessors, type MenuPlatform } from '@org/menu-sync';
import { ProcessorRegistry } from './processor.js';
import { dbFunctionProcessor } from './processors/db-function.js';
import { handlerTaskProcessor } from './processors/handler-task.js';

/**
 * The built-in processors: db_function, and email, sms and file_delete with the given
 * providers; with a menu platform, also the five menu roles of @org/menu-sync
 * (store_discovery, entry_point_discovery, product_discovery, product_resync,
 * analytics_refresh).
 */
export function defaultRegistry(
  providers: { email: Provider<unknown>; sms: Provider<unknown>; file_delete: Provider<unknown> },
  menuPlatform?: MenuPlatform,
): ProcessorRegistry {
  const registry = new ProcessorRegistry()
    .register('db_function', dbFunctionProcessor())
    .register('email', handlerTaskProcessor(providers.email))
    .register('sms', handlerTaskProcessor(providers.sms))
    .register('file_delete', handlerTaskProcessor(providers.file_delete));
  if (menuPlatform)
    for (const [role, processor] of Object.entries(menuProcessors(menuPlatform))) registry.register(role, processor);
  return registry;
}
