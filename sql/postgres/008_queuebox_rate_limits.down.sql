-- QueueBox rate limit buckets (postgres, down), rendered from the TypeORM migration's statements.

DROP TABLE IF EXISTS "queuebox_outbox_rate_limits";
