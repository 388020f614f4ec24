import { Module } from '@nestjs/common';
import { OrdersService } from './orders.service';
import { SampleOrdersJob } from './sample-orders.job';

// OutboxService needs no import here: QueueBoxModule is global.
@Module({
  providers: [OrdersService, SampleOrdersJob],
  exports: [OrdersService, SampleOrdersJob],
})
export class OrdersModule {}
