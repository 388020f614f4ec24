-- QueueBox key collation (mssql, down), rendered from the TypeORM migration's statements.

SET ANSI_NULLS ON;
GO

SET QUOTED_IDENTIFIER ON;
GO

DROP INDEX IF EXISTS [queuebox_outbox_claim_idx] ON [queuebox_outbox];
GO

DROP INDEX IF EXISTS [queuebox_outbox_key_idx] ON [queuebox_outbox];
GO

DROP INDEX IF EXISTS [queuebox_outbox_key_in_flight_idx] ON [queuebox_outbox];
GO

DROP INDEX IF EXISTS [queuebox_outbox_dead_idx] ON [queuebox_outbox];
GO

DROP INDEX IF EXISTS [queuebox_outbox_unkeyed_claim_idx] ON [queuebox_outbox];
GO

ALTER TABLE [queuebox_outbox] ALTER COLUMN [destination] NVARCHAR(255) COLLATE DATABASE_DEFAULT NOT NULL;
GO

ALTER TABLE [queuebox_outbox] ALTER COLUMN [key] NVARCHAR(255) COLLATE DATABASE_DEFAULT NULL;
GO

CREATE INDEX [queuebox_outbox_claim_idx] ON [queuebox_outbox] ([available_at], [id]) INCLUDE ([key]) WHERE [state] = N'pending';
GO

CREATE INDEX [queuebox_outbox_key_idx] ON [queuebox_outbox] ([key], [id]) INCLUDE ([state]) WHERE [state] IN (N'pending', N'processing') AND [key] IS NOT NULL;
GO

CREATE UNIQUE INDEX [queuebox_outbox_key_in_flight_idx] ON [queuebox_outbox] ([key]) WHERE [state] = N'processing' AND [key] IS NOT NULL;
GO

CREATE INDEX [queuebox_outbox_dead_idx] ON [queuebox_outbox] ([destination], [id]) WHERE [state] = N'dead';
GO

CREATE INDEX [queuebox_outbox_unkeyed_claim_idx] ON [queuebox_outbox] ([available_at], [id]) WHERE [state] = N'pending' AND [key] IS NULL;
GO

DROP INDEX IF EXISTS [queuebox_inbox_claim_idx] ON [queuebox_inbox];
GO

DROP INDEX IF EXISTS [queuebox_inbox_aggregate_idx] ON [queuebox_inbox];
GO

DROP INDEX IF EXISTS [queuebox_inbox_aggregate_in_flight_idx] ON [queuebox_inbox];
GO

DROP INDEX IF EXISTS [queuebox_inbox_lease_idx] ON [queuebox_inbox];
GO

DROP INDEX IF EXISTS [queuebox_inbox_dead_idx] ON [queuebox_inbox];
GO

DROP INDEX IF EXISTS [queuebox_inbox_unkeyed_claim_idx] ON [queuebox_inbox];
GO

ALTER TABLE [queuebox_inbox] DROP CONSTRAINT [queuebox_inbox_source_idempotency_key_key];
GO

ALTER TABLE [queuebox_inbox] ALTER COLUMN [source] NVARCHAR(255) COLLATE DATABASE_DEFAULT NOT NULL;
GO

ALTER TABLE [queuebox_inbox] ALTER COLUMN [idempotency_key] NVARCHAR(255) COLLATE DATABASE_DEFAULT NOT NULL;
GO

ALTER TABLE [queuebox_inbox] ALTER COLUMN [aggregate_id] NVARCHAR(255) COLLATE DATABASE_DEFAULT NULL;
GO

ALTER TABLE [queuebox_inbox] ADD CONSTRAINT [queuebox_inbox_source_idempotency_key_key] UNIQUE ([source], [idempotency_key]);
GO

CREATE INDEX [queuebox_inbox_claim_idx] ON [queuebox_inbox] ([source], [available_at], [id]) INCLUDE ([aggregate_id]) WHERE [state] = N'pending';
GO

CREATE INDEX [queuebox_inbox_aggregate_idx] ON [queuebox_inbox] ([source], [aggregate_id], [id]) INCLUDE ([state]) WHERE [state] IN (N'pending', N'processing') AND [aggregate_id] IS NOT NULL;
GO

CREATE UNIQUE INDEX [queuebox_inbox_aggregate_in_flight_idx] ON [queuebox_inbox] ([source], [aggregate_id]) WHERE [state] = N'processing' AND [aggregate_id] IS NOT NULL;
GO

CREATE INDEX [queuebox_inbox_lease_idx] ON [queuebox_inbox] ([source], [lease_expires_at]) INCLUDE ([aggregate_id]) WHERE [state] = N'processing';
GO

CREATE INDEX [queuebox_inbox_dead_idx] ON [queuebox_inbox] ([source], [id]) WHERE [state] = N'dead';
GO

CREATE INDEX [queuebox_inbox_unkeyed_claim_idx] ON [queuebox_inbox] ([source], [available_at], [id]) WHERE [state] = N'pending' AND [aggregate_id] IS NULL;
GO
