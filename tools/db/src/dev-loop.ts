import { join } from 'node:path';
import chokidar from 'chokidar';
import { watch as applyCurrent, type Settings } from 'graphile-migrate';
import { clearAllPools } from 'graphile-migrate/dist/pgReal.js';
import { runPgtyped } from './codegen.js';
import type { RoleNames } from './roles.js';
import { writeSchemaDump } from './schema-dump-file.js';

export interface DevLoopOptions {
  settings: Settings;
  /** The database the loop applies the current migration to and generates types from (owner). */
  databaseUrl: string;
  /** Folders holding SQL that the current migration may include (watched recursively). */
  sqlFolders: string[];
  /** Client packages (folders with pgtyped.json) to regenerate. */
  clientPackages: string[];
  log: (line: string) => void;
  /** Rewrite this schema dump (migrations/schema.sql) after every cycle. */
  schemaDump?: { roles: RoleNames; path: string };
  /** Called after every cycle, with the error if it failed. */
  onCycle?: (error: Error | undefined) => void;
  debounceMs?: number;
}

export interface DevLoop {
  /** Resolves once watching has started and the first cycle has run. */
  ready: Promise<void>;
  close(): Promise<void>;
}

/**
 * The edit loop: on every save of a file of migrations/current/, of an included SQL file,
 * or of a client's query file, re-apply the current migration, regenerate the typed
 * clients and (with `schemaDump`) the schema dump. A failing cycle is
 * logged and the loop waits for the next save.
 */
export function startDevLoop(options: DevLoopOptions): DevLoop {
  const { settings, log } = options;
  let running = false;
  let pending = false;
  let timer: NodeJS.Timeout | undefined;

  const cycle = async (): Promise<void> => {
    if (running) {
      pending = true;
      return;
    }
    running = true;
    let failure: Error | undefined;
    try {
      await applyCurrent(settings, true);
      for (const pkg of options.clientPackages) {
        const output = await runPgtyped({ cwd: pkg, config: 'pgtyped.json', databaseUrl: options.databaseUrl });
        for (const line of output.split('\n')) if (line.startsWith('Saved')) log(line);
      }
      if (options.schemaDump) {
        const { changed } = await writeSchemaDump(options.databaseUrl, options.schemaDump.roles, { path: options.schemaDump.path });
        if (changed) log(`${options.schemaDump.path} rewritten`);
      }
      log('current migration applied; clients and schema dump up to date');
    } catch (error) {
      failure = error instanceof Error ? error : new Error(String(error));
      log(`cycle failed, waiting for the next save:\n${failure.message}`);
    } finally {
      clearAllPools();
      running = false;
    }
    options.onCycle?.(failure);
    if (pending) {
      pending = false;
      await cycle();
    }
  };

  const schedule = () => {
    clearTimeout(timer);
    timer = setTimeout(() => void cycle(), options.debounceMs ?? 150);
  };

  const migrationsFolder = settings.migrationsFolder ?? 'migrations';
  const watcher = chokidar.watch(
    [
      // current.sql, or the current/ folder (one file per concern) in folder mode.
      join(migrationsFolder, 'current.sql'),
      join(migrationsFolder, 'current'),
      ...options.sqlFolders,
      ...options.clientPackages.map((pkg) => join(pkg, 'src')),
    ],
    { ignoreInitial: true },
  );
  watcher.on('all', (_event, path) => {
    // Generated .queries.ts files change on every cycle: only SQL starts one.
    if (path.endsWith('.sql')) schedule();
  });

  const ready = new Promise<void>((resolve) => watcher.once('ready', resolve)).then(cycle);
  return {
    ready,
    async close() {
      clearTimeout(timer);
      await watcher.close();
    },
  };
}
