-- QueueBox schema (mssql, down), rendered from the TypeORM migration's statements.

DROP TABLE IF EXISTS [queuebox_inbox];
GO

DROP TABLE IF EXISTS [queuebox_outbox];
GO
