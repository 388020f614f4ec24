import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import {
  type CallHandler,
  type CanActivate,
  type ExecutionContext,
  type INestApplication,
  Injectable,
  Module,
  type NestInterceptor,
} from '@nestjs/common';
import { APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { delay, type Observable } from 'rxjs';
import type { DataSource } from 'typeorm';
import { decodeHeaderValue, encodeHeaderValue } from '../../lib/common/header-value';
import { signatureHeaders, signRequest } from '../../lib/common/signature';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { InboxService } from '../../lib/inbox/inbox.service';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import type { QueueBoxModuleExtras } from '../../lib/module/queuebox.module-definition';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { HttpPublisher } from '../../lib/publishers/http.publisher';
import type { QueueBoxModuleOptions } from '../../lib/types/options';
import { IDEMPOTENCY_KEY_HEADER, SIGNATURE_HEADER } from '../../lib/wire-headers';
import { createTestApp } from '../support/app';
import { createTestDatabase, describeWithDatabase, eventually } from '../support/database';

const SECRET = 'a-test-secret-of-32-characters!!';

/** Holds the first answer to each message id for a while after storing it, so the sender times out and retries. */
@Injectable()
class SlowFirstAnswer implements NestInterceptor {
  private readonly seen = new Set<string>();
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const id = String(context.switchToHttp().getRequest().headers['x-message-id']);
    const first = !this.seen.has(id);
    this.seen.add(id);
    return first ? next.handle().pipe(delay(700)) : next.handle();
  }
}

@Injectable()
class DenyAll implements CanActivate {
  canActivate() {
    return false;
  }
}

async function startReceiverApp(
  url: string,
  options: QueueBoxModuleOptions & QueueBoxModuleExtras,
  slow = false,
  rawBody = true,
): Promise<INestApplication> {
  @Module({
    imports: [TypeOrmModule.forRoot({ type: 'postgres', url, logging: false }), QueueBoxModule.forRoot(options)],
    providers: slow ? [{ provide: APP_INTERCEPTOR, useClass: SlowFirstAnswer }] : [],
  })
  class ReceiverModule {}
  const app = await NestFactory.create(ReceiverModule, { rawBody, logger: false, abortOnError: false });
  await app.listen(0, '127.0.0.1');
  return app;
}

const inboxOptions = { inbox: { relay: { routes: { orders: () => [], payments: () => [] } } }, workers: false } as const;

