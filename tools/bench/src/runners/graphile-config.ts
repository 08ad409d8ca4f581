/** graphile-worker's throughput settings, from https://worker.graphile.org/docs/performance. */
export const GRAPHILE_PRESET = {
  worker: {
    localQueue: { size: 500 },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  },
};
