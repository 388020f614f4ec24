-- QueueBox claim functions that plan with their indexes whatever the table held (postgres, down), rendered from the TypeORM migration's statements.

ALTER FUNCTION "queuebox_outbox_claim"(integer, bigint, uuid) RESET enable_seqscan;

ALTER FUNCTION "queuebox_inbox_relay_claim"(integer, bigint, text[], uuid) RESET enable_seqscan;

ALTER FUNCTION "queuebox_inbox_pull_claim"(integer, bigint, text, uuid) RESET enable_seqscan;
