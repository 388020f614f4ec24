-- QueueBox claim indexes (postgres, down), rendered from the TypeORM migration's statements.

DROP INDEX IF EXISTS "queuebox_inbox_unkeyed_claim_idx";

DROP INDEX IF EXISTS "queuebox_outbox_unkeyed_claim_idx";
