-- QueueBox lease renewal times and heartbeat counts (postgres, up), rendered from the TypeORM migration's statements.

ALTER TABLE "queuebox_outbox" ADD COLUMN renewed_at timestamptz;

ALTER TABLE "queuebox_inbox" ADD COLUMN renewed_at timestamptz;

ALTER TABLE "queuebox_instances" ADD COLUMN beats bigint NOT NULL DEFAULT 0;
