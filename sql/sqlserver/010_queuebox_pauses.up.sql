-- QueueBox paused destinations and sources (mssql, up), rendered from the TypeORM migration's statements.

CREATE TABLE [queuebox_outbox_pauses] (
  [component] NVARCHAR(16) NOT NULL CONSTRAINT [queuebox_outbox_pauses_component_check] CHECK ([component] IN (N'outbox', N'inbox')),
  [name] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL,
  [reason] NVARCHAR(2000) NULL,
  [paused_by] NVARCHAR(200) NULL,
  [paused_at] DATETIME2 NOT NULL CONSTRAINT [queuebox_outbox_pauses_paused_at_default] DEFAULT SYSUTCDATETIME(),
  CONSTRAINT [queuebox_outbox_pauses_pkey] PRIMARY KEY CLUSTERED ([component], [name])
);
GO
