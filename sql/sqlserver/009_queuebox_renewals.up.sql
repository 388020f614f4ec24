-- QueueBox lease renewal times and heartbeat counts (mssql, up), rendered from the TypeORM migration's statements.

ALTER TABLE [queuebox_outbox] ADD [renewed_at] DATETIME2 NULL;
GO

ALTER TABLE [queuebox_inbox] ADD [renewed_at] DATETIME2 NULL;
GO

ALTER TABLE [queuebox_instances] ADD [beats] BIGINT NOT NULL CONSTRAINT [queuebox_instances_beats_default] DEFAULT 0;
GO
