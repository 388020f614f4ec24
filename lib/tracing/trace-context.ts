// Trace context through the tables: when `@opentelemetry/api` is installed, the active context at
// enqueue or receive is written into the message headers by the application's global propagator
// (`propagation.setGlobalPropagator`, as the Node SDK registers it: W3C trace context and baggage by
// default, or B3, Jaeger, a custom one); the publish, relay and handler spans are started in the
// context it extracts from them, on every attempt, and the publisher's headers carry the publish
// span's. When no propagator is registered (the API's default does nothing), W3C `traceparent` and
// `tracestate` are written and read here instead. Without OpenTelemetry installed (or with nothing
// to carry) nothing is added and no span is started.

import type * as OpenTelemetry from '@opentelemetry/api';
import { describeError, isInstance } from '../common/errors';
import { TRACEPARENT_HEADER, TRACESTATE_HEADER } from '../wire-headers';

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const INVALID_TRACE_ID = '0'.repeat(32);
const INVALID_SPAN_ID = '0'.repeat(16);

let api: typeof OpenTelemetry | null | undefined;

/** `@opentelemetry/api` when the application has it installed, loaded on first use. */
function openTelemetry(): typeof OpenTelemetry | null {
  if (api === undefined) {
    try {
      api = require('@opentelemetry/api') as typeof OpenTelemetry;
    } catch {
      api = null;
    }
  }
  return api;
}

/**
 * The header fields the global propagator writes (`traceparent`, `baggage`, `b3`...), or none when
 * the application registered no propagator (the API's default propagator has no fields).
 */
function propagatorFields(otel: typeof OpenTelemetry): string[] {
  try {
    return otel.propagation.fields();
  } catch {
    return [];
  }
}

/** Whether `headers` carry context (any field of the propagator, or a W3C `traceparent`). */
function carriesContext(otel: typeof OpenTelemetry, headers: Record<string, string> | null | undefined): boolean {
  if (!headers) return false;
  const fields = propagatorFields(otel);
  return fields.length > 0 ? fields.some((field) => headers[field] !== undefined) : Boolean(headers[TRACEPARENT_HEADER]);
}

/**
 * `headers` plus the active context (trace context, baggage: whatever the propagator carries).
 * Headers that already carry context are kept as they are: the caller chose the parent.
 */
export function withTraceContext<H>(headers: H): H | Record<string, string> {
  // Headers that are not an object are left for validation to reject.
  if (headers !== undefined && (typeof headers !== 'object' || headers === null || Array.isArray(headers))) return headers;
  const otel = openTelemetry();
  if (!otel) return headers;
  if (headers && carriesContext(otel, headers as Record<string, string>)) return headers;
  return activeTraceContext(headers as Record<string, string> | undefined) ?? headers;
}

/**
 * `headers` with the active context written into them by the global propagator (its fields
 * replaced), or undefined when there is nothing to write (then callers keep their object as it is:
 * nothing is copied). With no propagator registered, the active span's W3C `traceparent` /
 * `tracestate`.
 */
export function activeTraceContext(headers: Record<string, string> | undefined): Record<string, string> | undefined {
  const otel = openTelemetry();
  if (!otel) return undefined;
  const fields = propagatorFields(otel);
  if (fields.length === 0) return activeW3cContext(otel, headers);
  const active = otel.context.active();
  // Nothing active to carry: skip the copy (the common case of a process without tracing).
  if (!otel.trace.getSpan(active) && !otel.propagation.getBaggage(active)) return undefined;
  const written: Record<string, string> = {};
  otel.propagation.inject(active, written);
  if (Object.keys(written).length === 0) return undefined;
  const traced: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) if (!fields.includes(name)) traced[name] = value;
  return Object.assign(traced, written);
}

/** The active span's W3C trace context, written by QueueBox (no propagator is registered). */
function activeW3cContext(otel: typeof OpenTelemetry, headers: Record<string, string> | undefined): Record<string, string> | undefined {
  const span = otel.trace.getActiveSpan();
  if (!span) return undefined;
  const context = span.spanContext();
  if (!otel.isSpanContextValid(context)) return undefined;
  const flags = (context.traceFlags & 0xff).toString(16).padStart(2, '0');
  const { [TRACESTATE_HEADER]: _previous, ...rest } = headers ?? {};
  const traced: Record<string, string> = { ...rest, [TRACEPARENT_HEADER]: `00-${context.traceId}-${context.spanId}-${flags}` };
  const state = context.traceState?.serialize();
  if (state) traced[TRACESTATE_HEADER] = state;
  return traced;
}

export interface SpanDescription {
  /** e.g. `billing publish`, `orders process` (OpenTelemetry messaging conventions: `<destination> <operation>`). */
  name: string;
  kind: 'producer' | 'consumer';
  attributes: Record<string, string | number>;
}

let noopTracerProvider: unknown;

/**
 * Whether no SDK registered a tracer provider: the API is installed (many libraries bring it
 * along) but every span would be a no-op. Checked on each call, since an SDK can be registered
 * after QueueBox started.
 */
function noTracerProvider(otel: typeof OpenTelemetry): boolean {
  const provider = otel.trace.getTracerProvider() as { getDelegate?: () => unknown };
  if (typeof provider.getDelegate !== 'function') return false;
  noopTracerProvider ??= new otel.ProxyTracerProvider().getDelegate();
  return provider.getDelegate() === noopTracerProvider;
}

/**
 * Whether `inSpan` would start a span for a message with `headers`: OpenTelemetry is installed, and
 * an SDK is registered or the headers carry a parent. A hot path can skip `inSpan` (and the
 * closures it takes) when not.
 */
