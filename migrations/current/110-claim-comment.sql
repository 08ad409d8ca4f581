-- The claim's comment names the committed migration that made its expiry index.
set local lock_timeout = '5s';

--!include queues/claim.sql
