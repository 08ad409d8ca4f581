/**
 * The part of @pgtyped/runtime that the generated clients (src/queries/*.queries.ts) use
 * at run time: PreparedQuery, for queries whose parameters are all scalars (ours are: an
 * array travels as one parameter, `:ids::bigint[]`). @pgtyped/runtime itself loads the
 * pgtyped SQL parser (antlr) on import, several MB of heap the generated code never uses;
 * the build points the compiled clients here instead (scripts/use-runtime-shim.mjs; also
 * those of @org/menu-sync, through the export `@org/queue-client/pgtyped-runtime`), and
 * the generated .ts files stay as pgtyped wrote them.
 *
 * Rows: pgtyped's nullability hints in column aliases (`as "taskId!"`) are taken out of
 * the statement sent (`as "taskId"`), so node-postgres builds each row with its final
 * keys: one object per row, every row of a query of one shape. (@pgtyped/runtime renames
 * the keys of every row with `delete`, which turns each row into a slow dictionary-mode
 * object several times its size; a worker holds hundreds of claimed tasks at once.) A
 * hint the statement still carries (an alias without `as`) is mapped from the rows.
 *
 * `timestamptz` columns are parsed here (parseTimestamptz) when they have PostgreSQL's
 * usual ISO form, without the regular expressions of node-postgres's parser (each claimed
 * task has four); any other form goes to node-postgres's parser.
 */
import pg from 'pg';

interface QueryIR {
  usedParamSet: Record<string, boolean>;
  params: { name: string; required: boolean; transform: { type: string }; locs: { a: number; b: number }[] }[];
  statement: string;
}

interface Query {
  text: string;
  values: unknown[];
  types: typeof TYPES;
}

interface Connection {
  query(
    query: Query,
  ): Promise<{ rows: Record<string, unknown>[]; fields: { name: string }[]; rowCount: number | null }>;
}

const TIMESTAMPTZ = 1184;
const INT8 = 20;

/**
 * node-postgres's own parser of int8 in text form: it returns the text it was given
 * (after testing it against a regular expression, for each value), so it is taken for
 * the text itself. Ids are int8: the claim and the completions read two per task.
 */
const PG_INT8 = pg.types.getTypeParser(INT8, 'text') as (text: string) => unknown;
const PG_INT8_OWN = PG_INT8.name === 'parseBigInteger';
const asText = (text: string): string => text;

/**
 * node-postgres's type parsers, but timestamptz in text form through parseTimestamptz,
 * and int8 in text form as the text (unless a parser of the application's replaced
 * node-postgres's own).
 */
const TYPES = {
  getTypeParser(oid: number, format?: string): unknown {
    if (format === 'binary') return pg.types.getTypeParser(oid, 'binary');
    if (oid === TIMESTAMPTZ) return parseTimestamptz;
    const parser: unknown = pg.types.getTypeParser(oid, 'text');
    return oid === INT8 && parser === PG_INT8 && PG_INT8_OWN ? asText : parser;
  },
};

/** The value of the decimal digits of `text` from `start` to `end`, or -1 if one is not a digit. */
function digits(text: string, start: number, end: number): number {
  let value = 0;
  for (let i = start; i < end; i++) {
    const d = text.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return -1;
    value = value * 10 + d;
  }
  return value;
}

/**
 * A timestamptz in PostgreSQL's ISO output (`2026-01-02 03:04:05.123456+00`, the offset
 * as `+HH`, `+HH:MM` or `+HH:MM:SS`; years 1000-9999, no BC), as node-postgres would parse
 * it (milliseconds truncated), without allocating anything but the Date. Any other form
 * (infinity, BC, other years) goes to node-postgres's own parser.
 */
export function parseTimestamptz(text: string): unknown {
  const n = text.length;
  if (n >= 22 && text[4] === '-' && text[7] === '-' && text[10] === ' ' && text[13] === ':' && text[16] === ':') {
    const year = digits(text, 0, 4);
    const month = digits(text, 5, 7);
    const day = digits(text, 8, 10);
    const hour = digits(text, 11, 13);
    const minute = digits(text, 14, 16);
    const second = digits(text, 17, 19);
    let at = 19;
    let ms = 0;
    if (text[at] === '.') {
      const start = ++at;
      while (at < n && at - start < 6 && text.charCodeAt(at) >= 48 && text.charCodeAt(at) <= 57) at++;
      const fraction = at - start;
      if (fraction > 0) ms = digits(text, start, start + Math.min(fraction, 3)) * 10 ** Math.max(0, 3 - fraction);
    }
    const sign = text[at] === '+' ? 1 : text[at] === '-' ? -1 : 0;
    const rest = n - at - 1; // after the sign: HH, HH:MM or HH:MM:SS
    if (year >= 1000 && month >= 0 && day >= 0 && hour >= 0 && minute >= 0 && second >= 0 && sign !== 0) {
      const offHours = rest === 2 || rest === 5 || rest === 8 ? digits(text, at + 1, at + 3) : -1;
      const offMinutes = rest >= 5 ? (text[at + 3] === ':' ? digits(text, at + 4, at + 6) : -1) : 0;
      const offSeconds = rest === 8 ? (text[at + 6] === ':' ? digits(text, at + 7, at + 9) : -1) : 0;
      if (offHours >= 0 && offMinutes >= 0 && offSeconds >= 0) {
        const offset = sign * (offHours * 3600 + offMinutes * 60 + offSeconds) * 1000;
        return new Date(Date.UTC(year, month - 1, day, hour, minute, second, ms) - offset);
      }
    }
  }
  return (pg.types.getTypeParser(TIMESTAMPTZ, 'text') as (value: string) => unknown)(text);
}

