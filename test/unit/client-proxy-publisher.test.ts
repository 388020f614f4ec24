import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ClientNats } from '@nestjs/microservices';
import { NEVER, Observable, of, throwError } from 'rxjs';
import { decodeHeaderValue, encodeHeaderValue } from '../../lib/common/header-value';
import { PublishError, QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { ClientProxyPublisher } from '../../lib/publishers/client-proxy.publisher';
import type { OutboundMessage } from '../../lib/types/messages';
import { KEY_HEADER } from '../../lib/wire-headers';

const message: OutboundMessage = {
  id: '1',
  messageId: '0b8e0f1e-58f7-4f6e-9a47-0c2b7a1b6a01',
  destination: 'billing',
  key: 'k1',
  payload: { total: 5 },
  headers: { 'x-tenant': 'acme', 'X-Message-Id': '0b8e0f1e-58f7-4f6e-9a47-0c2b7a1b6a01' },
  attempt: 1,
  createdAt: new Date(),
};

/** A transport without headers (like TCP or Redis): records what was emitted. */
function fakeClient(result: () => Observable<unknown>) {
  const emitted: [unknown, unknown][] = [];
  return {
    emitted,
    emit(pattern: unknown, data: unknown) {
      emitted.push([pattern, data]);
      return result();
    },
  };
}

describe('ClientProxyPublisher without a broker', () => {
  it('emits the envelope on a transport without headers, with the destination or a configured pattern', async () => {
    const client = fakeClient(() => of(undefined));
    const publisher = new ClientProxyPublisher(client);
    assert.equal(publisher.transport, 'other');
    await publisher.publish(message, new AbortController().signal);
    await new ClientProxyPublisher(client, { pattern: (m) => ({ cmd: m.destination }) }).publish(message, new AbortController().signal);
    assert.deepEqual(client.emitted, [
      ['billing', { messageId: message.messageId, key: 'k1', headers: message.headers, payload: { total: 5 } }],
      [{ cmd: 'billing' }, { messageId: message.messageId, key: 'k1', headers: message.headers, payload: { total: 5 } }],
    ]);
  });

  it('sends X-QueueBox-Key in the wire form HTTP uses (a key with a line break goes on NATS too); the envelope keeps the raw key', async () => {
    const records: { headers?: { get(name: string): string } }[] = [];
    class RecordingNats extends ClientNats {
      override emit(_pattern: unknown, data: unknown) {
        records.push(data as (typeof records)[number]);
        return of(undefined) as never;
      }
      override unwrap<T>(): T {
        return { flush: async () => undefined } as T;
      }
    }
    const nats = new ClientProxyPublisher(new RecordingNats({ servers: ['nats://127.0.0.1:1'] }));
    assert.equal(nats.transport, 'nats');
    for (const key of ['order-7', 'клиент-1', 'line\nfeed']) {
      await nats.publish({ ...message, key }, new AbortController().signal);
      const sent = records.at(-1)?.headers?.get(KEY_HEADER) ?? '';
      assert.equal(sent, encodeHeaderValue(key));
      assert.equal(decodeHeaderValue(sent), key);
    }
    assert.equal(records[0].headers?.get(KEY_HEADER), 'order-7', 'a visible-ASCII key is unchanged');
    const client = fakeClient(() => of(undefined));
    await new ClientProxyPublisher(client).publish({ ...message, key: 'клиент-1' }, new AbortController().signal);
    assert.equal((client.emitted[0][1] as { key: string }).key, 'клиент-1');
  });

  it("sends the bare payload on a transport without headers with envelope: 'never'", async () => {
    const client = fakeClient(() => of(undefined));
    await new ClientProxyPublisher(client, { envelope: 'never' }).publish(message, new AbortController().signal);
    assert.deepEqual(client.emitted, [['billing', { total: 5 }]]);
  });

  it('waits for the emit to complete, and stops waiting when the signal aborts', async () => {
    const publisher = new ClientProxyPublisher(fakeClient(() => NEVER));
    const controller = new AbortController();
    const publishing = publisher.publish(message, controller.signal);
    const reason = new Error('publishTimeout');
    setTimeout(() => controller.abort(reason), 20);
    await assert.rejects(publishing, (error) => error === reason);
  });

  it('turns a failed emit into a retryable PublishError', async () => {
    const publisher = new ClientProxyPublisher(fakeClient(() => throwError(() => new Error('channel closed'))));
    await assert.rejects(
      publisher.publish(message, new AbortController().signal),
      (error: unknown) => error instanceof PublishError && /other emit to "billing" failed: Error: channel closed/.test(error.message),
    );
  });

  it('validates its arguments', () => {
    assert.throws(() => new ClientProxyPublisher({} as never), QueueBoxConfigError);
    assert.throws(
      () =>
        new ClientProxyPublisher(
          fakeClient(() => NEVER),
          { envelope: 'sometimes' as never },
        ),
      QueueBoxConfigError,
    );
    assert.throws(() => ClientProxyPublisher.for(42 as never), QueueBoxConfigError);
    assert.equal(ClientProxyPublisher.for('BILLING').name, 'ClientProxyPublisher(BILLING)');
  });
});
