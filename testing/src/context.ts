import type { DbUserNames, DbUserPasswords } from '@org/db-tools/db-users';

/** What the global setup hands to test files (vitest `provide` / `inject`). */
export interface TestServerContext {
  rootUrl: string;
  dbUsers: DbUserNames;
  dbUserPasswords: DbUserPasswords;
  /** The migrated template database. */
  template: string;
  /** Test databases are named with this prefix. */
  prefix: string;
}

declare module 'vitest' {
  export interface ProvidedContext {
    queueTestServer: TestServerContext;
  }
}
