-- QueueBox instances, claim owners and claim functions (postgres, up), rendered from the TypeORM migration's statements.

CREATE TABLE "queuebox_instances" (
  id uuid PRIMARY KEY,
  host text NOT NULL,
  pid integer NOT NULL,
  data_source text NOT NULL,
  version text NOT NULL,
  dead_after_ms integer NOT NULL,
  started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

ALTER TABLE "queuebox_outbox" ADD COLUMN claimed_by uuid;

ALTER TABLE "queuebox_inbox" ADD COLUMN claimed_by uuid;

DROP FUNCTION IF EXISTS "queuebox_inbox_pull_claim"(integer, bigint, text);

DROP FUNCTION IF EXISTS "queuebox_inbox_relay_claim"(integer, bigint, text[]);

DROP FUNCTION IF EXISTS "queuebox_outbox_claim"(integer, bigint);

CREATE OR REPLACE FUNCTION "queuebox_outbox_claim"(p_limit integer, p_lease_ms bigint, p_instance uuid) RETURNS SETOF "queuebox_outbox"
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $queuebox$
DECLARE
  candidate_ids bigint[];
BEGIN
  IF NOT ((SELECT e."key" FROM "queuebox_outbox" e WHERE e.state IN ('pending', 'processing') AND e."key" IS NOT NULL ORDER BY e."key" LIMIT 1) IS NOT NULL) THEN
    RETURN QUERY WITH candidates AS MATERIALIZED (
  SELECT o.id FROM "queuebox_outbox" o
  WHERE o.state = 'pending' AND o."key" IS NULL AND o.available_at <= clock_timestamp()
  ORDER BY o.available_at, o.id
  LIMIT p_limit
  FOR UPDATE OF o SKIP LOCKED
)
UPDATE "queuebox_outbox" o
SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = clock_timestamp(),
    lease_expires_at = clock_timestamp() + make_interval(secs => p_lease_ms::double precision / 1000), attempts = o.attempts + 1, claimed_by = p_instance::uuid
WHERE o.id = ANY (ARRAY(SELECT id FROM candidates))
RETURNING o.*;
    RETURN;
  END IF;
  IF p_limit > 100 THEN
    PERFORM pg_advisory_xact_lock(hashtextextended('queuebox_outbox_claim_queuebox_outbox', 0));
    candidate_ids := ARRAY(WITH RECURSIVE near AS (
  SELECT s.id FROM (
    SELECT o.id, o."key" FROM "queuebox_outbox" o
    WHERE o.state = 'pending' AND o.available_at <= clock_timestamp()
    ORDER BY o.available_at, o.id
    LIMIT 500
  ) s
  WHERE (s."key" IS NULL OR (
      (SELECT e.id FROM "queuebox_outbox" e
        WHERE e.state IN ('pending', 'processing') AND e."key" >= s."key" AND (e."key", e.id) < (s."key", s.id)
        ORDER BY e."key" DESC, e.id DESC LIMIT 1) IS NULL
      AND NOT EXISTS (SELECT 1 FROM "queuebox_outbox" e WHERE e."key" = s."key" AND e.state = 'processing')))
  LIMIT p_limit
), heads AS (
  (SELECT o."key", o.id, o.state, o.available_at FROM "queuebox_outbox" o
   WHERE o.state IN ('pending', 'processing') AND o."key" IS NOT NULL AND (SELECT count(*) FROM near) < p_limit
   ORDER BY o."key", o.id
   LIMIT 1)
  UNION ALL
  SELECT next.* FROM heads h
  CROSS JOIN LATERAL (
    SELECT o."key", o.id, o.state, o.available_at FROM "queuebox_outbox" o
    WHERE o.state IN ('pending', 'processing') AND o."key" > h."key"
    ORDER BY o."key", o.id
    LIMIT 1
  ) next
), far AS (
  (SELECT h.id FROM heads h
   WHERE h.state = 'pending' AND h.available_at <= clock_timestamp()
     AND NOT EXISTS (SELECT 1 FROM "queuebox_outbox" e WHERE e."key" = h."key" AND e.state = 'processing')
   ORDER BY h.available_at, h.id
   LIMIT p_limit)
  UNION ALL
  (SELECT o.id FROM "queuebox_outbox" o
   WHERE o.state = 'pending' AND o."key" IS NULL AND o.available_at <= clock_timestamp() AND (SELECT count(*) FROM near) < p_limit
   ORDER BY o.available_at, o.id
   LIMIT p_limit)
)
SELECT id FROM near UNION ALL SELECT id FROM far);
  ELSE
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('queuebox_outbox_claim_queuebox_outbox', 0));
    candidate_ids := ARRAY(WITH RECURSIVE near AS (
  SELECT s.id FROM (
  SELECT s.id, s."key" FROM (
    SELECT o.id, o."key" FROM "queuebox_outbox" o
    WHERE o.state = 'pending' AND o.available_at <= clock_timestamp()
    ORDER BY o.available_at, o.id
    LIMIT GREATEST(500, 4 * p_limit)
  ) s
  WHERE (s."key" IS NULL OR (
      (SELECT e.id FROM "queuebox_outbox" e
        WHERE e.state IN ('pending', 'processing') AND e."key" >= s."key" AND (e."key", e.id) < (s."key", s.id)
        ORDER BY e."key" DESC, e.id DESC LIMIT 1) IS NULL
      AND NOT EXISTS (SELECT 1 FROM "queuebox_outbox" e WHERE e."key" = s."key" AND e.state = 'processing')))
  OFFSET 0
  ) s
  WHERE s."key" IS NULL OR pg_try_advisory_xact_lock(hashtext('queuebox_outbox_claim_queuebox_outbox'), hashtext(s."key"))
  LIMIT p_limit
), heads AS (
  (SELECT o."key", o.id, o.state, o.available_at FROM "queuebox_outbox" o
   WHERE o.state IN ('pending', 'processing') AND o."key" IS NOT NULL AND (SELECT count(*) FROM near) < p_limit
   ORDER BY o."key", o.id
   LIMIT 1)
  UNION ALL
  SELECT next.* FROM heads h
  CROSS JOIN LATERAL (
    SELECT o."key", o.id, o.state, o.available_at FROM "queuebox_outbox" o
    WHERE o.state IN ('pending', 'processing') AND o."key" > h."key"
    ORDER BY o."key", o.id
    LIMIT 1
  ) next
), far AS (
  (SELECT x.id FROM (SELECT h.id, h."key" FROM heads h
   WHERE h.state = 'pending' AND h.available_at <= clock_timestamp()
     AND NOT EXISTS (SELECT 1 FROM "queuebox_outbox" e WHERE e."key" = h."key" AND e.state = 'processing')
   ORDER BY h.available_at, h.id) x
   WHERE pg_try_advisory_xact_lock(hashtext('queuebox_outbox_claim_queuebox_outbox'), hashtext(x."key"))
   LIMIT p_limit - (SELECT count(*) FROM near))
  UNION ALL
  (SELECT o.id FROM "queuebox_outbox" o
   WHERE o.state = 'pending' AND o."key" IS NULL AND o.available_at <= clock_timestamp() AND (SELECT count(*) FROM near) < p_limit
   ORDER BY o.available_at, o.id
   LIMIT p_limit)
)
SELECT id FROM near UNION ALL SELECT id FROM far);
  END IF;
  RETURN QUERY WITH candidates AS MATERIALIZED (
  SELECT o.id FROM "queuebox_outbox" o
  WHERE o.id = ANY (candidate_ids) AND o.state = 'pending' AND o.available_at <= clock_timestamp()
    AND (o."key" IS NULL OR NOT EXISTS (SELECT 1 FROM "queuebox_outbox" e WHERE e."key" = o."key" AND e.state = 'processing'))
  ORDER BY o.available_at, o.id
  LIMIT p_limit
  FOR UPDATE OF o SKIP LOCKED
)
UPDATE "queuebox_outbox" o
SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = clock_timestamp(),
    lease_expires_at = clock_timestamp() + make_interval(secs => p_lease_ms::double precision / 1000), attempts = o.attempts + 1, claimed_by = p_instance::uuid
