-- The accounts processes use the shared helpers in sql/internal/process_support.sql;
-- these per-schema copies existed before it and are dropped.
drop function if exists accounts.id_from_payload(jsonb, text);
drop function if exists accounts.validation_failure(text);
drop function if exists accounts.assert_read_committed(text);
