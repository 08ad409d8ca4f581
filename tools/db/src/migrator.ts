// @org/db-tools/migrator: what a deploy needs to migrate a database (the `queue migrate`
// command, the migrate CLI), without the embedded server and the test tools.
export { migrateDatabase, migrateSettings } from './migrate.js';
export { dbUserNamesFromEnv, type DbUserNames } from './db-users.js';
export { redactUrl } from './urls.js';
