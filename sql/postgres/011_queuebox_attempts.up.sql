-- QueueBox attempt history and dead-letter fingerprints (postgres, up), rendered from the TypeORM migration's statements.

ALTER TABLE "queuebox_outbox" ADD COLUMN fingerprint text;

ALTER TABLE "queuebox_inbox" ADD COLUMN fingerprint text;

CREATE TABLE "queuebox_outbox_attempts" (
  row_id bigint NOT NULL,
  id bigint GENERATED ALWAYS AS IDENTITY,
  attempt integer NOT NULL,
  failed_at timestamptz NOT NULL,
  duration_ms bigint,
  instance_id uuid,
  error_class text NOT NULL,
  error text NOT NULL,
  outcome text NOT NULL,
  CONSTRAINT "queuebox_outbox_attempts_pkey" PRIMARY KEY (row_id, id),
  CONSTRAINT "queuebox_outbox_attempts_outcome_check" CHECK (outcome IN ('retry', 'dead'))
);

CREATE TABLE "queuebox_inbox_attempts" (
  row_id bigint NOT NULL,
  id bigint GENERATED ALWAYS AS IDENTITY,
  attempt integer NOT NULL,
  failed_at timestamptz NOT NULL,
  duration_ms bigint,
  instance_id uuid,
  error_class text NOT NULL,
  error text NOT NULL,
  outcome text NOT NULL,
  CONSTRAINT "queuebox_inbox_attempts_pkey" PRIMARY KEY (row_id, id),
  CONSTRAINT "queuebox_inbox_attempts_outcome_check" CHECK (outcome IN ('retry', 'dead'))
);
