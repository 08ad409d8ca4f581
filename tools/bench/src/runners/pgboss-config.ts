/** pg-boss's benchmark queue and fetch batch size. */
export const QUEUE = 'bench';
export const BATCH_SIZE = 50;
