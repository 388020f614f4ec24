-- QueueBox key collation (mssql, up), rendered from the TypeORM migration's statements.

SET ANSI_NULLS ON;
GO

SET QUOTED_IDENTIFIER ON;
GO

DECLARE @key_columns TABLE ([object_id] INT NOT NULL, [column_id] INT NOT NULL, [name] SYSNAME NOT NULL);
INSERT INTO @key_columns ([object_id], [column_id], [name])
SELECT c.[object_id], c.[column_id], c.[name] FROM sys.columns AS c
WHERE (c.[object_id] = OBJECT_ID(N'[queuebox_outbox]') AND c.[name] IN (N'destination', N'key'))
   OR (c.[object_id] = OBJECT_ID(N'[queuebox_inbox]') AND c.[name] IN (N'source', N'idempotency_key', N'aggregate_id'));
DECLARE @blocking NVARCHAR(MAX) = STUFF((
  SELECT N', ' + d.[what] FROM (
    SELECT N'statistics ' + QUOTENAME(s.[name]) + N' on ' + QUOTENAME(OBJECT_SCHEMA_NAME(c.[object_id])) + N'.' + QUOTENAME(OBJECT_NAME(c.[object_id])) + N'.' + QUOTENAME(c.[name]) AS [what]
    FROM sys.stats AS s
    INNER JOIN sys.stats_columns AS sc ON sc.[object_id] = s.[object_id] AND sc.[stats_id] = s.[stats_id]
    INNER JOIN @key_columns AS c ON c.[object_id] = sc.[object_id] AND c.[column_id] = sc.[column_id]
    WHERE s.[user_created] = 1
    UNION
    SELECT N'index ' + QUOTENAME(i.[name]) + N' on ' + QUOTENAME(OBJECT_SCHEMA_NAME(c.[object_id])) + N'.' + QUOTENAME(OBJECT_NAME(c.[object_id])) + N'.' + QUOTENAME(c.[name])
    FROM sys.indexes AS i
    INNER JOIN @key_columns AS c ON c.[object_id] = i.[object_id]
    WHERE i.[type] > 0 AND i.[name] NOT IN (N'queuebox_outbox_claim_idx', N'queuebox_outbox_key_idx', N'queuebox_outbox_key_in_flight_idx', N'queuebox_outbox_dead_idx', N'queuebox_outbox_unkeyed_claim_idx', N'queuebox_inbox_claim_idx', N'queuebox_inbox_aggregate_idx', N'queuebox_inbox_aggregate_in_flight_idx', N'queuebox_inbox_lease_idx', N'queuebox_inbox_dead_idx', N'queuebox_inbox_unkeyed_claim_idx', N'queuebox_inbox_source_idempotency_key_key')
      AND (EXISTS (SELECT 1 FROM sys.index_columns AS ic
             WHERE ic.[object_id] = i.[object_id] AND ic.[index_id] = i.[index_id] AND ic.[column_id] = c.[column_id])
           OR (i.[has_filter] = 1 AND i.[filter_definition] LIKE N'%[[]' + c.[name] + N']%'))
    UNION
    SELECT N'foreign key ' + QUOTENAME(OBJECT_NAME(f.[constraint_object_id])) + N' on ' + QUOTENAME(OBJECT_SCHEMA_NAME(c.[object_id])) + N'.' + QUOTENAME(OBJECT_NAME(c.[object_id])) + N'.' + QUOTENAME(c.[name])
    FROM sys.foreign_key_columns AS f
    INNER JOIN @key_columns AS c
      ON (c.[object_id] = f.[parent_object_id] AND c.[column_id] = f.[parent_column_id])
      OR (c.[object_id] = f.[referenced_object_id] AND c.[column_id] = f.[referenced_column_id])
    UNION
    SELECT CASE WHEN x.[referencing_minor_id] > 0
             THEN N'computed column ' + QUOTENAME(COL_NAME(x.[referencing_id], x.[referencing_minor_id]))
             ELSE QUOTENAME(OBJECT_SCHEMA_NAME(x.[referencing_id])) + N'.' + QUOTENAME(OBJECT_NAME(x.[referencing_id])) END
           + N' on ' + QUOTENAME(OBJECT_SCHEMA_NAME(c.[object_id])) + N'.' + QUOTENAME(OBJECT_NAME(c.[object_id])) + N'.' + QUOTENAME(c.[name])
    FROM sys.sql_expression_dependencies AS x
    INNER JOIN @key_columns AS c ON c.[object_id] = x.[referenced_id] AND c.[column_id] = x.[referenced_minor_id]
    WHERE NOT (x.[referencing_id] = c.[object_id] AND x.[referencing_minor_id] = 0)
    UNION
    SELECT N'full-text index on ' + QUOTENAME(OBJECT_SCHEMA_NAME(c.[object_id])) + N'.' + QUOTENAME(OBJECT_NAME(c.[object_id])) + N'.' + QUOTENAME(c.[name])
    FROM sys.fulltext_index_columns AS ft
    INNER JOIN @key_columns AS c ON c.[object_id] = ft.[object_id] AND c.[column_id] = ft.[column_id]
  ) AS d
  ORDER BY d.[what]
  FOR XML PATH(''), TYPE).value(N'.', N'NVARCHAR(MAX)'), 1, 2, N'');
