-- QueueBox claim functions that plan with their indexes whatever the table held (postgres, up), rendered from the TypeORM migration's statements.

ALTER FUNCTION "queuebox_outbox_claim"(integer, bigint, uuid) SET enable_seqscan = off;

ALTER FUNCTION "queuebox_inbox_relay_claim"(integer, bigint, text[], uuid) SET enable_seqscan = off;

ALTER FUNCTION "queuebox_inbox_pull_claim"(integer, bigint, text, uuid) SET enable_seqscan = off;
