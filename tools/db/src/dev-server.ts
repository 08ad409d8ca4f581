import { openServer, provisionDatabase, type DatabaseServer, type DatabaseUrls } from './server.js';

/** The database name of the development (and `npm start`) server. */
export const DEV_DATABASE = process.env.DATABASE_NAME ?? 'queue';

/**
 * Opens the development server: the embedded one in .data/postgres, or the admin
 * `DATABASE_URL` when set; makes sure the dev database is migrated.
 */
export async function openDevServer(
  options: { quiet?: boolean } = {},
): Promise<{ server: DatabaseServer; urls: DatabaseUrls }> {
  const server = await openServer({
    name: 'postgres',
    adminUrl: process.env.DATABASE_URL,
    port: process.env.EMBEDDED_PG_PORT ? Number(process.env.EMBEDDED_PG_PORT) : undefined,
  });
  try {
    const urls = await provisionDatabase(server, DEV_DATABASE, { quiet: options.quiet });
    return { server, urls };
  } catch (error) {
    await server.stop();
    throw error;
  }
}

/** Environment for the graphile-migrate CLI against the development server. */
export function migrateEnv(server: DatabaseServer, urls: DatabaseUrls, shadowUrls: DatabaseUrls): NodeJS.ProcessEnv {
  return {
    ...process.env,
    DATABASE_URL: urls.owner,
    SHADOW_DATABASE_URL: shadowUrls.owner,
    ROOT_DATABASE_URL: server.rootUrl,
    DATABASE_WORKER: server.dbUsers.worker,
    DATABASE_APP: server.dbUsers.app,
    DATABASE_API: server.dbUsers.api,
  };
}
