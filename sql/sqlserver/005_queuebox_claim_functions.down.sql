-- QueueBox claim functions of this version (mssql, down), rendered from the TypeORM migration's statements.

-- Nothing to do on SQL Server: its claims are statements sent by QueueBox, not functions stored in the
-- database. The file keeps the migrations numbered alike in both dialects.
