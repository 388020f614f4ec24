-- QueueBox operations indexes (postgres, down), rendered from the TypeORM migration's statements.

DROP INDEX IF EXISTS "queuebox_inbox_dead_idx";

DROP INDEX IF EXISTS "queuebox_inbox_processed_idx";

DROP INDEX IF EXISTS "queuebox_outbox_dead_idx";

DROP INDEX IF EXISTS "queuebox_outbox_sent_idx";
