-- File metadata: append-only documents, the latest is current.

-- The current metadata document of a file ({} when it has none).
create or replace function files.current_file_metadata(_file_id bigint)
  returns jsonb
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce(
    (select m.metadata from files.file_metadata m
      where m.file_id = _file_id order by m.file_metadata_id desc limit 1),
    '{}'::jsonb)
$$;

create or replace function files.is_file_deleted(_file_id bigint)
  returns boolean
  language sql stable
  set search_path = pg_catalog, pg_temp
as $$
  select coalesce((files.current_file_metadata(_file_id) ->> 'deleted')::boolean, false)
$$;

-- Marks a file logically deleted: appends the current document with "deleted": true and
-- "deleted_at". Idempotent: a file already marked is left as it is. Locks the file row
-- (FOR NO KEY UPDATE) so two concurrent calls append one row, not two.
create or replace function files.mark_file_deleted(_file_id bigint)
  returns void
  language plpgsql volatile
  set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from files.file f where f.file_id = _file_id for no key update;
  if not found then
    raise exception 'file % not found', _file_id using errcode = '23503';
  end if;
  if not files.is_file_deleted(_file_id) then
    insert into files.file_metadata (file_id, metadata)
    values (_file_id, files.current_file_metadata(_file_id)
                      || jsonb_build_object('deleted', true, 'deleted_at', now()));
  end if;
end;
$$;
