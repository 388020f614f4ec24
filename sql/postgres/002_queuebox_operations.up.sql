-- QueueBox operations indexes (postgres, up), rendered from the TypeORM migration's statements.

CREATE INDEX "queuebox_outbox_sent_idx" ON "queuebox_outbox" (sent_at) WHERE state = 'sent';

CREATE INDEX "queuebox_outbox_dead_idx" ON "queuebox_outbox" (destination, id) WHERE state = 'dead';

CREATE INDEX "queuebox_inbox_processed_idx" ON "queuebox_inbox" (processed_at) WHERE state = 'processed';

CREATE INDEX "queuebox_inbox_dead_idx" ON "queuebox_inbox" (source, id) WHERE state = 'dead';
