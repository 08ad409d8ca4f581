// @org/api: the operations REST API, dashboard and metrics.
export { createApi, TASK_STATES, type ApiConfigInput, type CreateApiOptions } from './app.js';
export { loadApiConfig, helpText, ConfigError, API_SETTINGS, type ApiConfig } from './config.js';
export { WorkerMetrics, serveWorkerMetrics, type WorkerEventSource, type WorkerMetricsServer } from './worker-metrics.js';
export { Exposition, PROMETHEUS_CONTENT_TYPE } from './prometheus.js';
