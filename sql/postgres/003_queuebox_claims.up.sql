-- QueueBox claims indexes (postgres, up), rendered from the TypeORM migration's statements.

CREATE INDEX "queuebox_outbox_unkeyed_claim_idx" ON "queuebox_outbox" (available_at, id) WHERE state = 'pending' AND "key" IS NULL;

CREATE INDEX "queuebox_inbox_unkeyed_claim_idx" ON "queuebox_inbox" (source, available_at, id) WHERE state = 'pending' AND aggregate_id IS NULL;
