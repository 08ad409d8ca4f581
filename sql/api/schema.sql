-- api: the functions applications call for requests that span domains. Each is a
-- security definer wrapper over a domain's kickoff; apps get usage on this schema only.

create schema if not exists api;
revoke all on schema api from public;
