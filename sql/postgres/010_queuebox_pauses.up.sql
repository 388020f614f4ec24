-- QueueBox paused destinations and sources (postgres, up), rendered from the TypeORM migration's statements.

CREATE TABLE "queuebox_outbox_pauses" (
  component text NOT NULL CHECK (component IN ('outbox', 'inbox')),
  name text NOT NULL,
  reason text,
  paused_by text,
  paused_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (component, name)
);
