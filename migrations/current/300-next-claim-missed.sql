set local lock_timeout = '5s';

-- queues.next_claim_in_ms takes _missed_ms: a task that fell due between a claim's clock
-- and the question that follows it is answered 0, not left to the next poll.
drop function if exists queues.next_claim_in_ms(text[]);

--!include queues/claim.sql
