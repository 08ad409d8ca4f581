import type { Scenario } from '../harness.js';
import { scenario as s1 } from './1-kill9.js';
import { scenario as s2 } from './2-pg-restart.js';
import { scenario as s3 } from './3-terminate.js';
import { scenario as s4 } from './4-stale-worker.js';
import { scenario as s5 } from './5-sigterm.js';
import { scenario as s6 } from './6-poison.js';
import { scenario as s7 } from './7-bad-input.js';
import { scenario as s8 } from './8-privileges.js';
import { scenario as s9 } from './9-soak.js';
import { scenario as s10 } from './10-history.js';
import { scenario as s11 } from './11-backend-crash.js';
import { scenario as s12 } from './12-failover.js';

export const SCENARIOS: Scenario[] = [s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12];