WHERE o.id = ANY (ARRAY(SELECT id FROM candidates))
RETURNING o.*;
END
$queuebox$;

CREATE OR REPLACE FUNCTION "queuebox_inbox_relay_claim"(p_limit integer, p_lease_ms bigint, p_sources text[], p_instance uuid) RETURNS SETOF "queuebox_inbox"
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $queuebox$
DECLARE
  candidate_ids bigint[];
BEGIN
  IF NOT EXISTS (SELECT 1 FROM unnest(p_sources::text[]) AS s(source)
    WHERE (SELECT e.aggregate_id FROM "queuebox_inbox" e
      WHERE e.source = s.source AND e.state IN ('pending', 'processing') AND e.aggregate_id IS NOT NULL
      ORDER BY e.aggregate_id LIMIT 1) IS NOT NULL) THEN
    RETURN QUERY WITH candidates AS MATERIALIZED (
  SELECT u.id FROM unnest(p_sources::text[]) AS s(source)
  CROSS JOIN LATERAL (
    SELECT i.id, i.available_at FROM "queuebox_inbox" i
    WHERE i.source = s.source AND i.state = 'pending' AND i.aggregate_id IS NULL AND i.available_at <= clock_timestamp()
    ORDER BY i.available_at, i.id
    LIMIT p_limit
    FOR UPDATE OF i SKIP LOCKED
  ) u
  ORDER BY u.available_at, u.id
  LIMIT p_limit
)
UPDATE "queuebox_inbox" i
SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = clock_timestamp(),
    lease_expires_at = clock_timestamp() + make_interval(secs => p_lease_ms::double precision / 1000), attempts = i.attempts + 1, claimed_by = p_instance::uuid
