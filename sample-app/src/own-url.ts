import type { AddressInfo } from 'node:net';
import type { HttpAdapterHost } from '@nestjs/core';

/** The base URL this app's HTTP server listens on, or undefined before `listen()` has finished. */
export function ownUrl(adapterHost: HttpAdapterHost): string | undefined {
  const address: AddressInfo | string | null | undefined = adapterHost.httpAdapter?.getHttpServer()?.address();
  if (!address || typeof address === 'string') return undefined;
  return `http://127.0.0.1:${address.port}`;
}
