import { Controller, Param, Post, Req, Res, type Type, UseGuards } from '@nestjs/common';
import { InboxReceiver } from './inbox-receiver';
import type { ResolvedReceiverOptions } from './inbox-receiver.options';

interface PlatformRequest {
  method?: string;
  /** Express and Fastify: the path as received, with any global prefix and the query string. */
  originalUrl?: string;
  url?: string;
  headers: Record<string, string | string[] | undefined>;
  rawBody?: Buffer;
  body?: unknown;
}

interface PlatformResponse {
  status(code: number): unknown;
}

/**
 * Builds the receiver's controller for the configured path and guards (decorators take their
 * arguments when the class is declared, so the class is declared here, once per module).
 */
export function createInboxReceiverController(options: ResolvedReceiverOptions): Type<unknown> {
  @Controller(options.path)
  @UseGuards(...options.guards)
  class InboxReceiverController {
    constructor(private readonly receiver: InboxReceiver) {}

    @Post(':source')
    async receive(
      @Param('source') source: string,
      @Req() request: PlatformRequest,
      @Res({ passthrough: true }) response: PlatformResponse,
    ) {
      const url = request.originalUrl ?? request.url;
      const answer = await this.receiver.handle({
        source,
        method: request.method,
        path: url === undefined ? undefined : url.split('?')[0],
        headers: request.headers,
        rawBody: request.rawBody,
        body: request.body,
      });
      response.status(answer.status);
      return answer.body;
    }
  }
  return InboxReceiverController;
}