export function spanNeeded(headers: Record<string, string> | null | undefined): boolean {
  const otel = openTelemetry();
  return otel !== null && (carriesContext(otel, headers) || !noTracerProvider(otel));
}

/**
 * Runs `work` in a span whose parent is the `traceparent` stored in `headers` (a new trace when
 * there is none). Without OpenTelemetry, just runs `work`; so it does when no SDK is registered
 * and there is no parent to carry (a no-op span without a parent changes nothing `work` can see).
 */
export function inSpan<T>(
  headers: Record<string, string> | null | undefined,
  describe: () => SpanDescription,
  work: () => Promise<T>,
): Promise<T> {
  const otel = openTelemetry();
  if (!otel || (!carriesContext(otel, headers) && noTracerProvider(otel))) {
    // `work`'s own promise, not one more around it (this runs once per message); a synchronous
    // throw still becomes a rejection, as from an async function.
    try {
      return work();
    } catch (error) {
      return Promise.reject(error);
    }
  }
  return inActiveSpan(otel, headers, describe(), work);
}

async function inActiveSpan<T>(
  otel: typeof OpenTelemetry,
  headers: Record<string, string> | null | undefined,
  span: SpanDescription,
  work: () => Promise<T>,
): Promise<T> {
  const parent = parentContext(otel, headers);
  const tracer = otel.trace.getTracer('queuebox');
  const kind = span.kind === 'producer' ? otel.SpanKind.PRODUCER : otel.SpanKind.CONSUMER;
  return tracer.startActiveSpan(span.name, { kind, attributes: span.attributes }, parent, async (active) => {
    try {
      return await work();
    } catch (error) {
      recordFailure(otel, active, error);
      throw error;
    } finally {
      active.end();
    }
  });
}

/** Marks `span` failed with `error`: whatever was thrown (describeError never throws; reading a hostile Error's fields may). */
function recordFailure(otel: typeof OpenTelemetry, span: OpenTelemetry.Span, error: unknown): void {
  const text = describeError(error);
  try {
    span.recordException(isInstance(error, Error) ? error : text);
  } catch {
    span.recordException(text);
  }
  span.setStatus({ code: otel.SpanStatusCode.ERROR, message: text });
}

/** The publish span of one message of a `publishBatch` call: the headers it goes out with, and its end. */
export interface BatchedSpan {
  /** The message's headers carrying this span's context (the destination continues from it). */
  headers: Record<string, string>;
  /** Ends the span: failed with `error`, or published when there is none. */
  end(error?: unknown): void;
}

/**
 * For one message of a `publishBatch` call: its publish span, as `inSpan` would start it (its
 * parent the context its headers carry) but not made active, since the call serves many messages;
 * the caller ends it with the message's own result. Undefined when `spanNeeded` is false.
 */
export function startBatchedSpan(message: {
  destination: string;
  messageId: string;
  attempt: number;
  headers: Record<string, string>;
}): BatchedSpan | undefined {
  const otel = openTelemetry();
  if (!otel || (!carriesContext(otel, message.headers) && noTracerProvider(otel))) return undefined;
  const description = publishSpan(message);
  const parent = parentContext(otel, message.headers);
  const span = otel.trace
    .getTracer('queuebox')
    .startSpan(description.name, { kind: otel.SpanKind.PRODUCER, attributes: description.attributes }, parent);
  const headers = otel.context.with(otel.trace.setSpan(parent, span), () => activeTraceContext(message.headers)) ?? message.headers;
  return {
    headers,
    end(error?: unknown) {
      if (error !== undefined) recordFailure(otel, span, error);
      span.end();
    },
  };
}

/**
 * The context the stored headers carry: extracted by the global propagator (trace context,
 * baggage, whatever it reads), or, with none registered, the W3C `traceparent` read here. The root
 * context when they carry none (a new trace).
 */
function parentContext(otel: typeof OpenTelemetry, headers: Record<string, string> | null | undefined): OpenTelemetry.Context {
  if (propagatorFields(otel).length > 0) {
    try {
      return otel.propagation.extract(otel.ROOT_CONTEXT, headers ?? {});
    } catch {
      return otel.ROOT_CONTEXT;
    }
  }
  const match = TRACEPARENT.exec(headers?.[TRACEPARENT_HEADER] ?? '');
  if (!match || match[1] === INVALID_TRACE_ID || match[2] === INVALID_SPAN_ID) return otel.ROOT_CONTEXT;
  const state = headers?.[TRACESTATE_HEADER];
  return otel.trace.setSpanContext(otel.ROOT_CONTEXT, {
    traceId: match[1],
    spanId: match[2],
    traceFlags: Number.parseInt(match[3], 16),
    isRemote: true,
    traceState: state ? otel.createTraceState(state) : undefined,
  });
}

/** The span of one publish attempt. */
export function publishSpan(message: { destination: string; messageId: string; attempt: number }): SpanDescription {
  return {
    name: `${message.destination} publish`,
    kind: 'producer',
    attributes: {
      'messaging.system': 'queuebox',
      'messaging.operation.type': 'send',
      'messaging.destination.name': message.destination,
      'messaging.message.id': message.messageId,
      'queuebox.attempt': message.attempt,
    },
  };
}

/** The span of one relay forward or pull handler attempt. */
export function processSpan(
  message: { source: string; idempotencyKey: string; attempt: number },
  component: 'relay' | 'pull',
): SpanDescription {
  return {
    name: `${message.source} process`,
    kind: 'consumer',
    attributes: {
      'messaging.system': 'queuebox',
      'messaging.operation.type': 'process',
      'messaging.destination.name': message.source,
      'messaging.message.id': message.idempotencyKey,
      'queuebox.component': component,
      'queuebox.attempt': message.attempt,
    },
  };
}