IF @blocking IS NOT NULL
BEGIN
  RAISERROR(N'QueueBox migration 004 (up) changed nothing: %s depend on the key columns, and SQL Server refuses to change the collation of a column they depend on. Drop them (create them again after the migration), then run it again. See docs/sqlserver.md.', 16, 1, @blocking);
  SET NOEXEC ON;
END;
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

ALTER TABLE [queuebox_outbox] ALTER COLUMN [destination] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL;
GO

ALTER TABLE [queuebox_outbox] ALTER COLUMN [key] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NULL;
GO

DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE INDEX [queuebox_outbox_claim_idx] ON [queuebox_outbox] ([available_at], [id]) INCLUDE ([key]) WHERE [state] = N''pending''' + @online);
GO

DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE INDEX [queuebox_outbox_key_idx] ON [queuebox_outbox] ([key], [id]) INCLUDE ([state]) WHERE [state] IN (N''pending'', N''processing'') AND [key] IS NOT NULL' + @online);
GO

DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE UNIQUE INDEX [queuebox_outbox_key_in_flight_idx] ON [queuebox_outbox] ([key]) WHERE [state] = N''processing'' AND [key] IS NOT NULL' + @online);
GO

DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE INDEX [queuebox_outbox_dead_idx] ON [queuebox_outbox] ([destination], [id]) WHERE [state] = N''dead''' + @online);
GO

DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE INDEX [queuebox_outbox_unkeyed_claim_idx] ON [queuebox_outbox] ([available_at], [id]) WHERE [state] = N''pending'' AND [key] IS NULL' + @online);
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

ALTER TABLE [queuebox_inbox] ALTER COLUMN [source] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL;
GO

ALTER TABLE [queuebox_inbox] ALTER COLUMN [idempotency_key] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL;
GO

ALTER TABLE [queuebox_inbox] ALTER COLUMN [aggregate_id] NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NULL;
GO

ALTER TABLE [queuebox_inbox] ADD CONSTRAINT [queuebox_inbox_source_idempotency_key_key] UNIQUE ([source], [idempotency_key]);
GO

DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE INDEX [queuebox_inbox_claim_idx] ON [queuebox_inbox] ([source], [available_at], [id]) INCLUDE ([aggregate_id]) WHERE [state] = N''pending''' + @online);
GO

DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE INDEX [queuebox_inbox_aggregate_idx] ON [queuebox_inbox] ([source], [aggregate_id], [id]) INCLUDE ([state]) WHERE [state] IN (N''pending'', N''processing'') AND [aggregate_id] IS NOT NULL' + @online);
GO

DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE UNIQUE INDEX [queuebox_inbox_aggregate_in_flight_idx] ON [queuebox_inbox] ([source], [aggregate_id]) WHERE [state] = N''processing'' AND [aggregate_id] IS NOT NULL' + @online);
GO

DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE INDEX [queuebox_inbox_lease_idx] ON [queuebox_inbox] ([source], [lease_expires_at]) INCLUDE ([aggregate_id]) WHERE [state] = N''processing''' + @online);
GO

DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE INDEX [queuebox_inbox_dead_idx] ON [queuebox_inbox] ([source], [id]) WHERE [state] = N''dead''' + @online);
GO

DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'CREATE INDEX [queuebox_inbox_unkeyed_claim_idx] ON [queuebox_inbox] ([source], [available_at], [id]) WHERE [state] = N''pending'' AND [aggregate_id] IS NULL' + @online);
GO

SET NOEXEC OFF;
GO
