-- QueueBox instances, claim owners and claim functions (postgres, down), rendered from the TypeORM migration's statements.

DROP FUNCTION IF EXISTS "queuebox_inbox_pull_claim"(integer, bigint, text, uuid);

DROP FUNCTION IF EXISTS "queuebox_inbox_relay_claim"(integer, bigint, text[], uuid);

DROP FUNCTION IF EXISTS "queuebox_outbox_claim"(integer, bigint, uuid);

ALTER TABLE "queuebox_inbox" DROP COLUMN IF EXISTS claimed_by;

ALTER TABLE "queuebox_outbox" DROP COLUMN IF EXISTS claimed_by;

DROP TABLE IF EXISTS "queuebox_instances";
