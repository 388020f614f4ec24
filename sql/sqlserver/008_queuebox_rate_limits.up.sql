-- QueueBox rate limit buckets (mssql, up), rendered from the TypeORM migration's statements.

CREATE TABLE [queuebox_outbox_rate_limits] (
  [destination] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
  [tokens] FLOAT NOT NULL,
  [granted] INT NOT NULL CONSTRAINT [queuebox_outbox_rate_limits_granted_default] DEFAULT 0,
  [refilled_at] DATETIME2 NOT NULL,
  CONSTRAINT [queuebox_outbox_rate_limits_pkey] PRIMARY KEY CLUSTERED ([destination])
);
GO
