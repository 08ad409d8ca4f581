// @org/contracts: the contracts between the worker and the SQL it runs, as zod
// schemas and their inferred types. Apps may import them too.
export * from './envelope.js';
export * from './payloads.js';
export * from './providers.js';
export * from './throttled.js';
