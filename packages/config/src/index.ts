// @org/config: how every program of this repository reads its settings (environment
// variables and flags, one table each) and writes its logs (one shape, JSON or pretty).
export {
  ConfigError,
  defineConfig,
  issueText,
  wholeNumber,
  postgresUrl,
  httpUrl,
  commaList,
  logSettings,
  LOG_LEVELS,
  LOG_FORMATS,
  type Config,
  type ConfigOf,
  type ConfigSpec,
  type Env,
  type LogFormat,
  type LogLevel,
  type Setting,
  type Settings,
} from './settings.js';
export {
  createLogger,
  endLogger,
  isPretty,
  loggerOptions,
  maskUrl,
  type CreateLoggerOptions,
  type Logger,
} from './logger.js';
