-- QueueBox schema (postgres, down), rendered from the TypeORM migration's statements.

DROP TABLE IF EXISTS "queuebox_inbox";

DROP TABLE IF EXISTS "queuebox_outbox";