/** Whether a column name ends with a pgtyped nullability hint (`name!`, `name?`). */
function hinted(column: string): boolean {
  const last = column[column.length - 1];
  return last === '!' || last === '?';
}

/** A string literal (left as it is), or an alias with a hint, `as "name!"` (sent as `as "name"`). */
const HINTED_ALIAS = /('(?:[^']|'')*')|(\bas\s+)"((?:[^"]|"")+?)[!?]"/gi;

/** `statement` with the hints taken out of its aliases. */
function withoutHints(statement: string): string {
  return statement.replace(HINTED_ALIAS, (match, literal: string | undefined, as: string, name: string) =>
    literal === undefined ? `${as}"${name}"` : match,
  );
}

/** The rows with their keys free of hints (new objects, all of one shape), or the rows themselves. */
function mapQueryResultRows<T>(rows: Record<string, unknown>[], fields: { name: string }[]): T[] {
  if (!fields.some((f) => hinted(f.name))) return rows as T[];
  const columns = fields.map((f) => f.name);
  const keys = columns.map((c) => (hinted(c) ? c.slice(0, -1) : c));
  return rows.map((row) => {
    const object: Record<string, unknown> = {};
    for (let c = 0; c < keys.length; c++) object[keys[c]!] = row[columns[c]!];
    return object as T;
  });
}

export class PreparedQuery<TParamType, TResultType> {
  readonly #text: string;
  readonly #names: string[];

  constructor(queryIR: QueryIR) {
    const used = queryIR.params.filter((p) => p.name in queryIR.usedParamSet);
    const intervals: { a: number; b: number; sub: string }[] = [];
    used.forEach((param, i) => {
      if (param.transform.type !== 'scalar') {
        throw new Error(`query parameter ${param.name}: ${param.transform.type} parameters need @pgtyped/runtime`);
      }
      for (const loc of param.locs) intervals.push({ ...loc, sub: `$${i + 1}` });
    });
    intervals.sort((x, y) => x.a - y.a);
    let text = '';
    let at = 0;
    for (const interval of intervals) {
      text += queryIR.statement.slice(at, interval.a) + interval.sub;
      at = interval.b + 1;
    }
    this.#text = withoutHints(text + queryIR.statement.slice(at));
    this.#names = used.map((p) => p.name);
  }

  run = async (params: TParamType, connection: Connection): Promise<TResultType[]> => {
    const result = await connection.query({
      text: this.#text,
      values: this.#bindings(params),
      types: TYPES,
    });
    return mapQueryResultRows<TResultType>(result.rows, result.fields);
  };

  runWithCounts = async (
    params: TParamType,
    connection: Connection,
  ): Promise<{ result: TResultType[]; rowCount: number | null }> => {
    const result = await connection.query({
      text: this.#text,
      values: this.#bindings(params),
      types: TYPES,
    });
    return { result: mapQueryResultRows<TResultType>(result.rows, result.fields), rowCount: result.rowCount };
  };

  #bindings(params: TParamType): unknown[] {
    const values = params as Record<string, unknown>;
    return this.#names.map((name) => idArrayLiteral(values[name]));
  }
}

const DIGITS = /^[0-9]+$/;
/** A lowercase word: the same unquoted in an array literal (`null` is not: it is NULL). */
const WORD = /^[a-z_]+$/;

/**
 * An array of ids (bigint strings or safe integers), lowercase words (an outcome), booleans
 * and nulls as one array literal, `{1,2,NULL}`: the value node-postgres would send (it
 * quotes each element, `{"1","2",NULL}`), made with one join instead of a string per
 * element. The worker sends thousands of ids a second (the leases it marks started and
 * completes, with their outcomes). Any other value is passed on as it is.
 */
export function idArrayLiteral(value: unknown): unknown {
  if (!Array.isArray(value)) return value;
  let plain = true;
  for (const element of value) {
    if (typeof element === 'string') {
      if (DIGITS.test(element)) continue;
      if (!WORD.test(element) || element === 'null') return value;
    } else if (typeof element === 'boolean' || element === null || element === undefined) {
      plain = false;
    } else if (!Number.isSafeInteger(element)) {
      return value;
    }
  }
  if (plain) return `{${value.join(',')}}`;
  return `{${(value as (string | number | boolean | null | undefined)[]).map((e) => (e === null || e === undefined ? 'NULL' : String(e))).join(',')}}`;
}
