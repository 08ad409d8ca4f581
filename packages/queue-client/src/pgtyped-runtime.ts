/**
 * The part of @pgtyped/runtime that the generated clients (src/queries/*.queries.ts) use
 * at run time: PreparedQuery, for queries whose parameters are all scalars (ours are: an
 * array travels as one parameter, `:ids::bigint[]`). @pgtyped/runtime itself loads the
 * pgtyped SQL parser (antlr) on import, several MB of heap the generated code never uses;
 * the build points the compiled clients here instead (scripts/use-runtime-shim.mjs; also
 * those of @org/menu-sync, through the export `@org/queue-client/pgtyped-runtime`), and
 * the generated .ts files stay as pgtyped wrote them.
 *
 * Rows come from node-postgres as arrays (`rowMode: 'array'`) and are built here as
 * objects keyed by the column names without pgtyped's `!`/`?` hints: one object per row,
 * every row of a query of one shape (renaming keys with `delete` would turn each row into
 * a slow dictionary-mode object several times its size; a worker holds hundreds of
 * claimed tasks at once).
 */

interface QueryIR {
  usedParamSet: Record<string, boolean>;
  params: { name: string; required: boolean; transform: { type: string }; locs: { a: number; b: number }[] }[];
  statement: string;
}

interface ArrayQuery {
  text: string;
  values: unknown[];
  rowMode: 'array';
}

interface Connection {
  query(query: ArrayQuery): Promise<{ rows: unknown[][]; fields: { name: string }[]; rowCount: number | null }>;
}

/** The key of a column: its name without pgtyped's nullability hint (`name!`, `name?`). */
function keyOf(column: string): string {
  const last = column[column.length - 1];
  return last === '!' || last === '?' ? column.slice(0, -1) : column;
}

/** Array rows as objects keyed by column (all rows of one shape). */
function mapQueryResultRows<T>(rows: unknown[][], fields: { name: string }[]): T[] {
  const keys = fields.map((f) => keyOf(f.name));
  const objects = new Array<T>(rows.length);
  for (let r = 0; r < rows.length; r++) {
    const row = rows[r]!;
    const object: Record<string, unknown> = {};
    for (let c = 0; c < keys.length; c++) object[keys[c]!] = row[c];
    objects[r] = object as T;
  }
  return objects;
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
    this.#text = text + queryIR.statement.slice(at);
    this.#names = used.map((p) => p.name);
  }

  run = async (params: TParamType, connection: Connection): Promise<TResultType[]> => {
    const result = await connection.query({ text: this.#text, values: this.#bindings(params), rowMode: 'array' });
    return mapQueryResultRows<TResultType>(result.rows, result.fields);
  };

  runWithCounts = async (
    params: TParamType,
    connection: Connection,
  ): Promise<{ result: TResultType[]; rowCount: number | null }> => {
    const result = await connection.query({ text: this.#text, values: this.#bindings(params), rowMode: 'array' });
    return { result: mapQueryResultRows<TResultType>(result.rows, result.fields), rowCount: result.rowCount };
  };

  #bindings(params: TParamType): unknown[] {
    const values = params as Record<string, unknown>;
    return this.#names.map((name) => idArrayLiteral(values[name]));
  }
}

const DIGITS = /^[0-9]+$/;

/**
 * An array of ids (bigint strings or safe integers) as one array literal, `{1,2,3}`: the
 * value node-postgres would send (it quotes each element, `{"1","2","3"}`), made with one
 * join instead of a string per element. The worker sends thousands of ids a second (the
 * leases it marks started and completes). Any other value is passed on as it is.
 */
function idArrayLiteral(value: unknown): unknown {
  if (!Array.isArray(value)) return value;
  for (const element of value) {
    if (typeof element === 'string' ? !DIGITS.test(element) : !Number.isSafeInteger(element)) return value;
  }
  return `{${value.join(',')}}`;
}
