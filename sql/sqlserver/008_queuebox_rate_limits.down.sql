-- QueueBox rate limit buckets (mssql, down), rendered from the TypeORM migration's statements.

DROP TABLE IF EXISTS [queuebox_outbox_rate_limits];
GO
