-- QueueBox claim function plans, PostgreSQL only (mssql, down), rendered from the TypeORM migration's statements.

-- Nothing to do on SQL Server: its claims are statements QueueBox sends, with no functions to rewrite. The file
-- keeps the migrations numbered alike in both dialects.