WHERE i.id = ANY (ARRAY(SELECT id FROM candidates))
RETURNING i.*;
    RETURN;
  END IF;
  IF p_limit > 100 THEN
    PERFORM pg_advisory_xact_lock(hashtextextended('queuebox_inbox_claim_queuebox_inbox', 0));
    candidate_ids := ARRAY(WITH RECURSIVE near AS (
  SELECT head.id FROM unnest(p_sources::text[]) AS s(source)
  CROSS JOIN LATERAL (
    SELECT w.id FROM (
      SELECT i.id, i.source, i.aggregate_id FROM "queuebox_inbox" i
      WHERE i.source = s.source AND i.state = 'pending' AND i.available_at <= clock_timestamp()
      ORDER BY i.available_at, i.id
      LIMIT 500
    ) w
    WHERE (w.aggregate_id IS NULL OR (
      (SELECT e.id FROM "queuebox_inbox" e
        WHERE e.source = w.source AND e.state IN ('pending', 'processing') AND e.aggregate_id >= w.aggregate_id
          AND (e.aggregate_id, e.id) < (w.aggregate_id, w.id)
        ORDER BY e.aggregate_id DESC, e.id DESC LIMIT 1) IS NULL
      AND NOT EXISTS (SELECT 1 FROM "queuebox_inbox" e WHERE e.source = w.source AND e.aggregate_id = w.aggregate_id
        AND e.state = 'processing' AND e.id <> w.id)))
    LIMIT p_limit
  ) head
), heads AS (
  SELECT first.* FROM unnest(p_sources::text[]) AS s(source)
  CROSS JOIN LATERAL (
    SELECT i.source, i.aggregate_id, i.id, i.state, i.available_at FROM "queuebox_inbox" i
    WHERE i.source = s.source AND i.state IN ('pending', 'processing') AND i.aggregate_id IS NOT NULL
    ORDER BY i.aggregate_id, i.id
    LIMIT 1
  ) first
  WHERE (SELECT count(*) FROM near) < p_limit
  UNION ALL
  SELECT next.* FROM heads h
  CROSS JOIN LATERAL (
    SELECT i.source, i.aggregate_id, i.id, i.state, i.available_at FROM "queuebox_inbox" i
    WHERE i.source = h.source AND i.state IN ('pending', 'processing') AND i.aggregate_id > h.aggregate_id
    ORDER BY i.aggregate_id, i.id
    LIMIT 1
  ) next
), far AS (
  (SELECT h.id FROM heads h
   WHERE h.state = 'pending' AND h.available_at <= clock_timestamp()
     AND NOT EXISTS (SELECT 1 FROM "queuebox_inbox" e WHERE e.source = h.source AND e.aggregate_id = h.aggregate_id AND e.state = 'processing')
   ORDER BY h.available_at, h.id
   LIMIT p_limit)
  UNION ALL
  (SELECT unkeyed.id FROM unnest(p_sources::text[]) AS s(source)
   CROSS JOIN LATERAL (
     SELECT i.id, i.available_at FROM "queuebox_inbox" i
     WHERE i.source = s.source AND i.state = 'pending' AND i.aggregate_id IS NULL AND i.available_at <= clock_timestamp()
     ORDER BY i.available_at, i.id
     LIMIT p_limit
   ) unkeyed
   WHERE (SELECT count(*) FROM near) < p_limit
   ORDER BY unkeyed.available_at, unkeyed.id
   LIMIT p_limit)
)
SELECT id FROM near UNION ALL SELECT id FROM far);
  ELSE
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('queuebox_inbox_claim_queuebox_inbox', 0));
    candidate_ids := ARRAY(WITH RECURSIVE near AS (
  SELECT head.id FROM unnest(p_sources::text[]) AS s(source)
  CROSS JOIN LATERAL (
    SELECT w.id FROM (
  SELECT w.id, w.source, w.aggregate_id FROM (
      SELECT i.id, i.source, i.aggregate_id FROM "queuebox_inbox" i
      WHERE i.source = s.source AND i.state = 'pending' AND i.available_at <= clock_timestamp()
      ORDER BY i.available_at, i.id
      LIMIT GREATEST(500, 4 * p_limit)
    ) w
    WHERE (w.aggregate_id IS NULL OR (
      (SELECT e.id FROM "queuebox_inbox" e
        WHERE e.source = w.source AND e.state IN ('pending', 'processing') AND e.aggregate_id >= w.aggregate_id
          AND (e.aggregate_id, e.id) < (w.aggregate_id, w.id)
        ORDER BY e.aggregate_id DESC, e.id DESC LIMIT 1) IS NULL
      AND NOT EXISTS (SELECT 1 FROM "queuebox_inbox" e WHERE e.source = w.source AND e.aggregate_id = w.aggregate_id
        AND e.state = 'processing' AND e.id <> w.id)))
  OFFSET 0
  ) w
  WHERE w.aggregate_id IS NULL OR pg_try_advisory_xact_lock(hashtext('queuebox_inbox_claim_queuebox_inbox'), hashtext(w.source) # hashtext(w.aggregate_id))
    LIMIT p_limit
  ) head
), heads AS (
  SELECT first.* FROM unnest(p_sources::text[]) AS s(source)
  CROSS JOIN LATERAL (
    SELECT i.source, i.aggregate_id, i.id, i.state, i.available_at FROM "queuebox_inbox" i
    WHERE i.source = s.source AND i.state IN ('pending', 'processing') AND i.aggregate_id IS NOT NULL
    ORDER BY i.aggregate_id, i.id
    LIMIT 1
  ) first
  WHERE (SELECT count(*) FROM near) < p_limit
  UNION ALL
  SELECT next.* FROM heads h
  CROSS JOIN LATERAL (
    SELECT i.source, i.aggregate_id, i.id, i.state, i.available_at FROM "queuebox_inbox" i
    WHERE i.source = h.source AND i.state IN ('pending', 'processing') AND i.aggregate_id > h.aggregate_id
    ORDER BY i.aggregate_id, i.id
    LIMIT 1
  ) next
), far AS (
  (SELECT x.id FROM (SELECT h.id, h.source, h.aggregate_id FROM heads h
   WHERE h.state = 'pending' AND h.available_at <= clock_timestamp()
     AND NOT EXISTS (SELECT 1 FROM "queuebox_inbox" e WHERE e.source = h.source AND e.aggregate_id = h.aggregate_id AND e.state = 'processing')
   ORDER BY h.available_at, h.id) x
   WHERE pg_try_advisory_xact_lock(hashtext('queuebox_inbox_claim_queuebox_inbox'), hashtext(x.source) # hashtext(x.aggregate_id))
   LIMIT p_limit - (SELECT count(*) FROM near))
  UNION ALL
  (SELECT unkeyed.id FROM unnest(p_sources::text[]) AS s(source)
   CROSS JOIN LATERAL (
     SELECT i.id, i.available_at FROM "queuebox_inbox" i
     WHERE i.source = s.source AND i.state = 'pending' AND i.aggregate_id IS NULL AND i.available_at <= clock_timestamp()
     ORDER BY i.available_at, i.id
     LIMIT p_limit
   ) unkeyed
   WHERE (SELECT count(*) FROM near) < p_limit
   ORDER BY unkeyed.available_at, unkeyed.id
   LIMIT p_limit)
)
SELECT id FROM near UNION ALL SELECT id FROM far);
  END IF;
  RETURN QUERY WITH candidates AS MATERIALIZED (
  SELECT i.id FROM "queuebox_inbox" i
  WHERE i.id = ANY (candidate_ids) AND i.state = 'pending' AND i.available_at <= clock_timestamp()
    AND (i.aggregate_id IS NULL OR NOT EXISTS (SELECT 1 FROM "queuebox_inbox" e WHERE e.source = i.source AND e.aggregate_id = i.aggregate_id
        AND e.state = 'processing' AND e.id <> i.id))
  ORDER BY i.available_at, i.id
  LIMIT p_limit
  FOR UPDATE OF i SKIP LOCKED
)
UPDATE "queuebox_inbox" i
SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = clock_timestamp(),
    lease_expires_at = clock_timestamp() + make_interval(secs => p_lease_ms::double precision / 1000), attempts = i.attempts + 1, claimed_by = p_instance::uuid
WHERE i.id = ANY (ARRAY(SELECT id FROM candidates))
RETURNING i.*;
END
$queuebox$;

CREATE OR REPLACE FUNCTION "queuebox_inbox_pull_claim"(p_limit integer, p_lease_ms bigint, p_source text, p_instance uuid) RETURNS SETOF "queuebox_inbox"
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan AS $queuebox$
DECLARE
  candidate_ids bigint[];
BEGIN
  IF NOT EXISTS (SELECT 1 FROM unnest(ARRAY[p_source::text]) AS s(source)
    WHERE (SELECT e.aggregate_id FROM "queuebox_inbox" e
      WHERE e.source = s.source AND e.state IN ('pending', 'processing') AND e.aggregate_id IS NOT NULL
      ORDER BY e.aggregate_id LIMIT 1) IS NOT NULL) THEN
    RETURN QUERY WITH expired AS MATERIALIZED (
  SELECT i.id FROM "queuebox_inbox" i
  WHERE i.source = p_source AND i.state = 'processing' AND i.aggregate_id IS NULL AND i.lease_expires_at <= clock_timestamp()
  ORDER BY i.lease_expires_at
  LIMIT p_limit
  FOR UPDATE OF i SKIP LOCKED
), pending AS MATERIALIZED (
  SELECT i.id, i.available_at FROM "queuebox_inbox" i
    WHERE i.source = p_source AND i.state = 'pending' AND i.aggregate_id IS NULL AND i.available_at <= clock_timestamp()
    ORDER BY i.available_at, i.id
    LIMIT p_limit - (SELECT count(*) FROM expired)
    FOR UPDATE OF i SKIP LOCKED
)
UPDATE "queuebox_inbox" i
SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = clock_timestamp(),
    lease_expires_at = clock_timestamp() + make_interval(secs => p_lease_ms::double precision / 1000), attempts = i.attempts + 1, claimed_by = p_instance::uuid
WHERE i.id = ANY (ARRAY(SELECT id FROM expired UNION ALL SELECT id FROM pending))
RETURNING i.*;
    RETURN;
  END IF;
  IF p_limit > 100 THEN
    PERFORM pg_advisory_xact_lock(hashtextextended('queuebox_pull_claim_queuebox_inbox:' || p_source, 0));
    candidate_ids := ARRAY(WITH RECURSIVE near AS (
  SELECT head.id FROM unnest(ARRAY[p_source::text]) AS s(source)
  CROSS JOIN LATERAL (
    SELECT w.id FROM (
      SELECT i.id, i.source, i.aggregate_id FROM "queuebox_inbox" i
      WHERE i.source = s.source AND i.state = 'pending' AND i.available_at <= clock_timestamp()
      ORDER BY i.available_at, i.id
      LIMIT 500
    ) w
    WHERE (w.aggregate_id IS NULL OR (
      (SELECT e.id FROM "queuebox_inbox" e
        WHERE e.source = w.source AND e.state IN ('pending', 'processing') AND e.aggregate_id >= w.aggregate_id
          AND (e.aggregate_id, e.id) < (w.aggregate_id, w.id)
        ORDER BY e.aggregate_id DESC, e.id DESC LIMIT 1) IS NULL
      AND NOT EXISTS (SELECT 1 FROM "queuebox_inbox" e WHERE e.source = w.source AND e.aggregate_id = w.aggregate_id
        AND e.state = 'processing' AND e.id <> w.id)))
    LIMIT p_limit
  ) head
), heads AS (
  SELECT first.* FROM unnest(ARRAY[p_source::text]) AS s(source)
  CROSS JOIN LATERAL (
    SELECT i.source, i.aggregate_id, i.id, i.state, i.available_at FROM "queuebox_inbox" i
    WHERE i.source = s.source AND i.state IN ('pending', 'processing') AND i.aggregate_id IS NOT NULL
    ORDER BY i.aggregate_id, i.id
    LIMIT 1
  ) first
  WHERE (SELECT count(*) FROM near) < p_limit
  UNION ALL
  SELECT next.* FROM heads h
  CROSS JOIN LATERAL (
    SELECT i.source, i.aggregate_id, i.id, i.state, i.available_at FROM "queuebox_inbox" i
    WHERE i.source = h.source AND i.state IN ('pending', 'processing') AND i.aggregate_id > h.aggregate_id
    ORDER BY i.aggregate_id, i.id
    LIMIT 1
  ) next
), far AS (
  (SELECT h.id FROM heads h
   WHERE h.state = 'pending' AND h.available_at <= clock_timestamp()
     AND NOT EXISTS (SELECT 1 FROM "queuebox_inbox" e WHERE e.source = h.source AND e.aggregate_id = h.aggregate_id AND e.state = 'processing')
   ORDER BY h.available_at, h.id
   LIMIT p_limit)
  UNION ALL
  (SELECT unkeyed.id FROM unnest(ARRAY[p_source::text]) AS s(source)
   CROSS JOIN LATERAL (
     SELECT i.id, i.available_at FROM "queuebox_inbox" i
     WHERE i.source = s.source AND i.state = 'pending' AND i.aggregate_id IS NULL AND i.available_at <= clock_timestamp()
     ORDER BY i.available_at, i.id
     LIMIT p_limit
   ) unkeyed
   WHERE (SELECT count(*) FROM near) < p_limit
   ORDER BY unkeyed.available_at, unkeyed.id
   LIMIT p_limit)
)
SELECT id FROM near UNION ALL SELECT id FROM far);
  ELSE
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('queuebox_pull_claim_queuebox_inbox:' || p_source, 0));
    candidate_ids := ARRAY(WITH RECURSIVE near AS (
  SELECT head.id FROM unnest(ARRAY[p_source::text]) AS s(source)
  CROSS JOIN LATERAL (
    SELECT w.id FROM (
  SELECT w.id, w.source, w.aggregate_id FROM (
      SELECT i.id, i.source, i.aggregate_id FROM "queuebox_inbox" i
      WHERE i.source = s.source AND i.state = 'pending' AND i.available_at <= clock_timestamp()
      ORDER BY i.available_at, i.id
      LIMIT GREATEST(500, 4 * p_limit)
    ) w
    WHERE (w.aggregate_id IS NULL OR (
      (SELECT e.id FROM "queuebox_inbox" e
        WHERE e.source = w.source AND e.state IN ('pending', 'processing') AND e.aggregate_id >= w.aggregate_id
          AND (e.aggregate_id, e.id) < (w.aggregate_id, w.id)
        ORDER BY e.aggregate_id DESC, e.id DESC LIMIT 1) IS NULL
      AND NOT EXISTS (SELECT 1 FROM "queuebox_inbox" e WHERE e.source = w.source AND e.aggregate_id = w.aggregate_id
        AND e.state = 'processing' AND e.id <> w.id)))
  OFFSET 0
  ) w
  WHERE w.aggregate_id IS NULL OR pg_try_advisory_xact_lock(hashtext('queuebox_pull_claim_queuebox_inbox:' || p_source), hashtext(w.aggregate_id))
    LIMIT p_limit
  ) head
), heads AS (
  SELECT first.* FROM unnest(ARRAY[p_source::text]) AS s(source)
  CROSS JOIN LATERAL (
    SELECT i.source, i.aggregate_id, i.id, i.state, i.available_at FROM "queuebox_inbox" i
    WHERE i.source = s.source AND i.state IN ('pending', 'processing') AND i.aggregate_id IS NOT NULL
    ORDER BY i.aggregate_id, i.id
    LIMIT 1
  ) first
  WHERE (SELECT count(*) FROM near) < p_limit
  UNION ALL
  SELECT next.* FROM heads h
  CROSS JOIN LATERAL (
    SELECT i.source, i.aggregate_id, i.id, i.state, i.available_at FROM "queuebox_inbox" i
    WHERE i.source = h.source AND i.state IN ('pending', 'processing') AND i.aggregate_id > h.aggregate_id
    ORDER BY i.aggregate_id, i.id
    LIMIT 1
  ) next
), far AS (
  (SELECT x.id FROM (SELECT h.id, h.source, h.aggregate_id FROM heads h
   WHERE h.state = 'pending' AND h.available_at <= clock_timestamp()
     AND NOT EXISTS (SELECT 1 FROM "queuebox_inbox" e WHERE e.source = h.source AND e.aggregate_id = h.aggregate_id AND e.state = 'processing')
   ORDER BY h.available_at, h.id) x
   WHERE pg_try_advisory_xact_lock(hashtext('queuebox_pull_claim_queuebox_inbox:' || p_source), hashtext(x.aggregate_id))
   LIMIT p_limit - (SELECT count(*) FROM near))
  UNION ALL
  (SELECT unkeyed.id FROM unnest(ARRAY[p_source::text]) AS s(source)
   CROSS JOIN LATERAL (
     SELECT i.id, i.available_at FROM "queuebox_inbox" i
     WHERE i.source = s.source AND i.state = 'pending' AND i.aggregate_id IS NULL AND i.available_at <= clock_timestamp()
     ORDER BY i.available_at, i.id
     LIMIT p_limit
   ) unkeyed
   WHERE (SELECT count(*) FROM near) < p_limit
   ORDER BY unkeyed.available_at, unkeyed.id
   LIMIT p_limit)
)
SELECT id FROM near UNION ALL SELECT id FROM far);
  END IF;
  RETURN QUERY WITH expired AS MATERIALIZED (
  SELECT i.id FROM "queuebox_inbox" i
  WHERE i.source = p_source AND i.state = 'processing' AND i.lease_expires_at <= clock_timestamp()
  ORDER BY i.lease_expires_at
  LIMIT p_limit
  FOR UPDATE OF i SKIP LOCKED
), pending AS MATERIALIZED (
  SELECT i.id FROM "queuebox_inbox" i
  WHERE i.id = ANY (candidate_ids) AND i.state = 'pending' AND i.available_at <= clock_timestamp()
    AND (i.aggregate_id IS NULL OR NOT EXISTS (SELECT 1 FROM "queuebox_inbox" e WHERE e.source = i.source AND e.aggregate_id = i.aggregate_id
        AND e.state = 'processing' AND e.id <> i.id))
  ORDER BY i.available_at, i.id
  LIMIT p_limit
  FOR UPDATE OF i SKIP LOCKED
), candidates AS MATERIALIZED (
  SELECT id FROM (SELECT id, 0 AS pass FROM expired UNION ALL SELECT id, 1 FROM pending) both_kinds ORDER BY pass LIMIT p_limit
)
UPDATE "queuebox_inbox" i
SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = clock_timestamp(),
    lease_expires_at = clock_timestamp() + make_interval(secs => p_lease_ms::double precision / 1000), attempts = i.attempts + 1, claimed_by = p_instance::uuid
WHERE i.id = ANY (ARRAY(SELECT id FROM candidates))
RETURNING i.*;
END
$queuebox$;
