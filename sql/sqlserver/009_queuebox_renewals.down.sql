-- QueueBox lease renewal times and heartbeat counts (mssql, down), rendered from the TypeORM migration's statements.

ALTER TABLE [queuebox_instances] DROP CONSTRAINT [queuebox_instances_beats_default];
GO

ALTER TABLE [queuebox_instances] DROP COLUMN [beats];
GO

ALTER TABLE [queuebox_inbox] DROP COLUMN [renewed_at];
GO

ALTER TABLE [queuebox_outbox] DROP COLUMN [renewed_at];
GO
