export { startEmbedded, destroyEmbedded, freePort, type EmbeddedServer } from './embedded.js';
export { migrateDatabase, migrateSettings } from './migrate.js';
export { repoRoot, dataRoot } from './paths.js';
export {
  ensureDbUsers,
  hardenDatabase,
  dbUserNamesFromEnv,
  type DbUserNames,
  type DbUserPasswords,
} from './db-users.js';
export {
  openServer,
  provisionDatabase,
  databaseUrls,
  withRootClient,
  type DatabaseServer,
  type DatabaseUrls,
} from './server.js';
export { withDatabase, redactUrl } from './urls.js';
export { openDevServer, DEV_DATABASE } from './dev-server.js';
export { dumpSchema, unifiedDiff } from './schema-dump.js';
export { writeSchemaDump, schemaDumpPath } from './schema-dump-file.js';
export { replaceLegacyHistory, LEGACY_HISTORY, BASELINE_FILENAME } from './legacy.js';
export { checkMigrationLocks, lockMarkers, HOT_TABLES } from './migration-locks.js';
export {
  checkMigrationIncludes,
  createdObjects,
  includesOf,
  migrationsToCheck,
  oversizedFiles,
  repeatedIncludes,
  FIRST_CHECKED_MIGRATION,
  MAX_OBJECTS_PER_FILE,
} from './migration-includes.js';
export { findSqlDrift, sqlFiles } from './sql-drift.js';
export { compiledMigrations, compileMigration } from './migration-files.js';
export { enableLocalSchedules, LOCAL_SCHEDULES } from './local-schedules.js';
export { registerAppTasks } from './app-tasks.js';
export { startStandby, postgresBinDir, runPostgresBinary, type Standby, type StandbyOptions } from './standby.js';
