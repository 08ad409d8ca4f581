// Preloaded into a worker process by a test (NODE_OPTIONS=--import): the asynchronous
// write to stdout of the line that says the worker stopped takes a second, as a write
// waiting for a busy machine's thread pool may; every other write is as it was. (The
// logger's stream calls fs.write of the module object patched here.)
import fs from 'node:fs';

const write = fs.write;
fs.write = function (fd, data, ...rest) {
  if (fd === 1 && String(data).includes('"event":"worker_stopped"')) {
    setTimeout(() => write.call(fs, fd, data, ...rest), 1000);
    return;
  }
  return write.call(fs, fd, data, ...rest);
};
