-- QueueBox claim functions with index-bound head probes (postgres, down), rendered from the TypeORM migration's statements.

-- Nothing to undo: the claim functions stay as this version wrote them (the earlier head probes could read
-- every finished row on each claim); migration 006's down drops them.
