-- QueueBox key collation (postgres, up), rendered from the TypeORM migration's statements.

-- Nothing to do on PostgreSQL: text columns under the database's default (deterministic) collation
-- compare equal only when their bytes are equal. The file keeps the migrations numbered alike in both dialects.
