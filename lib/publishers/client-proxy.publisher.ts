import { Inject, Injectable, type Type } from '@nestjs/common';
import { describeError } from '../common/errors';
import { encodeHeaderValue } from '../common/header-value';
import { PublishError, QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';
import type { OutboundMessage } from '../types/messages';
import type { Publisher } from '../types/outbox';
import { KEY_HEADER, MESSAGE_ID_HEADER } from '../wire-headers';

/**
 * What `ClientProxyPublisher` needs of a `ClientProxy` (`@nestjs/microservices` stays an optional
 * peer: this file only names its types, and loads the package when a publisher is created).
 */
export interface ClientProxyLike {
  emit(
    pattern: unknown,
    data: unknown,
  ): { subscribe(observer: { error(error: unknown): void; complete(): void }): { unsubscribe(): void } };
}

/** The body sent where the transport has no headers (Redis, TCP, MQTT before v5), or with `envelope: 'always'`. */
export interface ClientProxyEnvelope {
  messageId: string;
  key: string | null;
  headers: Record<string, string>;
  payload: unknown;
}

export interface ClientProxyPublisherOptions {
  /** The pattern each message is emitted with. Default: its destination. */
  pattern?: (message: OutboundMessage) => string | Record<string, unknown>;
  /**
   * `'auto'` (default): the data is the payload, and the message id and headers travel as
   * transport headers where the transport has them (RabbitMQ, NATS, MQTT 5, Kafka); elsewhere the
   * data is a `ClientProxyEnvelope`. `'always'`: the envelope on every transport. `'never'`: the
   * bare payload on every transport; where the transport has no headers (Redis, TCP, MQTT before
   * v5) the consumer then gets neither the message id nor the key, so put what it deduplicates on
   * in the payload.
   */
  envelope?: 'auto' | 'always' | 'never';
}

/** The transports whose headers or acknowledgements the publisher knows. */
export type ClientProxyTransport = 'rmq' | 'nats' | 'mqtt' | 'kafka' | 'redis' | 'other';

interface Microservices {
  ClientRMQ: Type<unknown>;
  ClientNats: Type<unknown>;
  ClientMqtt: Type<unknown>;
  ClientKafka: Type<unknown>;
  ClientRedis: Type<unknown>;
  RmqRecordBuilder: new (data: unknown) => { setOptions(options: Record<string, unknown>): { build(): unknown } };
  NatsRecordBuilder: new (data: unknown) => { setHeaders(headers: unknown): { build(): unknown } };
  MqttRecordBuilder: new (
    data: unknown,
  ) => { setQoS(qos: 0 | 1 | 2): { setProperties(p: Record<string, unknown>): { build(): unknown }; build(): unknown } };
}

/**
 * Publishes outbox messages through any `@nestjs/microservices` client the application already
 * configures (RabbitMQ, NATS, MQTT, Kafka, Redis): `client.emit(pattern, data)`, with the
 * destination as pattern, waiting until the transport confirms the send (RabbitMQ publisher
 * confirms, a NATS server round trip, MQTT QoS 1 PUBACK, Kafka producer acks). The message id
 * travels as `X-Message-Id` (RabbitMQ also sets the AMQP `messageId`), its key as `X-QueueBox-Key`.
 * A failed or unconfirmed emit is retried; aborting the signal stops waiting.
 *
 * @example
 * // With a ClientsModule client, injected by Nest:
 * ClientsModule.register({ isGlobal: true, clients: [{ name: 'BILLING', transport: Transport.RMQ, options: { urls, queue: 'billing' } }] }),
 * QueueBoxModule.forRoot({ outbox: { publishers: { billing: ClientProxyPublisher.for('BILLING') } } })
 * // Or with a client you hold:
 * new ClientProxyPublisher(ClientProxyFactory.create({ transport: Transport.NATS, options: { servers } }))
 */
export class ClientProxyPublisher implements Publisher {
  /**
   * A publisher class that injects the `ClientsModule` client registered under `token`; give it
   * to `outbox.publishers` (or `outbox.publisher`) and Nest instantiates it.
   */
  static for(token: string | symbol, options?: ClientProxyPublisherOptions): Type<ClientProxyPublisher> {
    if (typeof token !== 'string' && typeof token !== 'symbol')
      throw new QueueBoxConfigError('token', messages.clientProxyTokenInvalid(token));
    @Injectable()
    class InjectedClientProxyPublisher extends ClientProxyPublisher {
      constructor(@Inject(token) client: ClientProxyLike) {
        super(client, options);
      }
    }
    Object.defineProperty(InjectedClientProxyPublisher, 'name', { value: `ClientProxyPublisher(${String(token)})` });
    return InjectedClientProxyPublisher;
  }

  /** Which transport the client speaks, as detected from its class. */
  readonly transport: ClientProxyTransport;
  private readonly ms: Microservices;

  constructor(
    private readonly client: ClientProxyLike,
    private readonly options: ClientProxyPublisherOptions = {},
  ) {
    if (typeof (client as Partial<ClientProxyLike> | null)?.emit !== 'function') {
      throw new QueueBoxConfigError('client', messages.clientProxyInvalid());
    }
    if (options.pattern !== undefined && typeof options.pattern !== 'function') {
      throw new QueueBoxConfigError('pattern', messages.optionNotFunction('pattern'));
    }
    if (options.envelope !== undefined && !['auto', 'always', 'never'].includes(options.envelope)) {
      throw new QueueBoxConfigError(
        'envelope',
        messages.optionNotNonEmptyString('envelope ("auto", "always" or "never")', options.envelope),
      );
    }
    this.ms = loadMicroservices();
    this.transport = transportOf(client, this.ms);
  }

  async publish(message: OutboundMessage, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    const pattern = this.options.pattern ? this.options.pattern(message) : message.destination;
    const patternText = typeof pattern === 'string' ? pattern : JSON.stringify(pattern);
    try {
      await untilComplete(this.client.emit(pattern, this.dataOf(message)), signal);
      // Core NATS has no acknowledgement: a flush round trip proves the server has the message.
      if (this.transport === 'nats') await untilSettled(flushNats(this.client), signal);
    } catch (error) {
      if (signal.aborted) throw signal.reason;
      throw new PublishError(messages.clientProxyEmitFailed(this.transport, patternText, describeEmitError(error)), undefined, {
        cause: error,
      });
    }
  }

  private dataOf(message: OutboundMessage): unknown {
    const headers: Record<string, string> = { ...message.headers, [MESSAGE_ID_HEADER]: message.messageId };
    // The same wire form as over HTTP (a CR or LF cannot go in a NATS header); the envelope and Kafka's key keep it raw.
    if (message.key !== null) headers[KEY_HEADER] = encodeHeaderValue(message.key);
    const envelope: ClientProxyEnvelope = {
      messageId: message.messageId,
      key: message.key,
      headers: message.headers,
      payload: message.payload,
    };
    const always = this.options.envelope === 'always';
    const bare = this.options.envelope === 'never';
    const data = always ? envelope : message.payload;
    // Where the transport has no headers, 'auto' wraps the payload so the id and key still travel.
    const withoutHeaders = bare ? message.payload : envelope;
    switch (this.transport) {
      case 'rmq':
        // persistent: a durable queue keeps the message across a broker restart.
        return new this.ms.RmqRecordBuilder(data).setOptions({ headers, messageId: message.messageId, persistent: true }).build();
      case 'nats': {
        const natsHeaders = loadNats().headers();
        for (const [name, value] of Object.entries(headers)) natsHeaders.set(name, value);
        return new this.ms.NatsRecordBuilder(data).setHeaders(natsHeaders).build();
      }
      case 'mqtt': {
        // QoS 1: the client's publish callback waits for the broker's PUBACK.
        const v5 = (this.client as { options?: { protocolVersion?: number } }).options?.protocolVersion === 5;
        const record = new this.ms.MqttRecordBuilder(v5 ? data : withoutHeaders).setQoS(1);
        return v5 ? record.setProperties({ userProperties: headers }).build() : record.build();
      }
      case 'kafka':
        // The key picks the partition, so messages of one key stay in order there too.
        return { key: message.key ?? undefined, value: data, headers };
      default:
        return withoutHeaders;
    }
  }
}

function loadMicroservices(): Microservices {
  try {
    return require('@nestjs/microservices') as Microservices;
  } catch (error) {
    throw new QueueBoxConfigError('@nestjs/microservices', `${messages.microservicesMissing()} (${describeError(error)})`);
  }
}

/**
 * Transports reject with Errors, or (RabbitMQ's failed connection) with `{ err, url }`: keep the
 * error only, never the URL, which can carry credentials.
 */
function describeEmitError(error: unknown): string {
  if (error instanceof Error || typeof error !== 'object' || error === null) return describeError(error);
  const { err, message } = error as { err?: unknown; message?: unknown };
  if (err !== undefined) return describeError(err);
  return typeof message === 'string' ? describeError(new Error(message)) : 'unknown error';
}

function loadNats(): { headers(): { set(name: string, value: string): void } } {
  return require('@nats-io/transport-node');
}

function transportOf(client: ClientProxyLike, ms: Microservices): ClientProxyTransport {
  if (client instanceof ms.ClientRMQ) return 'rmq';
  if (client instanceof ms.ClientNats) return 'nats';
  if (client instanceof ms.ClientMqtt) return 'mqtt';
  if (client instanceof ms.ClientKafka) return 'kafka';
  if (client instanceof ms.ClientRedis) return 'redis';
  return 'other';
}

function flushNats(client: ClientProxyLike): Promise<void> {
  return (client as unknown as { unwrap(): { flush(): Promise<void> } }).unwrap().flush();
}

/** Subscribes to the cold (or connectable) Observable `emit` returns and waits for it to complete. */
function untilComplete(observable: ReturnType<ClientProxyLike['emit']>, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let settled = false;
    const settle = (error?: unknown) => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', onAbort);
      if (error === undefined) resolve();
      else reject(error);
    };
    const onAbort = () => {
      subscription.unsubscribe();
      settle(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    const subscription = observable.subscribe({ error: (error) => settle(error ?? new Error('emit failed')), complete: () => settle() });
  });
}

function untilSettled(promise: Promise<void>, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
