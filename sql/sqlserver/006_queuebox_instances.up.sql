-- QueueBox instances, claim owners and claim functions (mssql, up), rendered from the TypeORM migration's statements.

CREATE TABLE [queuebox_instances] (
  [id] UNIQUEIDENTIFIER NOT NULL,
  [host] NVARCHAR(255) NOT NULL,
  [pid] INT NOT NULL,
  [data_source] NVARCHAR(255) NOT NULL,
  [version] NVARCHAR(64) NOT NULL,
  [dead_after_ms] INT NOT NULL,
  [started_at] DATETIME2 NOT NULL CONSTRAINT [queuebox_instances_started_at_default] DEFAULT SYSUTCDATETIME(),
  [heartbeat_at] DATETIME2 NOT NULL CONSTRAINT [queuebox_instances_heartbeat_at_default] DEFAULT SYSUTCDATETIME(),
  CONSTRAINT [queuebox_instances_pkey] PRIMARY KEY CLUSTERED ([id])
);
GO

ALTER TABLE [queuebox_outbox] ADD [claimed_by] UNIQUEIDENTIFIER NULL;
GO

ALTER TABLE [queuebox_inbox] ADD [claimed_by] UNIQUEIDENTIFIER NULL;
GO
