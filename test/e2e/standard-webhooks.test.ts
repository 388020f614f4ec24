// Standard Webhooks (issue 41, item 5): QueueBox signs and verifies the spec's symmetric `v1`
// scheme. Checked against the reference library's published test vector and against that library
// itself (the `standardwebhooks` package, an independent implementation), then end to end: the
// HTTP receiver accepting a library-signed request, and HttpPublisher's requests verified by the
// library and stored by QueueBox's receiver.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { type INestApplication, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { Webhook } from 'standardwebhooks';
import type { DataSource } from 'typeorm';
import { signRequest } from '../../lib/common/signature';
import { standardWebhookHeaders, verifyStandardWebhook } from '../../lib/common/standard-webhooks';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import type { QueueBoxModuleExtras } from '../../lib/module/queuebox.module-definition';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { HttpPublisher } from '../../lib/publishers/http.publisher';
import type { QueueBoxModuleOptions } from '../../lib/types/options';
import { describeWithDatabase } from '../support/database';
import { HttpRecorder } from '../support/http-recorder';

// The vector of the reference JavaScript library's tests ("sign function works").
const VECTOR = {
  secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
  timestamp: 1614265330,
  body: '{"test": 2432232314}',
  signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
};
const SW_SECRET = `whsec_${randomBytes(32).toString('base64')}`;
const OWN_SECRET = 'a-test-secret-of-32-characters!!';

describe('Standard Webhooks signatures', () => {
  const check = (headers: Record<string, string>, body = VECTOR.body, nowSeconds = VECTOR.timestamp, secrets = [VECTOR.secret]) =>
    verifyStandardWebhook({ secrets, headers, body, nowSeconds, toleranceSeconds: 300 });

  it("signs the reference library's test vector exactly", () => {
    assert.deepEqual(standardWebhookHeaders(VECTOR.secret, { id: VECTOR.id, body: VECTOR.body }, VECTOR.timestamp), {
      'webhook-id': VECTOR.id,
      'webhook-timestamp': String(VECTOR.timestamp),
      'webhook-signature': VECTOR.signature,
    });
    // The prefix is optional in a secret, as the spec's libraries accept it.
    assert.equal(
      standardWebhookHeaders(VECTOR.secret.slice('whsec_'.length), { id: VECTOR.id, body: VECTOR.body }, VECTOR.timestamp)[
        'webhook-signature'
      ],
      VECTOR.signature,
    );
  });

  it('verifies the vector, several entries, and refuses what the reference library refuses', () => {
    const headers = { 'Webhook-Id': VECTOR.id, 'Webhook-Timestamp': String(VECTOR.timestamp), 'Webhook-Signature': VECTOR.signature };
    assert.equal(check(headers), 'valid');
    const other = 'v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=';
    assert.equal(check({ ...headers, 'Webhook-Signature': `${other} v2,${VECTOR.signature.slice(3)} ${VECTOR.signature}` }), 'valid');
    assert.equal(check(headers, '{"test": 2432232315}'), 'mismatch', 'another body');
    assert.equal(check({ ...headers, 'Webhook-Id': 'msg_other' }), 'mismatch', 'another id');
    assert.equal(check({ ...headers, 'Webhook-Signature': other }), 'mismatch');
    assert.equal(check({ ...headers, 'Webhook-Signature': 'v1,' }), 'mismatch', 'a partial signature');
    assert.equal(check(headers, VECTOR.body, VECTOR.timestamp + 301), 'stale', 'too old');
    assert.equal(check(headers, VECTOR.body, VECTOR.timestamp - 301), 'stale', 'too new');
    assert.equal(check({ ...headers, 'Webhook-Timestamp': 'hello' }), 'malformed');
    assert.equal(check({ 'Webhook-Id': VECTOR.id, 'Webhook-Signature': VECTOR.signature }), 'missing');
    assert.equal(check(headers, VECTOR.body, VECTOR.timestamp, [SW_SECRET, VECTOR.secret]), 'valid', 'a rotation: any secret');
  });

  it('agrees with the standardwebhooks package both ways', () => {
    const library = new Webhook(SW_SECRET);
    const body = JSON.stringify({ orderId: 7, note: 'zäh 💡' });
    const now = Math.floor(Date.now() / 1000);
    const signedByLibrary = library.sign('msg_1', new Date(now * 1000), body);
    assert.equal(
      check({ 'webhook-id': 'msg_1', 'webhook-timestamp': String(now), 'webhook-signature': signedByLibrary }, body, now, [SW_SECRET]),
      'valid',
    );
    assert.deepEqual(library.verify(body, standardWebhookHeaders(SW_SECRET, { id: 'msg_2', body })), { orderId: 7, note: 'zäh 💡' });
  });
});

