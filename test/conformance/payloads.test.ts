import assert from 'node:assert/strict';
import { it } from 'node:test';
import { toOutboxRows } from '../../lib/outbox/outbox-rows';

import { conformanceSuite, LONG } from './suite';

conformanceSuite('payload text', (c) => {
  const { enqueue, receive, claimOutbox } = c;

  // Quotes and backslashes inside strings, and in keys: a T-SQL engine whose OPENJSON ... WITH
  // returned JSON-escaped strings stored them escaped once more.
  const payload = {
    'we"ird\\key': 'a "quoted" \\ back\\slash \\"both\\" \\\\ two \\n not a newline\nreal newline \t tab zäh 💡 </script>',
    nested: { list: ['"', '\\', '\\"', '\\\\"'], empty: '' },
  };
  const headers = { 'X-Quote': 'say "hi" \\ bye' };

  it('an enqueued payload and its headers round-trip exactly (the outbox insert reads them through OPENJSON ... WITH on SQL Server)', async () => {
    const [{ id }] = await enqueue({ key: 'k', payload, headers });
    const [claim] = await claimOutbox(1);
    assert.equal(claim.id, id);
    assert.deepEqual(claim.message.payload, payload);
    assert.equal(claim.message.headers['X-Quote'], headers['X-Quote']);
    if (c.harness.name === 'SQL Server') {
      // SQL Server keeps the payload's text as written.
      assert.equal(await c.db.payloadText('outbox', id), JSON.stringify(payload));
    } else {
      assert.deepEqual(JSON.parse(await c.db.payloadText('outbox', id)), payload);
    }
  });

  it('a received payload round-trips exactly, and so does its forward to the outbox', async () => {
    const { id } = await receive({ idempotencyKey: 'p1', source: 'ledger', aggregateId: 'a', payloadJson: JSON.stringify(payload) });
    const [claim] = await c.take.pull.claimBatch({ source: 'ledger', limit: 1, leaseMs: LONG });
    assert.equal(claim.id, id);
    assert.deepEqual(claim.message.payload, payload);
    const [forwarded] = await c.db.dataSource.transaction((manager) =>
      c.dialect.outboxInsert({ manager, rows: toOutboxRows([{ destination: 'd', payload: claim.message.payload, headers }], 1_000_000) }),
    );
    const [out] = await claimOutbox(1);
    assert.equal(out.id, forwarded.id);
    assert.deepEqual(out.message.payload, payload);
  });
});
