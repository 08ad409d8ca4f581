-- A channel process (email, SMS, file deletion) ends as soon as its attempt succeeds:
-- the success handler enqueues a supervisor run due at once, instead of leaving the end to
-- the run its backoff scheduled (5 s or more later).
set local lock_timeout = '5s';

--!include internal/channel_process.sql
