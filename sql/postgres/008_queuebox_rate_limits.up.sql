-- QueueBox rate limit buckets (postgres, up), rendered from the TypeORM migration's statements.

CREATE TABLE "queuebox_outbox_rate_limits" (
  destination text PRIMARY KEY,
  tokens double precision NOT NULL,
  granted integer NOT NULL DEFAULT 0,
  refilled_at timestamptz NOT NULL
);
