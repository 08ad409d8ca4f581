export { createTestDatabase, type TestDatabase, type DbUser } from './test-database.js';
export type { TestServerContext } from './context.js';
export { explainNested, planNodes, sharedBuffers, type NestedPlan, type PlanNode } from './explain.js';
export { endPendingTasks } from './claim-index.js';
export { backendPid, untilBlockedOrDone } from './lock-wait.js';
