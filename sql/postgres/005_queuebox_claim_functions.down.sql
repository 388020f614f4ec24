-- QueueBox claim functions of this version (postgres, down), rendered from the TypeORM migration's statements.

-- Nothing to undo: migration 005 keeps the claim functions as this version wrote them (003's down drops them).
