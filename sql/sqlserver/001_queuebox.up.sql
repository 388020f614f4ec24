-- QueueBox schema (mssql, up), rendered from the TypeORM migration's statements.

SET ANSI_NULLS ON;
GO

SET QUOTED_IDENTIFIER ON;
GO

CREATE TABLE [queuebox_outbox] (
  [id] BIGINT IDENTITY(1, 1) NOT NULL,
  [message_id] UNIQUEIDENTIFIER NOT NULL,
  [destination] NVARCHAR(255) NOT NULL,
  [key] NVARCHAR(255) NULL,
  [payload] NVARCHAR(MAX) NOT NULL,
  [headers] NVARCHAR(MAX) NOT NULL CONSTRAINT [queuebox_outbox_headers_default] DEFAULT N'{}',
  [state] NVARCHAR(16) NOT NULL CONSTRAINT [queuebox_outbox_state_default] DEFAULT N'pending',
  [attempts] INT NOT NULL CONSTRAINT [queuebox_outbox_attempts_default] DEFAULT 0,
  [available_at] DATETIME2 NOT NULL CONSTRAINT [queuebox_outbox_available_at_default] DEFAULT SYSUTCDATETIME(),
  [claim_token] UNIQUEIDENTIFIER NULL,
  [claimed_at] DATETIME2 NULL,
  [lease_expires_at] DATETIME2 NULL,
  [created_at] DATETIME2 NOT NULL CONSTRAINT [queuebox_outbox_created_at_default] DEFAULT SYSUTCDATETIME(),
  [sent_at] DATETIME2 NULL,
  [last_error] NVARCHAR(MAX) NULL,
  CONSTRAINT [queuebox_outbox_pkey] PRIMARY KEY CLUSTERED ([id]),
  CONSTRAINT [queuebox_outbox_message_id_key] UNIQUE ([message_id]),
  CONSTRAINT [queuebox_outbox_state_check] CHECK ([state] IN (N'pending', N'processing', N'sent', N'dead')),
  CONSTRAINT [queuebox_outbox_payload_check] CHECK (ISJSON(N'[' + [payload] + N']') = 1),
  CONSTRAINT [queuebox_outbox_headers_check] CHECK (ISJSON([headers]) = 1)
);
GO

ALTER TABLE [queuebox_outbox] SET (LOCK_ESCALATION = DISABLE);
GO

CREATE INDEX [queuebox_outbox_claim_idx] ON [queuebox_outbox] ([available_at], [id]) INCLUDE ([key]) WHERE [state] = N'pending';
GO

CREATE INDEX [queuebox_outbox_key_idx] ON [queuebox_outbox] ([key], [id]) INCLUDE ([state]) WHERE [state] IN (N'pending', N'processing') AND [key] IS NOT NULL;
GO

CREATE UNIQUE INDEX [queuebox_outbox_key_in_flight_idx] ON [queuebox_outbox] ([key]) WHERE [state] = N'processing' AND [key] IS NOT NULL;
GO

CREATE INDEX [queuebox_outbox_lease_idx] ON [queuebox_outbox] ([lease_expires_at]) WHERE [state] = N'processing';
GO

CREATE TABLE [queuebox_inbox] (
  [id] BIGINT IDENTITY(1, 1) NOT NULL,
  [source] NVARCHAR(255) NOT NULL,
  [idempotency_key] NVARCHAR(255) NOT NULL,
  [aggregate_id] NVARCHAR(255) NULL,
  [payload] NVARCHAR(MAX) NOT NULL,
  [headers] NVARCHAR(MAX) NOT NULL CONSTRAINT [queuebox_inbox_headers_default] DEFAULT N'{}',
  [state] NVARCHAR(16) NOT NULL CONSTRAINT [queuebox_inbox_state_default] DEFAULT N'pending',
  [attempts] INT NOT NULL CONSTRAINT [queuebox_inbox_attempts_default] DEFAULT 0,
  [available_at] DATETIME2 NOT NULL CONSTRAINT [queuebox_inbox_available_at_default] DEFAULT SYSUTCDATETIME(),
  [claim_token] UNIQUEIDENTIFIER NULL,
  [claimed_at] DATETIME2 NULL,
  [lease_expires_at] DATETIME2 NULL,
  [received_at] DATETIME2 NOT NULL CONSTRAINT [queuebox_inbox_received_at_default] DEFAULT SYSUTCDATETIME(),
  [processed_at] DATETIME2 NULL,
  [last_error] NVARCHAR(MAX) NULL,
  CONSTRAINT [queuebox_inbox_pkey] PRIMARY KEY CLUSTERED ([id]),
  CONSTRAINT [queuebox_inbox_source_idempotency_key_key] UNIQUE ([source], [idempotency_key]),
  CONSTRAINT [queuebox_inbox_state_check] CHECK ([state] IN (N'pending', N'processing', N'processed', N'dead')),
  CONSTRAINT [queuebox_inbox_payload_check] CHECK (ISJSON(N'[' + [payload] + N']') = 1),
  CONSTRAINT [queuebox_inbox_headers_check] CHECK (ISJSON([headers]) = 1)
);
GO

ALTER TABLE [queuebox_inbox] SET (LOCK_ESCALATION = DISABLE);
GO

CREATE INDEX [queuebox_inbox_claim_idx] ON [queuebox_inbox] ([source], [available_at], [id]) INCLUDE ([aggregate_id]) WHERE [state] = N'pending';
GO

CREATE INDEX [queuebox_inbox_aggregate_idx] ON [queuebox_inbox] ([source], [aggregate_id], [id]) INCLUDE ([state]) WHERE [state] IN (N'pending', N'processing') AND [aggregate_id] IS NOT NULL;
GO

CREATE UNIQUE INDEX [queuebox_inbox_aggregate_in_flight_idx] ON [queuebox_inbox] ([source], [aggregate_id]) WHERE [state] = N'processing' AND [aggregate_id] IS NOT NULL;
GO

CREATE INDEX [queuebox_inbox_lease_idx] ON [queuebox_inbox] ([source], [lease_expires_at]) INCLUDE ([aggregate_id]) WHERE [state] = N'processing';
GO
