import { type CanActivate, type ExecutionContext, Injectable } from '@nestjs/common';

/**
 * Lets in requests from this machine only: the sample's stand-in for your operators'
 * authentication (a session, an SSO header, Passport). The dashboard refuses to start without one.
 */
@Injectable()
export class LocalhostGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ socket: { remoteAddress?: string } }>();
    return ['127.0.0.1', '::1', '::ffff:127.0.0.1'].includes(request.socket.remoteAddress ?? '');
  }
}
