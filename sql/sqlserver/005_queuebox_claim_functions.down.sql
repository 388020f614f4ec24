-- QueueBox claim functions, PostgreSQL only (mssql, down), rendered from the TypeORM migration's statements.

-- Nothing to do on SQL Server, which has no claim functions: on PostgreSQL the version that shipped this
-- migration wrote them here (they now come with migration 006). The file keeps the migrations numbered alike.
