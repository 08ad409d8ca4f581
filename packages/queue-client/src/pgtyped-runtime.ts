/**
 * The part of @pgtyped/runtime that the generated clients (src/queries/*.queries.ts) use
 * at run time: PreparedQuery, for queries whose parameters are all scalars (ours are: an
 * array travels as one parameter, `:ids::bigint[]`). @pgtyped/runtime itself loads the
 * pgtyped SQL parser (antlr) on import, several MB of heap the generated code never uses;
 * the build points the compiled clients here instead (scripts/use-runtime-shim.mjs), and
 * the generated .ts files stay as pgtyped wrote them.
 */

interface QueryIR {
  usedParamSet: Record<string, boolean>;
  params: { name: string; required: boolean; transform: { type: string }; locs: { a: number; b: number }[] }[];
  statement: string;
}

interface Connection {
  query(text: string, values: unknown[]): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
}

/** `name!` and `name?` column aliases (pgtyped's nullability hints) become `name`. */
function mapQueryResultRows<T>(rows: Record<string, unknown>[]): T[] {
  for (const row of rows) {
    for (const column in row) {
      const last = column[column.length - 1];
      if (last === '!' || last === '?') {
        row[column.slice(0, -1)] = row[column];
        delete row[column];
      }
    }
  }
  return rows as T[];
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
    const result = await connection.query(this.#text, this.#bindings(params));
    return mapQueryResultRows<TResultType>(result.rows);
  };

  runWithCounts = async (
    params: TParamType,
    connection: Connection,
  ): Promise<{ result: TResultType[]; rowCount: number | null }> => {
    const result = await connection.query(this.#text, this.#bindings(params));
    return { result: mapQueryResultRows<TResultType>(result.rows), rowCount: result.rowCount };
  };

  #bindings(params: TParamType): unknown[] {
    const values = params as Record<string, unknown>;
    return this.#names.map((name) => values[name]);
  }
}