describeWithDatabase('HTTP receiver', (db) => {
  let app: INestApplication;
  let base: string;

  before(async () => {
    app = await startReceiverApp(db.url, { ...inboxOptions, receiver: { secret: ['old-secret-0123456789', SECRET], maxBodyBytes: 2000 } });
    base = `${await app.getUrl()}/queuebox/inbox`;
  });
  after(async () => {
    await app?.close();
  });

  const post = (source: string, body: string, headers: Record<string, string> = {}, sign: string | false = SECRET, at?: number) =>
    fetch(`${base}/${source}`, {
      method: 'POST',
      body,
      headers: {
        'content-type': 'application/json',
        ...(sign ? signRequest(sign, { path: `/queuebox/inbox/${source}`, headers, body }, at) : {}),
        ...headers,
      },
    });
  /** Sends the headers as they are (a captured request, replayed with changes). */
  const send = (source: string, body: string, headers: Record<string, string>) =>
    fetch(`${base}/${source}`, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
  const messageOf = async (response: Response) => ((await response.json()) as { message: string }).message;

  it('answers 202 for a new message, 200 duplicate for a repeat, and stores it once with its aggregate and headers', async () => {
    const body = JSON.stringify({ orderId: 1 });
    const headers = { 'Idempotency-Key': 'evt-1', 'X-QueueBox-Key': 'order-1', 'X-Tenant': 'acme', Authorization: 'Bearer x' };
    const first = await post('orders', body, headers);
    assert.equal(first.status, 202);
    const stored = (await first.json()) as { id: string; duplicate: boolean };
    assert.equal(stored.duplicate, false);
    const second = await post('orders', body, headers);
    assert.equal(second.status, 200);
    assert.deepEqual(await second.json(), { id: stored.id, duplicate: true, message: 'already received' });
    const rows = await db.query<{ idempotency_key: string; aggregate_id: string; payload: unknown; headers: Record<string, string> }>(
      'SELECT idempotency_key, aggregate_id, payload, headers FROM queuebox_inbox',
    );
    assert.equal(rows.length, 1);
    assert.equal(rows[0].aggregate_id, 'order-1');
    assert.deepEqual(rows[0].payload, { orderId: 1 });
    assert.equal(rows[0].headers['x-tenant'], 'acme');
    assert.equal(rows[0].headers.authorization, undefined, 'credentials are not stored');
    assert.equal(rows[0].headers['x-queuebox-signature'], undefined);
  });

  it('takes the idempotency key from X-Message-Id when there is no Idempotency-Key', async () => {
    const response = await post('orders', '{}', { 'X-Message-Id': '9b2f4c1e-0000-4000-8000-000000000001' });
    assert.equal(response.status, 202);
  });

  it('answers 400, 404 and 413 for bad requests', async () => {
    assert.equal((await post('orders', '{}')).status, 400, 'no idempotency key');
    assert.equal((await post('orders', '{"broken":', { 'Idempotency-Key': 'x' })).status, 400, 'not JSON');
    const text = await fetch(`${base}/orders`, {
      method: 'POST',
      body: 'hello',
      headers: { 'content-type': 'text/plain', 'Idempotency-Key': 'y' },
    });
    assert.equal(text.status, 400, 'not a JSON content type');
    assert.equal((await post('nobody', '{}', { 'Idempotency-Key': 'z' })).status, 404, 'unknown source');
    const large = JSON.stringify({ blob: 'x'.repeat(3000) });
    assert.equal((await post('orders', large, { 'Idempotency-Key': 'big' })).status, 413);
    assert.deepEqual(await db.query("SELECT idempotency_key FROM queuebox_inbox WHERE idempotency_key IN ('x', 'y', 'z', 'big')"), []);
  });

  it('answers 400 naming the field for a body the database cannot store (a lone surrogate, a NUL), not 500', async () => {
    for (const [key, body] of [
      ['surrogate', '{"text":"half an emoji \\ud83d"}'],
      ['nul', '{"text":"a\\u0000b"}'],
    ]) {
      const response = await post('orders', body, { 'Idempotency-Key': key });
      assert.equal(response.status, 400, key);
      const answer = (await response.json()) as { field: string; message: string };
      assert.equal(answer.field, 'payload');
      assert.match(answer.message, key === 'nul' ? /NUL character/ : /lone UTF-16 surrogate/);
    }
    assert.deepEqual(await db.query("SELECT idempotency_key FROM queuebox_inbox WHERE idempotency_key IN ('surrogate', 'nul')"), []);
  });

  it('answers 401 for a tampered body, a wrong secret, a stale timestamp or no signature; accepts the rotated-out secret', async () => {
    const body = JSON.stringify({ amount: 10 });
    const signed = signRequest(SECRET, { path: '/queuebox/inbox/orders', headers: { 'Idempotency-Key': 't1' }, body });
    const tampered = await fetch(`${base}/orders`, {
      method: 'POST',
      body: JSON.stringify({ amount: 1000 }),
      headers: { 'content-type': 'application/json', 'Idempotency-Key': 't1', ...signed },
    });
    assert.equal(tampered.status, 401);
    assert.equal((await post('orders', body, { 'Idempotency-Key': 't2' }, 'a-wrong-secret-0123456789')).status, 401);
    const stale = await post('orders', body, { 'Idempotency-Key': 't3' }, SECRET, Math.floor(Date.now() / 1000) - 301);
    assert.equal(stale.status, 401);
    assert.match(((await stale.json()) as { message: string }).message, /outside the allowed window/);
    assert.equal((await post('orders', body, { 'Idempotency-Key': 't4' }, false)).status, 401);
    assert.equal((await post('orders', body, { 'Idempotency-Key': 't5' }, 'old-secret-0123456789')).status, 202);
  });

  it('v2 covers the idempotency key, the path (source) and the headers: a captured request replayed with any of them changed is refused', async () => {
    const body = JSON.stringify({ amount: 5 });
    const headers = { 'Idempotency-Key': 'r1', 'X-QueueBox-Key': 'account-1', 'X-Tenant': 'acme' };
    const captured = { ...headers, ...signRequest(SECRET, { path: '/queuebox/inbox/orders', headers, body }) };
    assert.equal((await send('orders', body, captured)).status, 202);
    const newKey = await send('orders', body, { ...captured, 'Idempotency-Key': 'r1-replayed' });
    assert.equal(newKey.status, 401, 'another idempotency key');
    assert.equal((await send('payments', body, captured)).status, 401, "another source's path");
    assert.equal((await send('orders', body, { ...captured, 'Idempotency-Key': 'r2', 'X-QueueBox-Key': 'account-2' })).status, 401);
    assert.equal((await send('orders', body, { ...captured, 'X-QueueBox-Key': 'account-2' })).status, 401, 'a forged aggregate key');
    assert.equal((await send('orders', body, { ...captured, 'X-Tenant': 'evil' })).status, 401, 'a forged custom header');
    const added = await send('orders', body, { ...captured, 'X-Role': 'admin' });
    assert.equal(added.status, 401, 'an unsigned header added');
    assert.match(await messageOf(added), /not listed in X-QueueBox-Signed-Headers/);
    const { 'Idempotency-Key': _, ...withoutKey } = captured;
    const byMessageId = await send('orders', body, { ...withoutKey, 'X-Message-Id': '9b2f4c1e-0000-4000-8000-0000000000aa' });
    assert.equal(byMessageId.status, 401, 'the idempotency key swapped for an unsigned X-Message-Id');
    const stored = await db.query<{ idempotency_key: string }>(
      "SELECT idempotency_key FROM queuebox_inbox WHERE idempotency_key LIKE 'r%' OR source = 'payments'",
    );
    assert.deepEqual(stored, [{ idempotency_key: 'r1' }]);
  });

  it('refuses v1 signatures by default (401 naming the option) and malformed signature values (401, never 500)', async () => {
    const body = JSON.stringify({ amount: 6 });
    const v1 = await send('orders', body, { 'Idempotency-Key': 'm1', ...signatureHeaders(SECRET, body) });
    assert.equal(v1.status, 401);
    assert.match(await messageOf(v1), /receiver\.acceptV1Signatures/);
    const headers = { 'Idempotency-Key': 'm2' };
    const good: Record<string, string> = { ...headers, ...signRequest(SECRET, { path: '/queuebox/inbox/orders', headers, body }) };
    for (const signature of ['v2=zz', 'v2=', 'sha256=abc', `v2=${'0'.repeat(63)}`, `${good[SIGNATURE_HEADER]},garbage`, ',', 'v2=\u00e9']) {
      const response = await send('orders', body, { ...good, [SIGNATURE_HEADER]: signature });
      assert.equal(response.status, 401, signature);
      assert.match(await messageOf(response), /malformed/, signature);
    }
    for (const list of ['idempotency-key,idempotency-key', 'idempotency key', 'idempotency-key,x-absent', 'x-queuebox-signature']) {
      const response = await send('orders', body, { ...good, 'X-QueueBox-Signed-Headers': list });
      assert.equal(response.status, 401, list);
    }
    assert.equal((await send('orders', body, { ...good, 'X-QueueBox-Timestamp': '17e8' })).status, 401);
    assert.equal((await send('orders', body, good)).status, 202, 'the untouched request is accepted');
  });

  it('accepts v1 signatures with receiver.acceptV1Signatures (while senders upgrade), and v2 as well', async () => {
    const legacy = await startReceiverApp(db.url, {
      ...inboxOptions,
      receiver: { secret: SECRET, acceptV1Signatures: true, path: 'legacy' },
    });
    try {
      const url = `${await legacy.getUrl()}/legacy/orders`;
      const body = JSON.stringify({ amount: 7 });
      const v1 = await fetch(url, {
        method: 'POST',
        body,
        headers: { 'content-type': 'application/json', 'Idempotency-Key': 'l1', ...signatureHeaders(SECRET, body) },
      });
      assert.equal(v1.status, 202);
      const headers = { 'Idempotency-Key': 'l2' };
      const v2 = await fetch(url, {
        method: 'POST',
        body,
        headers: { 'content-type': 'application/json', ...headers, ...signRequest(SECRET, { path: '/legacy/orders', headers, body }) },
      });
      assert.equal(v2.status, 202);
    } finally {
      await legacy.close();
    }
  });

  it('answers an unsigned, deeply nested body with 401 (not 500) on an app without rawBody; a signed one with 400', async () => {
    const parsed = await startReceiverApp(db.url, { ...inboxOptions, receiver: { secret: SECRET, path: 'parsed' } }, false, false);
    try {
      const url = `${await parsed.getUrl()}/parsed/orders`;
      const depth = 40_000; // JSON.stringify of the parsed body overflows the stack
      const body = `${'['.repeat(depth)}${']'.repeat(depth)}`;
      const unsigned = await fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json', 'Idempotency-Key': 'n1' } });
      assert.equal(unsigned.status, 401);
      const headers = { 'Idempotency-Key': 'n2' };
      const signed = await fetch(url, {
        method: 'POST',
        body,
        headers: { 'content-type': 'application/json', ...headers, ...signRequest(SECRET, { path: '/parsed/orders', headers, body }) },
      });
      assert.equal(signed.status, 400);
    } finally {
      await parsed.close();
    }
  });

  it('refuses to start as an open endpoint: no secret and no guard is a configuration error', async () => {
    assert.throws(
      () => QueueBoxModule.forRoot({ ...inboxOptions, receiver: {} }),
      (error: unknown) =>
        error instanceof QueueBoxConfigError && error.option === 'receiver.secret' && /unauthenticated writes/.test(error.message),
    );
    assert.throws(() => QueueBoxModule.forRoot({ ...inboxOptions, receiver: { secret: 'short' } }), /at least 16 characters/);
  });

  it("runs the app's own guards when it has no secret", async () => {
    const guarded = await startReceiverApp(db.url, { ...inboxOptions, receiver: { guards: [DenyAll], path: 'hooks' } });
    try {
      const response = await fetch(`${await guarded.getUrl()}/hooks/orders`, {
        method: 'POST',
        body: '{}',
        headers: { 'content-type': 'application/json', 'Idempotency-Key': 'g' },
      });
      assert.equal(response.status, 403);
    } finally {
      await guarded.close();
    }
  });

  it('end to end: keys beyond Latin-1 or with CR/LF travel encoded and are stored as sent, from the outbox key and through the relay', async () => {
    const keys = ['клиент-1', '订单-7', 'line\nfeed', 'cr\r\nlf', ' spaced ', "UTF-8''literal", 'order-9'];
    const receiverDb = await createTestDatabase();
    const senderDb = await createTestDatabase();
    const receiverApp = await startReceiverApp(receiverDb.url, { ...inboxOptions, receiver: { secret: SECRET } });
    const sender = await createTestApp(senderDb.url, {
      outbox: {
        publisher: new HttpPublisher({ destinations: { billing: `${await receiverApp.getUrl()}/queuebox/inbox/orders` }, secret: SECRET }),
        pollIntervalMs: 20,
      },
      inbox: {
        relay: {
          pollIntervalMs: 20,
          // The forwarded message keeps the inbox message's aggregate as its key, and its idempotency
          // key as the receiver's Idempotency-Key (in the same wire form QueueBox uses for its own headers).
          routes: {
            orders: (m) => ({
              destination: 'billing',
              key: m.aggregateId,
              payload: m.payload,
              headers: { [IDEMPOTENCY_KEY_HEADER]: encodeHeaderValue(m.idempotencyKey) },
            }),
          },
        },
      },
    });
    try {
      const dataSource = sender.app.get<DataSource>(getDataSourceToken());
      await dataSource.transaction((manager) =>
        sender.get(OutboxService).enqueueMany(
          manager,
          keys.map((key) => ({ destination: 'billing', key, payload: { path: 'outbox', key } })),
        ),
      );
      for (const key of keys) {
        await sender
          .get(InboxService)
          .receive({ source: 'orders', idempotencyKey: `evt ${key}`, aggregateId: key, payload: { path: 'relay', key } });
      }
      // Sent rows only grow: every enqueued and every forwarded message is sent once all of them
      // count (three separate reads could see the last forward land, pending, between them).
      await eventually(
        async () =>
          (await senderDb.query<{ n: number }>("SELECT count(*)::int AS n FROM queuebox_outbox WHERE state = 'sent'"))[0].n ===
          2 * keys.length,
        'every message forwarded and sent',
      );
      assert.deepEqual(await senderDb.query("SELECT 1 FROM queuebox_inbox WHERE state <> 'processed'"), []);
      const rows = await receiverDb.query<{
        idempotency_key: string;
        aggregate_id: string;
        payload: { path: string; key: string };
        headers: Record<string, string>;
      }>('SELECT idempotency_key, aggregate_id, payload, headers FROM queuebox_inbox ORDER BY id');
      assert.equal(rows.length, 2 * keys.length);
      for (const row of rows) assert.equal(row.aggregate_id, row.payload.key, 'the stored aggregate is the outbox key, byte for byte');
      const relayed = rows.filter((row) => row.payload.path === 'relay');
      assert.deepEqual(
        relayed.map((row) => row.idempotency_key).sort(),
        keys.map((key) => `evt ${key}`).sort(),
        'the Idempotency-Key is stored decoded',
      );
      for (const row of relayed) {
        assert.equal(decodeHeaderValue(row.headers['x-causation-id']), `evt ${row.payload.key}`, 'X-Causation-Id decodes to the inbox key');
      }
      const sent = await senderDb.query<{ message_id: string }>("SELECT message_id FROM queuebox_outbox WHERE payload->>'path' = 'outbox'");
      assert.deepEqual(
        rows
          .filter((row) => row.payload.path === 'outbox')
          .map((row) => row.idempotency_key)
          .sort(),
        sent.map((r) => r.message_id).sort(),
      );
    } finally {
      await sender.app.close();
      await receiverApp.close();
      await receiverDb.drop();
      await senderDb.drop();
    }
  });

  it('answers 400 naming the field for an RFC 8187 key or aggregate whose bytes are not UTF-8', async () => {
    for (const [header, field] of [
      ['Idempotency-Key', 'idempotencyKey'],
      ['X-QueueBox-Key', 'aggregateId'],
    ] as const) {
      const body = JSON.stringify({ n: 1 });
      const headers: Record<string, string> = { 'Idempotency-Key': 'evt-utf8', [header]: "UTF-8''%FF%FE" };
      const response = await fetch(`${base}/orders`, {
        method: 'POST',
        body,
        headers: {
          ...headers,
          ...signRequest(SECRET, { path: '/queuebox/inbox/orders', headers, body }),
          'content-type': 'application/json',
        },
      });
      assert.equal(response.status, 400);
      const answer = (await response.json()) as { field: string; message: string };
      assert.equal(answer.field, field);
      assert.match(answer.message, new RegExp(`The ${header} header has the RFC 8187 form`));
    }
  });

  it('end to end: one app publishes to the other app, which stores each message once and each key in order although the publisher retried after timeouts', async () => {
    const receiverDb = await createTestDatabase();
    const senderDb = await createTestDatabase();
    const receiverApp = await startReceiverApp(receiverDb.url, { ...inboxOptions, receiver: { secret: SECRET } }, true);
    const sender = await createTestApp(senderDb.url, {
      outbox: {
        publisher: new HttpPublisher({
          destinations: { billing: `${await receiverApp.getUrl()}/queuebox/inbox/orders` },
          secret: SECRET,
          timeoutMs: 300,
        }),
        pollIntervalMs: 20,
        backoff: { initialMs: 10, maxMs: 50 },
      },
    });
    try {
      const dataSource = sender.app.get<DataSource>(getDataSourceToken());
      await dataSource.transaction((manager) =>
        sender.get(OutboxService).enqueueMany(
          manager,
          Array.from({ length: 5 }, (_, n) => ({ destination: 'billing', key: `order-${n % 2}`, payload: { n } })),
        ),
      );
      await eventually(async () => (await senderDb.query("SELECT 1 FROM queuebox_outbox WHERE state <> 'sent'")).length === 0, 'all sent');
      assert.ok(sender.logger.has('warn', 'no answer from'), 'the publisher timed out and retried');
      const rows = await receiverDb.query<{ idempotency_key: string; aggregate_id: string; n: number }>(
        `SELECT idempotency_key, aggregate_id, (payload->>'n')::int AS n FROM queuebox_inbox ORDER BY id`,
      );
      const sent = await senderDb.query<{ message_id: string }>('SELECT message_id FROM queuebox_outbox');
      assert.equal(rows.length, 5, 'each message stored exactly once');
      assert.deepEqual(rows.map((r) => r.idempotency_key).sort(), sent.map((r) => r.message_id).sort());
      assert.deepEqual([...new Set(rows.map((r) => r.aggregate_id))].sort(), ['order-0', 'order-1'], 'the outbox key became the aggregate');
      for (const key of ['order-0', 'order-1']) {
        const stored = rows.filter((r) => r.aggregate_id === key).map((r) => r.n);
        assert.deepEqual(
          stored,
          [...stored].sort((a, b) => a - b),
          `${key} stored in enqueue order across the retries (docs/publishing.md, HTTP)`,
        );
      }
    } finally {
      await sender.app.close();
      await receiverApp.close();
      await receiverDb.drop();
      await senderDb.drop();
    }
  });
});
