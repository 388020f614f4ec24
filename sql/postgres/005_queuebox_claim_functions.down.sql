-- QueueBox claim functions (moved to 006) (postgres, down), rendered from the TypeORM migration's statements.

-- Nothing to do: the version that shipped this migration wrote the PostgreSQL claim functions here; they now
-- come with migration 006 (instances), whose claims record the claiming instance. Kept so the numbers stay.
