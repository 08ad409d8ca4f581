import type pg from 'pg';

/** One node of an EXPLAIN (FORMAT JSON) plan. */
export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  Plans?: PlanNode[];
  [key: string]: unknown;
}

export interface NestedPlan {
  query: string;
  plan: PlanNode;
}

/**
 * Runs `sql` on `client` (a superuser connection: LOAD needs it) with auto_explain
 * logging every nested statement's plan with ANALYZE and BUFFERS as a NOTICE, and
 * returns those plans. This shows what runs inside PL/pgSQL and SQL functions, which a
 * plain EXPLAIN of the call hides.
 */
export async function explainNested(client: pg.Client, sql: string, params: unknown[] = []): Promise<NestedPlan[]> {
  const plans: NestedPlan[] = [];
  const onNotice = (notice: { message?: string }) => {
    const text = notice.message ?? '';
    const start = text.indexOf('{');
    if (!text.startsWith('duration') || start < 0) return;
    const parsed = JSON.parse(text.slice(start)) as { 'Query Text': string; Plan: PlanNode };
    plans.push({ query: parsed['Query Text'], plan: parsed.Plan });
  };
  await client.query("load 'auto_explain'");
  await client.query(`set auto_explain.log_min_duration = 0;
    set auto_explain.log_analyze = on;
    set auto_explain.log_buffers = on;
    set auto_explain.log_timing = off;
    set auto_explain.log_nested_statements = on;
    set auto_explain.log_format = json;
    set auto_explain.log_level = notice;
    set client_min_messages = notice;`);
  client.on('notice', onNotice);
  try {
    await client.query(sql, params);
  } finally {
    client.off('notice', onNotice);
    await client.query('set auto_explain.log_min_duration = -1; reset client_min_messages;');
  }
  return plans;
}

/** Every node of a plan, depth first. */
export function planNodes(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(planNodes)];
}

/** Shared buffers (hit + read) of the plan's top node, which include its children's. */
export function sharedBuffers(node: PlanNode): number {
  return (node['Shared Hit Blocks'] ?? 0) + (node['Shared Read Blocks'] ?? 0);
}