async function startApp(url: string, options: QueueBoxModuleOptions & QueueBoxModuleExtras): Promise<INestApplication> {
  @Module({ imports: [TypeOrmModule.forRoot({ type: 'postgres', url, logging: false }), QueueBoxModule.forRoot(options)] })
  class AppModule {}
  const app = await NestFactory.create(AppModule, { rawBody: true, logger: false, abortOnError: false });
  await app.listen(0, '127.0.0.1');
  return app;
}

describeWithDatabase('Standard Webhooks end to end: the HTTP receiver and HttpPublisher', (db) => {
  let app: INestApplication;
  let base: string;
  const recorder = new HttpRecorder();

  before(async () => {
    const partnerUrl = `${await recorder.start()}/hooks`;
    app = await startApp(db.url, {
      outbox: {
        publisher: new HttpPublisher({ destinations: { partner: partnerUrl }, secret: SW_SECRET, signatureScheme: 'standard-webhooks' }),
      },
      inbox: { relay: { routes: { partners: () => [] } } },
      workers: false,
      receiver: { secret: OWN_SECRET, standardWebhooksSecret: ['whsec_b2xkLXNlY3JldC0wMTIzNDU2Nzg5', SW_SECRET] },
    });
    base = `${await app.getUrl()}/queuebox/inbox`;
  });
  after(async () => {
    await app?.close();
    await recorder.stop();
  });

  const post = (body: string, headers: Record<string, string>) =>
    fetch(`${base}/partners`, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
  const stored = () =>
    db.query<{ idempotency_key: string; payload: unknown }>(
      "SELECT idempotency_key, payload FROM queuebox_inbox WHERE source = 'partners' ORDER BY id",
    );

  it('stores a request the standardwebhooks package signed, keyed by its webhook-id; a replay is a duplicate; a changed body is refused', async () => {
    const library = new Webhook(SW_SECRET);
    const body = JSON.stringify({ event: 'invoice.paid', amount: 12 });
    const at = new Date();
    const headers = {
      'webhook-id': 'msg_lib_1',
      'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
      'webhook-signature': library.sign('msg_lib_1', at, body),
    };
    const first = await post(body, headers);
    assert.equal(first.status, 202, await first.clone().text());
    const again = await post(body, headers);
    assert.equal(again.status, 200);
    assert.equal(((await again.json()) as { duplicate: boolean }).duplicate, true);
    const tampered = await post(JSON.stringify({ event: 'invoice.paid', amount: 1200 }), headers);
    assert.equal(tampered.status, 401);
    const unknownSecret = new Webhook(`whsec_${randomBytes(24).toString('base64')}`);
    assert.equal((await post(body, { ...headers, 'webhook-signature': unknownSecret.sign('msg_lib_1', at, body) })).status, 401);
    assert.deepEqual(await stored(), [{ idempotency_key: 'msg_lib_1', payload: { event: 'invoice.paid', amount: 12 } }]);
  });

  it("keeps QueueBox's own v2 scheme beside it, and refuses a request signed by neither", async () => {
    const body = '{"n":1}';
    const headers = { 'Idempotency-Key': 'own-1' };
    const own = await post(body, { ...headers, ...signRequest(OWN_SECRET, { path: '/queuebox/inbox/partners', headers, body }) });
    assert.equal(own.status, 202);
    assert.equal((await post(body, headers)).status, 401);
  });

  it('HttpPublisher with signatureScheme standard-webhooks: the library verifies what it sends, and the receiver stores it by its message id', async () => {
    const library = new Webhook(SW_SECRET);
    const verified: unknown[] = [];
    recorder.responder = async (request) => {
      const headers = request.headers as Record<string, string>;
      verified.push(library.verify(request.body, headers));
      return (await post(request.body, headers)).status;
    };
    const dataSource = app.get<DataSource>(getDataSourceToken());
    const { messageId } = await dataSource.transaction((m) =>
      app.get(OutboxService).enqueue(m, { destination: 'partner', key: 'acct-1', payload: { event: 'refund', cents: 5 } }),
    );
    assert.equal(await app.get(OutboxPoller).runOnce(), 1);
    assert.deepEqual(verified, [{ event: 'refund', cents: 5 }]);
    const request = recorder.requests.at(-1);
    assert.equal(request?.status, 202);
    assert.equal(request?.headers['webhook-id'], messageId);
    assert.equal(request?.headers['x-queuebox-signature'], undefined, 'one scheme at a time');
    assert.deepEqual((await stored()).at(-1), { idempotency_key: messageId, payload: { event: 'refund', cents: 5 } });
    const [row] = await db.query<{ state: string }>('SELECT state FROM queuebox_outbox');
    assert.equal(row.state, 'sent');
  });

  it('refuses secrets that are not Standard Webhooks secrets', () => {
    assert.throws(
      () => new HttpPublisher({ destinations: {}, secret: OWN_SECRET, signatureScheme: 'standard-webhooks' }),
      (error: unknown) => error instanceof QueueBoxConfigError && error.option === 'secret',
    );
    assert.throws(() => new HttpPublisher({ destinations: {}, signatureScheme: 'standard-webhooks' }), QueueBoxConfigError);
  });
});
