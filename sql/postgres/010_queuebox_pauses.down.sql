-- QueueBox paused destinations and sources (postgres, down), rendered from the TypeORM migration's statements.

DROP TABLE IF EXISTS "queuebox_outbox_pauses";
