-- QueueBox operations indexes (mssql, up), rendered from the TypeORM migration's statements.

SET ANSI_NULLS ON;
GO

SET QUOTED_IDENTIFIER ON;
GO

CREATE INDEX [queuebox_outbox_sent_idx] ON [queuebox_outbox] ([sent_at]) WHERE [state] = N'sent';
GO

CREATE INDEX [queuebox_outbox_dead_idx] ON [queuebox_outbox] ([destination], [id]) WHERE [state] = N'dead';
GO

CREATE INDEX [queuebox_inbox_processed_idx] ON [queuebox_inbox] ([processed_at]) WHERE [state] = N'processed';
GO

CREATE INDEX [queuebox_inbox_dead_idx] ON [queuebox_inbox] ([source], [id]) WHERE [state] = N'dead';
GO
