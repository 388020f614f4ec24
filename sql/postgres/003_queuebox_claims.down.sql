-- QueueBox claims indexes (postgres, down), rendered from the TypeORM migration's statements.

DROP FUNCTION IF EXISTS "queuebox_inbox_pull_claim"(integer, bigint, text);

DROP FUNCTION IF EXISTS "queuebox_inbox_relay_claim"(integer, bigint, text[]);

DROP FUNCTION IF EXISTS "queuebox_outbox_claim"(integer, bigint);

DROP INDEX IF EXISTS "queuebox_inbox_unkeyed_claim_idx";

DROP INDEX IF EXISTS "queuebox_outbox_unkeyed_claim_idx";
