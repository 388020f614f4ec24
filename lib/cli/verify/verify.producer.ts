import { type INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { DataSource } from 'typeorm';
import { sleepUntil } from '../../common/wait';
import { InboxService } from '../../inbox/inbox.service';
import { QueueBoxModule } from '../../module/queuebox.module';
import { OutboxService } from '../../outbox/outbox.service';
import type { VerifyTableNames } from './verify.database';
import { PATH_NAMES, type ResolvedVerifyOptions, VERIFY_PATHS, type VerifyPath } from './verify.options';
import type { VerifyPayload } from './verify.protocol';
import type { ProducedMessage } from './verify.records';

// The producers of a run: an application that enqueues and receives (QueueBox with no workers),
// several transactions open at once, rate-limited. Messages come in bursts of one key, so the
// transactions of one key overlap and commit out of id order; each is held open a random moment.

/** Consecutive messages of one key: produced at once on different lanes, they commit out of order. */
const BURST = 3;
/** How long each transaction stays open after its write, at most (ms). */
const HOLD_MS = 40;

/** What message number `i` of a run is: its path, key and name, and whether it is poison, flaky or slow. */
export interface PlannedMessage {
  path: VerifyPath;
  key: string | null;
  payload: VerifyPayload;
}

/**
 * The run's messages, by number: bursts of BURST messages of one key, the paths in turn, the keys
 * of each path in turn (the outbox path also has messages without a key). Poison: the third
 * message of each path's first key, and one in 199 (with the `poison` scenario). Flaky: one in 17.
 * Slow: `slowPercent` in 100, spread evenly (see `VerifyPayload`).
 */
export class MessagePlan {
  private readonly seqs = new Map<string, number>();

  constructor(private readonly options: Pick<ResolvedVerifyOptions, 'keys' | 'scenarios' | 'slowPercent' | 'slowMs' | 'handlerMs'>) {}

  message(i: number): PlannedMessage {
    const block = Math.floor(i / BURST);
    const path = VERIFY_PATHS[block % VERIFY_PATHS.length];
    const keys = this.options.keys + (path === 'outbox' ? 1 : 0);
    const k = Math.floor(block / VERIFY_PATHS.length) % keys;
    const key = k === this.options.keys ? null : `${path}-${k}`;
    const series = key ?? `${path}-none`;
    const seq = this.seqs.get(series) ?? 0;
    this.seqs.set(series, seq + 1);
    const poison = this.options.scenarios.includes('poison') && ((k === 0 && seq === 2) || i % 199 === 198);
    const flaky = !poison && i % 17 === 5;
    const slow = !poison && (i * 37) % 100 < this.options.slowPercent;
    const payload: VerifyPayload = { name: `${series}/${seq}`, path, key };
    if (poison) payload.poison = true;
    if (flaky) payload.flaky = true;
    if (slow) {
      payload.slowMs = this.options.slowMs;
      if (path === 'pull') payload.handlerMs = this.options.handlerMs;
    }
    return { path, key, payload };
  }
}

/** QueueBox as the producing application has it: no workers, the run's tables, its sources consumed elsewhere. */
export async function producerApp(
  dataSource: DataSource,
  tables: VerifyTableNames,
): Promise<{ app: INestApplicationContext; outbox: OutboxService; inbox: InboxService }> {
  @Module({
    imports: [
      QueueBoxModule.forRoot({
        dataSource,
        workers: false,
        tables: tables.queuebox,
        pull: { sources: [PATH_NAMES.pull.source as string, PATH_NAMES.batch.source as string] },
        inbox: { relay: { routes: { [PATH_NAMES.relay.source as string]: () => [] } } },
      }),
    ],
  })
  class VerifyProducerModule {}
  const app = await NestFactory.createApplicationContext(VerifyProducerModule, { logger: false });
  return { app, outbox: app.get(OutboxService), inbox: app.get(InboxService) };
}

/** Writes the plan's messages on `lanes` lanes at `rate` per second until `until`, recording each as it commits. */
export class VerifyProducer {
  readonly produced: ProducedMessage[] = [];
  private clock = 0;
  private next = 0;

  constructor(
    private readonly dataSource: DataSource,
    private readonly outbox: OutboxService,
    private readonly inbox: InboxService,
    private readonly plan: MessagePlan,
  ) {}

  async run(p: { rate: number; lanes: number; until: number; signal: AbortSignal }): Promise<void> {
    const startedAt = Date.now();
    const lanes = Array.from({ length: p.lanes }, async () => {
      for (;;) {
        const i = this.next++;
        const due = startedAt + (i * 1000) / p.rate;
        if (due >= p.until) return;
        await sleepUntil(due, p.signal);
        await this.produce(this.plan.message(i));
      }
    });
    // Every lane ends its transaction before the run goes on, also when one failed or the run was interrupted.
    const outcomes = await Promise.allSettled(lanes);
    const failed = outcomes.find((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected');
    if (failed) throw failed.reason;
  }

  private async produce(message: PlannedMessage): Promise<void> {
    const { path, key, payload } = message;
    const started = ++this.clock;
    let rowId = '';
    let messageId: string | undefined;
    await this.dataSource.transaction(async (manager) => {
      if (path === 'outbox') {
        const result = await this.outbox.enqueue(manager, { destination: PATH_NAMES.outbox.destination, key: key ?? undefined, payload });
        rowId = result.id;
        messageId = result.messageId;
      } else {
        const result = await this.inbox.receive(
          { source: PATH_NAMES[path].source as string, idempotencyKey: payload.name, aggregateId: key, payload },
          manager,
        );
        rowId = result.id;
      }
      await new Promise((resolve) => setTimeout(resolve, Math.floor(Math.random() * HOLD_MS)));
    });
    this.produced.push({
      name: payload.name,
      path,
      key,
      poison: payload.poison === true,
      started,
      committed: ++this.clock,
      rowId,
      messageId,
    });
  }
}
