-- QueueBox claims indexes (mssql, up), rendered from the TypeORM migration's statements.

SET ANSI_NULLS ON;
GO

SET QUOTED_IDENTIFIER ON;
GO

CREATE INDEX [queuebox_outbox_unkeyed_claim_idx] ON [queuebox_outbox] ([available_at], [id]) WHERE [state] = N'pending' AND [key] IS NULL;
GO

CREATE INDEX [queuebox_inbox_unkeyed_claim_idx] ON [queuebox_inbox] ([source], [available_at], [id]) WHERE [state] = N'pending' AND [aggregate_id] IS NULL;
GO
