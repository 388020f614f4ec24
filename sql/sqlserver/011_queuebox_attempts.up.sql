-- QueueBox attempt history and dead-letter fingerprints (mssql, up), rendered from the TypeORM migration's statements.

ALTER TABLE [queuebox_outbox] ADD [fingerprint] NVARCHAR(512) COLLATE Latin1_General_100_BIN2 NULL;
GO

ALTER TABLE [queuebox_inbox] ADD [fingerprint] NVARCHAR(512) COLLATE Latin1_General_100_BIN2 NULL;
GO

CREATE TABLE [queuebox_outbox_attempts] (
  [row_id] BIGINT NOT NULL,
  [id] BIGINT IDENTITY(1,1) NOT NULL,
  [attempt] INT NOT NULL,
  [failed_at] DATETIME2 NOT NULL,
  [duration_ms] BIGINT NULL,
  [instance_id] UNIQUEIDENTIFIER NULL,
  [error_class] NVARCHAR(200) NOT NULL,
  [error] NVARCHAR(MAX) NOT NULL,
  [outcome] NVARCHAR(8) NOT NULL,
  CONSTRAINT [queuebox_outbox_attempts_pkey] PRIMARY KEY CLUSTERED ([row_id], [id]),
  CONSTRAINT [queuebox_outbox_attempts_outcome_check] CHECK ([outcome] IN (N'retry', N'dead'))
);
GO

CREATE TABLE [queuebox_inbox_attempts] (
  [row_id] BIGINT NOT NULL,
  [id] BIGINT IDENTITY(1,1) NOT NULL,
  [attempt] INT NOT NULL,
  [failed_at] DATETIME2 NOT NULL,
  [duration_ms] BIGINT NULL,
  [instance_id] UNIQUEIDENTIFIER NULL,
  [error_class] NVARCHAR(200) NOT NULL,
  [error] NVARCHAR(MAX) NOT NULL,
  [outcome] NVARCHAR(8) NOT NULL,
  CONSTRAINT [queuebox_inbox_attempts_pkey] PRIMARY KEY CLUSTERED ([row_id], [id]),
  CONSTRAINT [queuebox_inbox_attempts_outcome_check] CHECK ([outcome] IN (N'retry', N'dead'))
);
GO
