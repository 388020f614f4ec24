-- QueueBox schema (postgres, up), rendered from the TypeORM migration's statements.

DO $$
BEGIN
  IF current_setting('server_version_num')::int < 140000 THEN
    RAISE EXCEPTION '%', format('QueueBox supports PostgreSQL 14 and later; this server runs PostgreSQL %s. Upgrade the server (14 to 18 are tested). See node_modules/queuebox/docs/operations.md.', current_setting('server_version'));
  END IF;
END $$;

CREATE TABLE "queuebox_outbox" (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  message_id uuid NOT NULL,
  destination text NOT NULL,
  "key" text,
  payload jsonb NOT NULL,
  headers jsonb NOT NULL DEFAULT '{}'::jsonb,
  state text NOT NULL DEFAULT 'pending',
  attempts integer NOT NULL DEFAULT 0,
  available_at timestamptz NOT NULL DEFAULT now(),
  claim_token uuid,
  claimed_at timestamptz,
  lease_expires_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  sent_at timestamptz,
  last_error text,
  CONSTRAINT "queuebox_outbox_message_id_key" UNIQUE (message_id),
  CONSTRAINT "queuebox_outbox_state_check" CHECK (state IN ('pending', 'processing', 'sent', 'dead'))
);

CREATE INDEX "queuebox_outbox_claim_idx" ON "queuebox_outbox" (available_at, id) WHERE state = 'pending';

CREATE INDEX "queuebox_outbox_key_idx" ON "queuebox_outbox" ("key", id) WHERE state IN ('pending', 'processing') AND "key" IS NOT NULL;

CREATE UNIQUE INDEX "queuebox_outbox_key_in_flight_idx" ON "queuebox_outbox" ("key") WHERE state = 'processing' AND "key" IS NOT NULL;

CREATE INDEX "queuebox_outbox_lease_idx" ON "queuebox_outbox" (lease_expires_at) WHERE state = 'processing';

CREATE TABLE "queuebox_inbox" (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  source text NOT NULL,
  idempotency_key text NOT NULL,
  aggregate_id text,
  payload jsonb NOT NULL,
  headers jsonb NOT NULL DEFAULT '{}'::jsonb,
  state text NOT NULL DEFAULT 'pending',
  attempts integer NOT NULL DEFAULT 0,
  available_at timestamptz NOT NULL DEFAULT now(),
  claim_token uuid,
  claimed_at timestamptz,
  lease_expires_at timestamptz,
  received_at timestamptz NOT NULL DEFAULT now(),
  processed_at timestamptz,
  last_error text,
  CONSTRAINT "queuebox_inbox_source_idempotency_key_key" UNIQUE (source, idempotency_key),
  CONSTRAINT "queuebox_inbox_state_check" CHECK (state IN ('pending', 'processing', 'processed', 'dead'))
);

CREATE INDEX "queuebox_inbox_claim_idx" ON "queuebox_inbox" (source, available_at, id) WHERE state = 'pending';

CREATE INDEX "queuebox_inbox_aggregate_idx" ON "queuebox_inbox" (source, aggregate_id, id) WHERE state IN ('pending', 'processing') AND aggregate_id IS NOT NULL;

CREATE UNIQUE INDEX "queuebox_inbox_aggregate_in_flight_idx" ON "queuebox_inbox" (source, aggregate_id) WHERE state = 'processing' AND aggregate_id IS NOT NULL;

CREATE INDEX "queuebox_inbox_lease_idx" ON "queuebox_inbox" (source, lease_expires_at) WHERE state = 'processing';
