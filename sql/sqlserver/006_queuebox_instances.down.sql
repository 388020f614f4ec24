-- QueueBox instances and claim owners (mssql, down), rendered from the TypeORM migration's statements.

ALTER TABLE [queuebox_inbox] DROP COLUMN [claimed_by];
GO

ALTER TABLE [queuebox_outbox] DROP COLUMN [claimed_by];
GO

DROP TABLE [queuebox_instances];
GO
