import type { RoleNames, RolePasswords } from '../roles.js';

/** What the global setup hands to test files (vitest `provide` / `inject`). */
export interface TestServerContext {
  rootUrl: string;
  roles: RoleNames;
  rolePasswords: RolePasswords;
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
