-- internal: the function runner and its allowlist. Idempotent.

create schema if not exists internal;
revoke all on schema internal from public;

-- Functions internal.run_function may call. One row per schema.function taking exactly
-- one jsonb argument and returning jsonb; add rows with internal.register_runnable_function.
create table if not exists internal.runnable_function (
  function_schema text not null,
  function_name   text not null,
  registered_at   timestamptz not null default now(),
  primary key (function_schema, function_name)
);
comment on table internal.runnable_function is
  'Allowlist of internal.run_function. Register with internal.register_runnable_function(regprocedure).';
