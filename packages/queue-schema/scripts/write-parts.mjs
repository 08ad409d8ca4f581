// The package's SQL: the repository's committed history (migrations/committed/) cut into
// the core and the business domains (src/parts.ts), written into ./migrations/parts at
// build time so that the packed package migrates a database without the repository.
import { fileURLToPath } from 'node:url';
import { writeParts } from '../dist/parts.js';

writeParts(fileURLToPath(new URL('../migrations/parts/', import.meta.url)));
