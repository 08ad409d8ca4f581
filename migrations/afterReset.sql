-- Runs as the root user after `graphile-migrate reset` (and for the shadow database).
revoke all on database :DATABASE_NAME from public;
grant connect on database :DATABASE_NAME to :DATABASE_OWNER, :DATABASE_WORKER, :DATABASE_APP, :DATABASE_API;
grant all on database :DATABASE_NAME to :DATABASE_OWNER;
