-- QueueBox claims indexes (mssql, down), rendered from the TypeORM migration's statements.

DROP INDEX IF EXISTS [queuebox_inbox_unkeyed_claim_idx] ON [queuebox_inbox];
GO

DROP INDEX IF EXISTS [queuebox_outbox_unkeyed_claim_idx] ON [queuebox_outbox];
GO
