import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  path: string;
  headers: IncomingMessage['headers'];
  body: string;
  /** What the server answered (0 when the connection was dropped or never answered). */
  status: number;
  /** When the request arrived (`Date.now()`). */
  receivedAt: number;
}

/** An answer: a status (with headers), 'hang' (never answer) or 'drop' (destroy the socket). */
export type Answer = number | { status: number; headers: Record<string, string> } | 'hang' | 'drop';

/** Decides the answer to a request. */
export type Responder = (request: RecordedRequest) => Promise<Answer> | Answer;

/** A real local HTTP server that records what it receives, for publisher and end-to-end tests. */
export class HttpRecorder {
  readonly requests: RecordedRequest[] = [];
  private server?: Server;
  private readonly hanging = new Set<ServerResponse>();
  private waiters: { check: () => boolean; resolve: () => void }[] = [];

  constructor(public responder: Responder = () => 200) {}

  async start(): Promise<string> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server!.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    for (const res of this.hanging) res.destroy();
    this.server?.closeAllConnections();
    await new Promise((resolve) => this.server?.close(resolve) ?? resolve(undefined));
  }

  /** Answers every request still hanging with `status`. */
  releaseHanging(status = 200): void {
    for (const res of this.hanging) res.writeHead(status).end();
    this.hanging.clear();
  }

  /** Resolves when `check` holds, re-checked after every request. */
  until(check: () => boolean): Promise<void> {
    if (check()) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ check, resolve }));
  }

  /** Requests answered with a 2xx status. */
  accepted(): RecordedRequest[] {
    return this.requests.filter((r) => r.status >= 200 && r.status < 300);
  }

  private async handle(req: IncomingMessage, res: ServerResponse) {
    const receivedAt = Date.now();
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const request: RecordedRequest = {
      path: req.url ?? '',
      headers: req.headers,
      body: Buffer.concat(chunks).toString(),
      status: 0,
      receivedAt,
    };
    const answer = await this.responder(request);
    if (answer === 'hang') {
      this.hanging.add(res);
      res.on('close', () => this.hanging.delete(res));
    } else if (answer === 'drop') {
      req.socket.destroy();
    } else if (typeof answer === 'number') {
      request.status = answer;
      res.writeHead(answer).end();
    } else {
      request.status = answer.status;
      res.writeHead(answer.status, answer.headers).end();
    }
    this.requests.push(request);
    this.waiters = this.waiters.filter((waiter) => {
      if (!waiter.check()) return true;
      waiter.resolve();
      return false;
    });
  }
}
