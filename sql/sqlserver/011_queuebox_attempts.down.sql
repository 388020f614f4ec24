-- QueueBox attempt history and dead-letter fingerprints (mssql, down), rendered from the TypeORM migration's statements.

DROP TABLE IF EXISTS [queuebox_inbox_attempts];
GO

DROP TABLE IF EXISTS [queuebox_outbox_attempts];
GO

ALTER TABLE [queuebox_inbox] DROP COLUMN [fingerprint];
GO

ALTER TABLE [queuebox_outbox] DROP COLUMN [fingerprint];
GO
