import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { PermanentPublishError, PublishError, QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { HttpPublisher, retryAfterMs } from '../../lib/publishers/http.publisher';
import type { OutboundMessage } from '../../lib/types/messages';
import { HttpRecorder } from '../support/http-recorder';

const message = (destination = 'orders'): OutboundMessage => ({
  id: '1',
  messageId: '0b8e0f1e-58f7-4f6e-9a47-0c2b7a1b6a01',
  destination,
  key: null,
  payload: { orderId: 7, items: ['a'] },
  headers: { 'x-tenant': 'acme', 'X-Message-Id': '0b8e0f1e-58f7-4f6e-9a47-0c2b7a1b6a01' },
  attempt: 1,
  createdAt: new Date(),
});

describe('HttpPublisher against a real local HTTP server', () => {
  const recorder = new HttpRecorder();
  let base: string;
  let publisher: HttpPublisher;

  before(async () => {
    base = await recorder.start();
    publisher = new HttpPublisher({ destinations: { orders: `${base}/orders` }, timeoutMs: 300, headers: { authorization: 'Bearer t' } });
  });
  after(() => recorder.stop());

  const outcome = async (status: number | 'hang' | 'drop') => {
    recorder.responder = () => status;
    try {
      await publisher.publish(message(), new AbortController().signal);
      return 'ok';
    } catch (error) {
      if (error instanceof PermanentPublishError) return 'permanent';
      if (error instanceof PublishError) return 'retry';
      throw error;
    }
  };

  it('POSTs the JSON payload with X-Message-Id, the message headers and the configured headers', async () => {
    recorder.responder = () => 200;
    await publisher.publish(message(), new AbortController().signal);
    const request = recorder.requests.at(-1)!;
    assert.equal(request.path, '/orders');
    assert.deepEqual(JSON.parse(request.body), { orderId: 7, items: ['a'] });
    assert.equal(request.headers['x-message-id'], '0b8e0f1e-58f7-4f6e-9a47-0c2b7a1b6a01');
    assert.equal(request.headers['x-tenant'], 'acme');
    assert.equal(request.headers.authorization, 'Bearer t');
    assert.equal(request.headers['content-type'], 'application/json');
    assert.equal(
      request.headers['user-agent'],
      `queuebox/${JSON.parse(readFileSync(join(__dirname, '../../../package.json'), 'utf8')).version}`,
    );
  });

  it('sends any outbox key: visible ASCII as it is, anything else (beyond Latin-1, CR/LF) as RFC 8187 UTF-8 in X-QueueBox-Key', async () => {
    recorder.responder = () => 200;
    const sent: Record<string, string> = {};
    for (const key of ['order-7', 'клиент-1', '订单-7', 'line\r\nbreak']) {
      await publisher.publish({ ...message(), key }, new AbortController().signal);
      sent[key] = String(recorder.requests.at(-1)?.headers['x-queuebox-key']);
    }
    assert.deepEqual(sent, {
      'order-7': 'order-7',
      'клиент-1': "UTF-8''%D0%BA%D0%BB%D0%B8%D0%B5%D0%BD%D1%82-1",
      '订单-7': "UTF-8''%E8%AE%A2%E5%8D%95-7",
      'line\r\nbreak': "UTF-8''line%0D%0Abreak",
    });
  });

  it('a header that cannot be sent over HTTP (a value beyond Latin-1) is permanent, not retried forever', async () => {
    const sent = recorder.requests.length;
    const unsendable = { ...message(), headers: { ...message().headers, 'x-city': '東京' } };
    await assert.rejects(publisher.publish(unsendable, new AbortController().signal), (error: unknown) => {
      assert.ok(error instanceof PermanentPublishError, String(error));
      assert.match(error.message, /cannot be sent over HTTP/);
      return true;
    });
    assert.equal(recorder.requests.length, sent, 'nothing was sent');
  });

  it('treats 2xx as success, 4xx as permanent except 408/425/429, and everything else as retryable', async () => {
    const results: Record<string, string> = {};
    for (const status of [200, 201, 202, 204, 301, 400, 401, 404, 408, 409, 410, 422, 425, 429, 500, 502, 503]) {
      results[status] = await outcome(status);
    }
    assert.deepEqual(results, {
      200: 'ok',
      201: 'ok',
      202: 'ok',
      204: 'ok',
      301: 'retry',
      400: 'permanent',
      401: 'permanent',
      404: 'permanent',
      408: 'retry',
      409: 'permanent',
      410: 'permanent',
      422: 'permanent',
      425: 'retry',
      429: 'retry',
      500: 'retry',
      502: 'retry',
      503: 'retry',
    });
  });

  it('retries a timeout and a dropped connection', async () => {
    assert.equal(await outcome('hang'), 'retry');
    recorder.releaseHanging();
    assert.equal(await outcome('drop'), 'retry');
    await assert.rejects(
      new HttpPublisher({ destinations: { orders: 'http://127.0.0.1:9/closed' } }).publish(message(), new AbortController().signal),
      (error: unknown) => error instanceof PublishError && /request to http:\/\/127\.0\.0\.1:9\/closed failed/.test(error.message),
    );
  });

  it('stops when the claim is lost, with the signal reason', async () => {
    recorder.responder = () => 'hang';
    const controller = new AbortController();
    const publishing = publisher.publish(message(), controller.signal);
    await recorder.until(() => recorder.requests.length > 0 && recorder.requests.at(-1)!.status === 0);
    const reason = new Error('claim lost');
    controller.abort(reason);
    await assert.rejects(publishing, (error) => error === reason);
    recorder.releaseHanging();
  });

  it('dead-letters a destination without a URL, and validates its options', async () => {
    await assert.rejects(publisher.publish(message('unknown'), new AbortController().signal), PermanentPublishError);
    const byFunction = new HttpPublisher({ destinations: (d) => (d === 'orders' ? `${base}/fn` : undefined) });
    recorder.responder = () => 204;
    await byFunction.publish(message(), new AbortController().signal);
    assert.equal(recorder.requests.at(-1)!.path, '/fn');
    assert.throws(() => new HttpPublisher({ destinations: { orders: 'ftp://x' } }), QueueBoxConfigError);
    assert.throws(() => new HttpPublisher({} as never), QueueBoxConfigError);
    assert.throws(() => new HttpPublisher({ destinations: {}, timeoutMs: 0 }), QueueBoxConfigError);
  });

  it('a 429 or 503 with Retry-After is a PublishError whose retryAfterMs says when, capped by maxRetryAfterMs', async () => {
    const told = async (status: number, headers: Record<string, string>, options: { maxRetryAfterMs?: number } = {}) => {
      recorder.responder = () => ({ status, headers });
      const sender = new HttpPublisher({ destinations: { orders: `${base}/orders` }, ...options });
      try {
        await sender.publish(message(), new AbortController().signal);
      } catch (error) {
        assert.ok(error instanceof PublishError);
        return { retryAfterMs: error.retryAfterMs, message: error.message };
      }
      throw new Error('published');
    };
    assert.deepEqual(await told(429, { 'retry-after': '7' }), {
      retryAfterMs: 7000,
      message: `HTTP 429 from ${base}/orders: told to wait (Retry-After: 7); next attempt in 7000 ms`,
    });
    const dated = { date: 'Wed, 01 Jan 2020 00:00:00 GMT', 'retry-after': 'Wed, 01 Jan 2020 00:00:05 GMT' };
    assert.equal((await told(503, dated)).retryAfterMs, 5000, "an HTTP date counts from the answer's Date");
    const capped = await told(429, { 'retry-after': '86400' }, { maxRetryAfterMs: 60_000 });
    assert.equal(capped.retryAfterMs, 60_000);
    assert.match(
      capped.message,
      /told to wait \(Retry-After: 86400\); next attempt in 60000 ms \(capped by HttpPublisher "maxRetryAfterMs"\)/,
    );
    assert.equal((await told(429, {})).retryAfterMs, undefined, 'no header: the backoff decides');
    assert.equal((await told(500, { 'retry-after': '7' })).retryAfterMs, undefined, 'only 429 and 503 say when');
    assert.equal((await told(429, { 'retry-after': 'soon' })).retryAfterMs, undefined, 'unreadable: the backoff decides');
    assert.equal((await told(429, { 'retry-after': '7' }, { maxRetryAfterMs: 0 })).retryAfterMs, undefined, '0 ignores it');
    assert.throws(() => new HttpPublisher({ destinations: {}, maxRetryAfterMs: -1 }), QueueBoxConfigError);
  });

  it('reads Retry-After as delay-seconds or an HTTP date (RFC 9110 10.2.3)', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    assert.equal(retryAfterMs('120', null, now), 120_000);
    assert.equal(retryAfterMs(' 0 ', null, now), 0);
    assert.equal(retryAfterMs('Thu, 01 Jan 2026 00:00:30 GMT', null, now), 30_000, 'from now without a Date header');
    assert.equal(retryAfterMs('Thu, 01 Jan 2026 00:00:30 GMT', 'Thu, 01 Jan 2026 00:00:20 GMT', now), 10_000);
    assert.equal(retryAfterMs('Wed, 31 Dec 2025 00:00:00 GMT', null, now), 0, 'a date past waits 0');
    assert.equal(retryAfterMs('-5', null, now), undefined);
    assert.equal(retryAfterMs('1.5', null, now), undefined);
    assert.equal(retryAfterMs('', null, now), undefined);
  });
});
