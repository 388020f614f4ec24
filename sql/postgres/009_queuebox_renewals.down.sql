-- QueueBox lease renewal times and heartbeat counts (postgres, down), rendered from the TypeORM migration's statements.

ALTER TABLE "queuebox_instances" DROP COLUMN IF EXISTS beats;

ALTER TABLE "queuebox_inbox" DROP COLUMN IF EXISTS renewed_at;

ALTER TABLE "queuebox_outbox" DROP COLUMN IF EXISTS renewed_at;
