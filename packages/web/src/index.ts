// @org/web: the web server: the operations REST API, dashboard and metrics.
export { createApi, routesOf, type Access, type ApiConfigInput, type CreateApiOptions, type RouteInfo } from './app.js';
export { parseUsers, type ApiUser, type Level, type Principal } from './auth.js';
export { loadApiConfig, helpText, ConfigError, API_CONFIG, API_SETTINGS, type ApiConfig } from './config.js';
export {
  recordedChange,
  Store,
  TASK_STATES,
  type ActionResult,
  type ApiChangeInput,
  type ChangeActor,
  type ChangeMade,
  type NewTaskInput,
  type TaskListFilter,
} from './store.js';
