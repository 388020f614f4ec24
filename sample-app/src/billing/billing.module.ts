import { Module } from '@nestjs/common';
import { BillingController } from './billing.controller';
import { BillingLedger } from './billing-ledger';

@Module({
  controllers: [BillingController],
  providers: [BillingLedger],
  exports: [BillingLedger],
})
export class BillingModule {}
