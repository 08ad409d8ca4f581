/**
 * The generated queries as named (prepared) statements: each connection parses and
 * analyses a statement once, then only binds and executes it. That is about 30 µs less
 * server time per one-by-one enqueue, and 55 to 70 µs less per round trip of a start mark,
 * which a busy worker sends once per group of starting tasks.
 *
 * PostgreSQL re-analyses a prepared statement by itself when a migration replaces the
 * function it calls, but refuses it for good once the statement's result columns changed
 * ("cached plan must not change result type", SQLSTATE 0A000): a client would fail every
 * call of it until reconnected (the worker's start and completion connections among them),
 * and a pool, which drops a connection after an error, would fail one call per connection.
 * So on that refusal every statement is prepared again under a new name (the next
 * generation, on each connection at its next use), and a call on a pool is tried again at
 * once: the refusal comes before anything ran. A call on a client is not tried again,
 * since the refusal aborted any transaction the client is in; its next call uses the new
 * name.
 */
import pg from 'pg';
import type { Queryable } from './connection.js';
import { QueueError } from './errors.js';

/** Bumped when PostgreSQL refused a prepared statement whose result columns changed. */
let generation = 0;

function nameIn(name: string, of: number): string {
  return of === 0 ? name : `${name}_${of}`;
}

/**
 * PostgreSQL's refusal to run a prepared statement whose result columns changed since it
 * was prepared (as node-postgres raised it, or as the cause of the QueueError the client
 * raised for it): raised by the plan cache itself (its routine), so code that raises the
 * same SQLSTATE and message (a handler's RAISE) is not taken for it.
 */
export function isResultTypeChange(error: unknown): boolean {
  const raised = error instanceof QueueError ? error.cause : error;
  const e = raised as { code?: unknown; routine?: unknown } | null;
  return raised instanceof Error && e?.code === '0A000' && e.routine === 'RevalidateCachedQuery';
}

/** `db` as the generated queries' connection, running their statement as the prepared `name`. */
export function prepared(name: string, db: Queryable) {
  const run = async (config: pg.QueryConfig, of: number) => {
    const result = await db.query<Record<string, unknown>>({ ...config, name: nameIn(name, of) });
    return { rows: result.rows, fields: result.fields, rowCount: result.rowCount ?? 0 };
  };
  return {
    // The runtime shim passes one query config (text, values and its type parsers); the
    // generated code's declared connection type passes text and values.
    query: async (query: string | pg.QueryConfig, values?: unknown[]) => {
      const config = typeof query === 'string' ? { text: query, values } : query;
      const of = generation;
      try {
        return await run(config, of);
      } catch (error) {
        if (!isResultTypeChange(error)) throw error;
        if (generation === of) generation++;
        if (!(db instanceof pg.Pool)) throw error;
        return run(config, generation);
      }
    },
  };
}
