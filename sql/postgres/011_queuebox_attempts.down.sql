-- QueueBox attempt history and dead-letter fingerprints (postgres, down), rendered from the TypeORM migration's statements.

DROP TABLE IF EXISTS "queuebox_inbox_attempts";

DROP TABLE IF EXISTS "queuebox_outbox_attempts";

ALTER TABLE "queuebox_inbox" DROP COLUMN IF EXISTS fingerprint;

ALTER TABLE "queuebox_outbox" DROP COLUMN IF EXISTS fingerprint;
