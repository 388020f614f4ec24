-- QueueBox paused destinations and sources (mssql, down), rendered from the TypeORM migration's statements.

DROP TABLE IF EXISTS [queuebox_outbox_pauses];
GO
