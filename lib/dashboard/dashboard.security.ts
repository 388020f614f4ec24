import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { HttpException, HttpStatus } from '@nestjs/common';
import { dashboardMessages as messages } from './dashboard.messages';
import type { DashboardRequest, ResolvedDashboardOptions } from './dashboard.options';

/** The header every action sends its token in. */
export const DASHBOARD_TOKEN_HEADER = 'X-QueueBox-Dashboard-Token';

/** Stable codes of the dashboard's refusals and bad requests (the `error` field of a 4xx body). */
export type DashboardErrorCode =
  | 'QUEUEBOX_DASHBOARD_READ_ONLY'
  | 'QUEUEBOX_DASHBOARD_CROSS_SITE'
  | 'QUEUEBOX_DASHBOARD_TOKEN'
  | 'QUEUEBOX_DASHBOARD_BAD_REQUEST'
  | 'QUEUEBOX_DASHBOARD_NOT_FOUND'
  | 'QUEUEBOX_DASHBOARD_NOT_JSON'
  | 'QUEUEBOX_DASHBOARD_UNAVAILABLE';

/** An HTTP answer of the dashboard's API: `{ statusCode, error, message, field? }`. */
export class DashboardHttpError extends HttpException {
  constructor(status: HttpStatus, code: DashboardErrorCode, message: string, field?: string) {
    super({ statusCode: status, error: code, message, ...(field === undefined ? {} : { field }) }, status);
  }
}

const header = (request: DashboardRequest, name: string): string | undefined => {
  const value = request.headers[name.toLowerCase()];
  return Array.isArray(value) ? value[0] : value;
};

/**
 * CSRF protection of the actions. A page of another site can make a browser send a request with
 * the operator's cookies, but it cannot read the answers of this origin, so it never learns the
 * token (GET <path>/api/session, which only the dashboard's own page can read); and browsers say
 * where a request comes from (Sec-Fetch-Site, Origin), which is checked first. Scripts send no
 * Origin: they pass the guard, read the token and send it like the page.
 */
export class DashboardActionCheck {
  /** Random per process, or derived from `tokenSecret` so that replicas agree. */
  readonly token: string;

  constructor(private readonly options: ResolvedDashboardOptions) {
    this.token =
      options.tokenSecret === undefined
        ? randomBytes(32).toString('base64url')
        : createHmac('sha256', options.tokenSecret).update('queuebox-dashboard-action-token:v1').digest('base64url');
  }

  /** Throws the refusal (403) of an action this request may not make; returns when it may. */
  check(request: DashboardRequest): void {
    if (this.options.readOnly) throw new DashboardHttpError(HttpStatus.FORBIDDEN, 'QUEUEBOX_DASHBOARD_READ_ONLY', messages.readOnly());
    const site = header(request, 'sec-fetch-site');
    if (site !== undefined && site !== 'same-origin') {
      throw new DashboardHttpError(HttpStatus.FORBIDDEN, 'QUEUEBOX_DASHBOARD_CROSS_SITE', messages.crossSite(site));
    }
    const origin = header(request, 'origin');
    if (origin !== undefined && !this.originAllowed(origin, header(request, 'host'))) {
      throw new DashboardHttpError(HttpStatus.FORBIDDEN, 'QUEUEBOX_DASHBOARD_CROSS_SITE', messages.originRefused(origin));
    }
    if (!this.tokenMatches(header(request, DASHBOARD_TOKEN_HEADER))) {
      throw new DashboardHttpError(HttpStatus.FORBIDDEN, 'QUEUEBOX_DASHBOARD_TOKEN', messages.tokenRefused(DASHBOARD_TOKEN_HEADER));
    }
  }

  private originAllowed(origin: string, host: string | undefined): boolean {
    let parsed: URL;
    try {
      parsed = new URL(origin);
    } catch {
      return false; // "null" (a sandboxed frame, a file) and anything unparsable
    }
    if (this.options.allowedOrigins.includes(parsed.origin)) return true;
    return host !== undefined && parsed.host === host.toLowerCase();
  }

  /** Constant time over the token's length: the comparison says nothing of how much of a guess was right. */
  private tokenMatches(given: string | undefined): boolean {
    if (given === undefined) return false;
    const expected = Buffer.from(this.token);
    const actual = Buffer.from(given);
    return actual.length === expected.length && timingSafeEqual(actual, expected);
  }
}
