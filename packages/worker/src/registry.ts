import type { Provider } from '@org/handler-types';
import { ProcessorRegistry } from './processor.js';
import { dbFunctionProcessor } from './processors/db-function.js';
import { handlerTaskProcessor } from './processors/handler-task.js';

/** The built-in processors: db_function, and email, sms and file_delete with the given providers. */
export function defaultRegistry(providers: { email: Provider<any>; sms: Provider<any>; file_delete: Provider<any> }): ProcessorRegistry {
  return new ProcessorRegistry()
    .register('db_function', dbFunctionProcessor())
    .register('email', handlerTaskProcessor(providers.email))
    .register('sms', handlerTaskProcessor(providers.sms))
    .register('file_delete', handlerTaskProcessor(providers.file_delete));
}
