-- QueueBox operations indexes (mssql, down), rendered from the TypeORM migration's statements.

DROP INDEX IF EXISTS [queuebox_inbox_dead_idx] ON [queuebox_inbox];
GO

DROP INDEX IF EXISTS [queuebox_inbox_processed_idx] ON [queuebox_inbox];
GO

DROP INDEX IF EXISTS [queuebox_outbox_dead_idx] ON [queuebox_outbox];
GO

DROP INDEX IF EXISTS [queuebox_outbox_sent_idx] ON [queuebox_outbox];
GO
