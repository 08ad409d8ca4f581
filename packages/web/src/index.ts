// @org/web: the web server: the operations REST API, dashboard and metrics.
export { createApi, TASK_STATES, type ApiConfigInput, type CreateApiOptions } from './app.js';
export { loadApiConfig, helpText, ConfigError, API_CONFIG, API_SETTINGS, type ApiConfig } from './config.js';
export { Store, type ActionResult, type NewTaskInput, type TaskListFilter } from './store.js';
