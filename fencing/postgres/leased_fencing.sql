-- leased fencing for PostgreSQL: apply once per database (psql -f leased_fencing.sql); applying
-- it again is harmless (every statement replaces or skips what exists).
--
-- A lease's fencing token is checked where the data lives, in the writer's own transaction, so the
-- check and the write commit or fail together. Two forms:
--
--   1. Per resource: SELECT leased.fence('orders', $token); then write, in one transaction.
--      leased.fence keeps the largest token seen per resource key (leased.fence_marks) and
--      refuses a smaller one. It holds the mark's row lock until the transaction ends, so the
--      fenced transactions of one resource commit one at a time, in token order: a paused holder
--      that resumes after a newer holder wrote is refused, and never writes between them.
--      (Under REPEATABLE READ or SERIALIZABLE, a call that waited for another writer of the
--      resource fails with 40001 instead: nothing is written; retry the transaction.)
--
--   2. Per row: a bigint column `fencing_token` guarded by leased.fencing_token_guard() (a
--      BEFORE INSERT OR UPDATE trigger): an INSERT or UPDATE whose fencing_token is smaller than
--      the row's is refused. An UPDATE that does not set the column keeps the row's token and
--      passes: fenced writers always set it. DELETE carries no token: fence deletes with form 1.
--
-- Errors (SQLSTATE, and the message's start):
--   LF001  "stale fencing token <t> for <resource or row>: the highest seen is <mark>": a newer
--          holder wrote; this one lost its lease. Do not retry the write with this token.
--   22023  (invalid_parameter_value) "<argument> must ..." : a token of 0, a negative or NULL
--          token, an empty or NULL resource key, a resource key over 1024 bytes.
--
-- Tokens are bigint. leased's tokens are floored at the grant's Unix time in microseconds (about
-- 1.8e15 in 2026) and fit a signed 64-bit integer; the largest bigint, 9223372036854775807, is
-- accepted, and stays the mark for good.
--
-- Durability: the marks are rows of this database, as durable as its data (WAL). Restoring a
-- backup restores old marks with old data, consistent with each other.

CREATE SCHEMA IF NOT EXISTS leased;

CREATE TABLE IF NOT EXISTS leased.fence_marks (
  resource text PRIMARY KEY,
  token bigint NOT NULL CHECK (token > 0),
  updated_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE leased.fence_marks IS
  'leased fencing: the largest fencing token accepted per resource key (leased.fence)';

-- Refuses `token` if a larger one was recorded for `resource`, else records it (a token equal to
-- the mark passes: one holder writes many times) and returns it. Call it inside the transaction
-- that writes the resource: the row lock it takes is held until that transaction ends.
CREATE OR REPLACE FUNCTION leased.fence(resource text, token bigint) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
  mark bigint;
BEGIN
  IF resource IS NULL OR resource = '' THEN
    RAISE EXCEPTION 'resource must be a non-empty resource key'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF octet_length(resource) > 1024 THEN
    RAISE EXCEPTION 'resource must be at most 1024 bytes, not %', octet_length(resource)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF token IS NULL OR token <= 0 THEN
    RAISE EXCEPTION 'token must be a fencing token from 1 to 9223372036854775807, not %',
      coalesce(token::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- ON CONFLICT DO UPDATE locks the existing row even when its WHERE is false, so a refused
  -- caller also waits for an uncommitted larger token to commit or roll back, and reads the
  -- outcome.
  INSERT INTO leased.fence_marks AS m (resource, token)
    VALUES (fence.resource, fence.token)
    ON CONFLICT ON CONSTRAINT fence_marks_pkey
      DO UPDATE SET token = excluded.token, updated_at = now()
      WHERE m.token <= excluded.token
    RETURNING m.token INTO mark;
  IF mark IS NULL THEN
    SELECT m.token INTO mark FROM leased.fence_marks m WHERE m.resource = fence.resource;
    RAISE EXCEPTION 'stale fencing token % for resource %: the highest seen is %',
      token, quote_literal(resource), mark
      USING ERRCODE = 'LF001',
            DETAIL = 'A newer holder of the lease wrote to this resource; this holder lost the lease.',
            HINT = 'Stop writing: acquire the lease again for a new token.';
  END IF;
  RETURN mark;
END;
$$;

-- The row-level form: CREATE TRIGGER <table>_fencing BEFORE INSERT OR UPDATE ON <table>
--   FOR EACH ROW EXECUTE FUNCTION leased.fencing_token_guard();
-- on a table with a column `fencing_token bigint NOT NULL`.
CREATE OR REPLACE FUNCTION leased.fencing_token_guard() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
  IF NEW.fencing_token IS NULL OR NEW.fencing_token <= 0 THEN
    RAISE EXCEPTION 'fencing_token must be a fencing token from 1 to 9223372036854775807, not % (table %)',
      coalesce(NEW.fencing_token::text, 'NULL'), TG_TABLE_NAME
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF TG_OP = 'UPDATE' AND NEW.fencing_token < OLD.fencing_token THEN
    RAISE EXCEPTION 'stale fencing token % for a row of %: the highest seen is %',
      NEW.fencing_token, TG_TABLE_NAME, OLD.fencing_token
      USING ERRCODE = 'LF001',
            DETAIL = 'A newer holder of the lease wrote this row; this holder lost the lease.',
            HINT = 'Stop writing: acquire the lease again for a new token.';
  END IF;
  RETURN NEW;
END;
$$;
