-- QueueBox instances and claim owners (mssql, up), rendered from the TypeORM migration's statements.

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

SET LOCK_TIMEOUT 5000;
BEGIN TRY
  ALTER TABLE [queuebox_outbox] ADD [claimed_by] UNIQUEIDENTIFIER NULL;
END TRY
BEGIN CATCH
  IF ERROR_NUMBER() = 1222
    THROW 51006, N'QueueBox migration 006: ALTER TABLE [queuebox_outbox] ADD was not run: it waited 5 s for the transactions that use the table, holding up every statement behind it. Run it again when no long transaction uses the table (through TypeORM the whole migration was rolled back).', 1;
  THROW;
END CATCH;
GO

SET LOCK_TIMEOUT 5000;
BEGIN TRY
  ALTER TABLE [queuebox_inbox] ADD [claimed_by] UNIQUEIDENTIFIER NULL;
END TRY
BEGIN CATCH
  IF ERROR_NUMBER() = 1222
    THROW 51006, N'QueueBox migration 006: ALTER TABLE [queuebox_inbox] ADD was not run: it waited 5 s for the transactions that use the table, holding up every statement behind it. Run it again when no long transaction uses the table (through TypeORM the whole migration was rolled back).', 1;
  THROW;
END CATCH;
GO
